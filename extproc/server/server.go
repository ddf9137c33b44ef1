package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
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
	// OnDecision, if set, receives the time from request headers in to
	// routing headers out, for each routed request.
	OnDecision func(time.Duration)
	Logger     *slog.Logger
}

// DefaultConfig matches the GIE reference deployment: full-duplex streamed
// bodies both ways, 8 MiB bodies (extproc/openai's default limit).
var DefaultConfig = Config{
	MaxBodyBytes:            8 << 20,
	MaxHeaderCount:          128,
	MaxHeaderBytes:          64 << 10,
	AssumedRequestBodyMode:  filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	AssumedResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
}

// Server implements envoy.service.ext_proc.v3.ExternalProcessor and the
// gRPC health services gateways check.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	router Router
	cfg    Config
	log    *slog.Logger
	health *health.Server
	c      counters

	mu       sync.Mutex
	draining bool
	active   int
	drained  chan struct{}
	once     sync.Once
}

// New returns a server that asks router for every decision. Liveness is
// SERVING from the start; readiness (and "" and the ext_proc service) stays
// NOT_SERVING until SetServing, so a gateway sends no traffic before the
// caller says the router is ready.
func New(router Router, cfg Config) (*Server, error) {
	if router == nil {
		return nil, fmt.Errorf("extproc server: nil router")
	}
	d := DefaultConfig
	if cfg.MaxBodyBytes < 0 || cfg.MaxHeaderCount < 0 || cfg.MaxHeaderBytes < 0 {
		return nil, fmt.Errorf("extproc server: negative limit in config")
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
	s := &Server{router: router, cfg: cfg, log: log, health: health.NewServer(), drained: make(chan struct{})}
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

// Drain marks readiness NOT_SERVING, refuses new streams (UNAVAILABLE) and
// waits until every stream in flight has ended or ctx is done. It returns
// ctx's error, with the number of streams still open, if the deadline came
// first. The caller stops the gRPC server afterwards.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	s.setReady(healthpb.HealthCheckResponse_NOT_SERVING)
	if s.active == 0 {
		s.once.Do(func() { close(s.drained) })
	}
	s.mu.Unlock()
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

func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.active++
	s.c.streamsActive.Add(1)
	return true
}

func (s *Server) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	s.c.streamsActive.Add(-1)
	if s.draining && s.active == 0 {
		s.once.Do(func() { close(s.drained) })
	}
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats { return s.c.snapshot() }

// Process serves one ext_proc stream: Envoy opens one per HTTP request.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	if !s.enter() {
		s.c.streamsRejectedDraining.Add(1)
		return status.Error(codes.Unavailable, "kvgate ext_proc is draining")
	}
	defer s.leave()
	s.c.streamsStarted.Add(1)
	st := &streamState{s: s, grpc: stream, ctx: stream.Context()}
	return st.run()
}
