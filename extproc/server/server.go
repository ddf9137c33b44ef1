package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Health service names checked by gateways (GIE endpoint-picker protocol).
const (
	HealthLiveness  = "liveness"
	HealthReadiness = "readiness"
	HealthExtProc   = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// Config bounds what one stream may make the server hold. Zero fields take
// the defaults in DefaultConfig.
type Config struct {
	// MaxBodyBytes is the largest request body accepted; a larger one gets
	// 413 as soon as the limit is crossed, without buffering past it.
	MaxBodyBytes int
	// MaxHeaderCount and MaxHeaderBytes bound the request headers (431
	// above either). The defaults sit above Envoy's own (100 headers,
	// 60 KiB) so a default Envoy never trips them.
	MaxHeaderCount int
	MaxHeaderBytes int
	// AssumedRequestBodyMode and AssumedResponseBodyMode apply when Envoy
	// sends no protocol_config (Envoy before 1.33); they must match the
	// filter's processing_mode.
	AssumedRequestBodyMode  filterv3.ProcessingMode_BodySendMode
	AssumedResponseBodyMode filterv3.ProcessingMode_BodySendMode
	// SingleDestination sends only the primary endpoint: Envoy's
	// ORIGINAL_DST cluster parses the destination as one ip:port
	// (original_dst_cluster.cc metadataOverrideHost with
	// parseInternetAddressAndPortNoThrow), so a list would fail every
	// request. Without it the header and the metadata both carry
	// "primary,fallback,…" for override_host (GIE: one value, both places).
	SingleDestination bool
	// BufferBudgetBytes bounds request headers and bodies held by all
	// streams together until they are routed; over it a request gets 503.
	// Bodies past SmallRequestBytes may take at most three quarters of it.
	BufferBudgetBytes int64
	// MaxOpenStreams bounds the streams open at once (503 above).
	MaxOpenStreams int
	// MaxOpenPerSourcePercent is one source's fair share of
	// MaxOpenStreams (sources.go): a source already holding that many
	// streams gets 429 for another while fewer than that many slots are
	// free, so it can never fill the last share others need. 100: no
	// share. SourceHeader names the request header that identifies the
	// client ("" : Envoy's source.address request attribute).
	MaxOpenPerSourcePercent int
	SourceHeader            string
	// MinBodyBytesPerSecond and BodyRateGrace bound a FULL_DUPLEX_STREAMED
	// request body's progress: it must have delivered
	// MinBodyBytesPerSecond × (time since its headers − BodyRateGrace)
	// bytes, or it is answered 408. Negative rate: unbounded.
	MinBodyBytesPerSecond int
	BodyRateGrace         time.Duration
	// RequestIdleTimeout bounds the gap between request-path messages
	// before routing; RequestTimeout bounds request headers to routing
	// decision. Envoy runs no message timer in FULL_DUPLEX_STREAMED mode
	// (processor_state.cc onStartProcessorCall), so nothing else would.
	RequestIdleTimeout time.Duration
	RequestTimeout     time.Duration
	// MaxStreamDuration bounds a whole stream; past it the stream ends
	// cleanly and Envoy carries on unprocessed (ext_proc.cc onGrpcClose).
	// Negative: unbounded.
	MaxStreamDuration time.Duration
	// OnDecision, if set, receives the time from request headers in to
	// routing headers out, for each routed request.
	OnDecision func(time.Duration)
	Logger     *slog.Logger
}

// SmallRequestBytes is how much of each request may always use the last
// quarter of the buffer budget: small requests keep being served while
// large bodies fill the rest.
const SmallRequestBytes = 256 << 10

// DefaultConfig matches the GIE reference deployment: full-duplex streamed
// bodies both ways, extproc.max_body_bytes' default, and the stream bounds
// of extprocconfig.StreamLimits' defaults (declared there, once).
var DefaultConfig = Config{
	MaxBodyBytes:            extprocconfig.DefaultMaxBodyBytes,
	MaxHeaderCount:          128,
	MaxHeaderBytes:          64 << 10,
	AssumedRequestBodyMode:  filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	AssumedResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	BufferBudgetBytes:       extprocconfig.DefaultBufferBudgetBytes,
	MaxOpenStreams:          extprocconfig.DefaultMaxOpenStreams,
	RequestIdleTimeout:      extprocconfig.DefaultRequestIdleTimeout,
	RequestTimeout:          extprocconfig.DefaultRequestTimeout,
	MaxStreamDuration:       extprocconfig.DefaultMaxStreamDuration,
	MaxOpenPerSourcePercent: extprocconfig.DefaultMaxOpenPerSourcePercent,
	MinBodyBytesPerSecond:   extprocconfig.DefaultMinBodyBytesPerSecond,
	BodyRateGrace:           extprocconfig.DefaultBodyRateGrace,
}

// Server implements envoy.service.ext_proc.v3.ExternalProcessor and the
// gRPC health services gateways check.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	decider Decider
	cfg     Config
	log     *slog.Logger
	health  *health.Server
	c       counters
	budget  *bufferBudget
	refused *refusalLog
	// endpoints memoises the decider's endpoints as Envoy spells them
	// (endpoints.go).
	endpoints endpointSpellings
	// clocks recycles finished streams' timers (startClocks).
	clocks sync.Pool

	mu       sync.Mutex
	draining bool
	active   int
	// bySource counts the open streams of each source that has sent its
	// request headers (sources.go); sourceShare is one source's share.
	bySource    map[string]int
	sourceShare int
	drained     chan struct{}
	once        sync.Once
}

// New returns a server that asks decider for every decision. Liveness is
// SERVING from the start; readiness (and "" and the ext_proc service) stays
// NOT_SERVING until SetServing, so a gateway sends no traffic before the
// caller says the decider is ready.
func New(decider Decider, cfg Config) (*Server, error) {
	if decider == nil {
		return nil, fmt.Errorf("extproc server: nil decider")
	}
	d := DefaultConfig
	if cfg.MaxBodyBytes < 0 || cfg.MaxHeaderCount < 0 || cfg.MaxHeaderBytes < 0 || cfg.BufferBudgetBytes < 0 ||
		cfg.MaxOpenStreams < 0 || cfg.RequestIdleTimeout < 0 || cfg.RequestTimeout < 0 {
		return nil, fmt.Errorf("extproc server: negative limit in config")
	}
	if cfg.BufferBudgetBytes == 0 {
		cfg.BufferBudgetBytes = d.BufferBudgetBytes
	}
	if cfg.MaxOpenStreams == 0 {
		cfg.MaxOpenStreams = d.MaxOpenStreams
	}
	if cfg.RequestIdleTimeout == 0 {
		cfg.RequestIdleTimeout = d.RequestIdleTimeout
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = d.RequestTimeout
	}
	if cfg.MaxStreamDuration == 0 {
		cfg.MaxStreamDuration = d.MaxStreamDuration
	}
	if cfg.MaxOpenPerSourcePercent == 0 {
		cfg.MaxOpenPerSourcePercent = d.MaxOpenPerSourcePercent
	}
	if cfg.MinBodyBytesPerSecond == 0 {
		cfg.MinBodyBytesPerSecond = d.MinBodyBytesPerSecond
	}
	if cfg.BodyRateGrace == 0 {
		cfg.BodyRateGrace = d.BodyRateGrace
	}
	if cfg.MaxOpenPerSourcePercent < 1 || cfg.MaxOpenPerSourcePercent > 100 || cfg.BodyRateGrace < 0 {
		return nil, fmt.Errorf("extproc server: per-source share %d%% outside [1, 100] or negative body rate grace", cfg.MaxOpenPerSourcePercent)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = d.MaxBodyBytes
	}
	if cfg.MaxHeaderCount == 0 {
		cfg.MaxHeaderCount = d.MaxHeaderCount
	}
	if cfg.MaxHeaderBytes == 0 {
		cfg.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if cfg.AssumedRequestBodyMode == filterv3.ProcessingMode_NONE {
		cfg.AssumedRequestBodyMode = d.AssumedRequestBodyMode
	}
	if cfg.AssumedResponseBodyMode == filterv3.ProcessingMode_NONE {
		cfg.AssumedResponseBodyMode = d.AssumedResponseBodyMode
	}
	for _, m := range []filterv3.ProcessingMode_BodySendMode{cfg.AssumedRequestBodyMode, cfg.AssumedResponseBodyMode} {
		if _, ok := filterv3.ProcessingMode_BodySendMode_name[int32(m)]; !ok {
			return nil, fmt.Errorf("extproc server: unknown body send mode %d", m)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.BufferBudgetBytes < int64(cfg.MaxBodyBytes) {
		return nil, fmt.Errorf("extproc server: buffer budget %d is below the body limit %d", cfg.BufferBudgetBytes, cfg.MaxBodyBytes)
	}
	s := &Server{decider: decider, cfg: cfg, log: log, health: health.NewServer(), drained: make(chan struct{}),
		budget: newBufferBudget(cfg.BufferBudgetBytes), refused: newRefusalLog(log), bySource: map[string]int{},
		sourceShare: max(1, cfg.MaxOpenStreams*cfg.MaxOpenPerSourcePercent/100)}
	s.health.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	s.setReady(healthpb.HealthCheckResponse_NOT_SERVING)
	return s, nil
}

// Register adds the ext_proc and health services to g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	extprocv3.RegisterExternalProcessorServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
}

func (s *Server) setReady(st healthpb.HealthCheckResponse_ServingStatus) {
	for _, name := range []string{"", HealthReadiness, HealthExtProc} {
		s.health.SetServingStatus(name, st)
	}
}

// SetServing marks readiness SERVING (ignored once draining).
func (s *Server) SetServing() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.draining {
		s.setReady(healthpb.HealthCheckResponse_SERVING)
	}
}

// SetNotServing marks readiness NOT_SERVING; liveness is unaffected.
func (s *Server) SetNotServing() { s.setReady(healthpb.HealthCheckResponse_NOT_SERVING) }

// Drain marks readiness NOT_SERVING (SetServing is ignored from then on)
// and waits until every stream in flight has ended or ctx is done. It
// returns ctx's error, with the number of streams still open, if the
// deadline came first. New streams are still served: refusing them with
// UNAVAILABLE on a connection Envoy keeps would fail each request closed.
// The caller moves Envoy off instead: readiness fails its health checks
// first, then grpc.Server.GracefulStop sends GOAWAY, after which Envoy opens
// no new stream on the connection.
func (s *Server) Drain(ctx context.Context) error {
	s.StartDrain()
	select {
	case <-s.drained:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		n := s.active
		s.mu.Unlock()
		return fmt.Errorf("extproc drain: %d streams still open: %w", n, ctx.Err())
	}
}

// StartDrain marks readiness NOT_SERVING for good (SetServing is ignored
// from then on) and returns; Drain also waits for the streams in flight.
func (s *Server) StartDrain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining = true
	s.setReady(healthpb.HealthCheckResponse_NOT_SERVING)
	if s.active == 0 {
		s.once.Do(func() { close(s.drained) })
	}
}

func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active >= s.cfg.MaxOpenStreams {
		return false
	}
	s.active++
	s.c.streamsActive.Add(1)
	return true
}

func (s *Server) leave(source string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaveSourceLocked(source)
	s.active--
	s.c.streamsActive.Add(-1)
	if s.draining && s.active == 0 {
		s.once.Do(func() { close(s.drained) })
	}
}

// Process serves one ext_proc stream: Envoy opens one per HTTP request.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	if !s.enter() {
		// A local reply, not a gRPC error: with failure_mode_allow a gRPC
		// error would let the request through unrouted, and without it the
		// client would see status_on_error instead of the reason. Envoy
		// sends it as the request's local reply whatever failure_mode_allow
		// says (ext_proc.cc Filter::onReceiveMessage → sendImmediateResponse
		// → sendLocalReply; failure_mode_allow is read only in onGrpcError
		// and the message timers).
		s.c.refusedOpen.Add(1)
		s.refused.note(refusedMaxOpen, s.peekSource(stream), fmt.Sprintf("%d streams open (extproc.streams.max_open)", s.cfg.MaxOpenStreams))
		r := immediateResponse(http.StatusServiceUnavailable,
			errorJSON(http.StatusServiceUnavailable, fmt.Sprintf("kvgate is serving its limit of %d requests at once; retry", s.cfg.MaxOpenStreams)),
			map[string]string{"retry-after": "1"}, "kvgate_too_many_streams")
		s.c.immediate[http.StatusServiceUnavailable].Add(1)
		if err := stream.Send(r); err != nil {
			return status.Errorf(codes.Unavailable, "ext_proc send: %v", err)
		}
		return nil
	}
	st := &streamState{s: s, grpc: stream, ctx: stream.Context()}
	defer func() { s.leave(st.source) }()
	s.c.streamsStarted.Add(1)
	return st.run()
}
