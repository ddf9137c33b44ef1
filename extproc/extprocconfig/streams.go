package extprocconfig

import (
	"fmt"
	"strings"
	"time"

	"github.com/kvgate/kvgate/internal/yamlconf"
)

// The values of extproc.envoy_routing.
const (
	// RoutingOverrideHost: Envoy's override_host load balancer reads
	// "primary,fallback,…", looks each host up in the cluster and walks the
	// list on retry (load_balancer.cc getSelectedHosts / getEndpoint).
	RoutingOverrideHost = "override_host"
	// RoutingOriginalDst: an ORIGINAL_DST cluster connects to exactly one
	// ip:port from the metadata or the header.
	RoutingOriginalDst = "original_dst"
)

// StreamLimits bounds what ext_proc streams hold. Envoy bounds none of it
// in FULL_DUPLEX_STREAMED mode: it runs no message timer there
// (processor_state.cc onStartProcessorCall) and does not apply
// grpc_service.timeout to the ext_proc stream, so kvgate answers or fails
// each phase itself. The defaults fit a 2 GiB pod.
type StreamLimits struct {
	// BufferBudgetBytes bounds the request headers and bodies held by all
	// streams together while they wait to be routed. Over it a request
	// gets 503 (retry-after 1) instead of more memory. Bodies past their
	// first 256 KiB may take at most three quarters of it, so small
	// requests keep being served while large ones are refused. The
	// default, 64 MiB, holds six maximum-size (8 MiB) prompts at once; the
	// process's memory under a flood of never-ending bodies grew by about
	// four times the budget (e2e TestNeverEndingStreamsBoundedMemory: 203
	// MB), which leaves a 2 GiB pod room for the index and tokenizers.
	BufferBudgetBytes int64 `yaml:"buffer_budget_bytes"`
	// MaxOpen bounds the streams open at once; more get 503.
	MaxOpen int `yaml:"max_open"`
	// MaxOpenPerSourcePercent is one client's fair share of MaxOpen: a
	// source already holding this share gets 429 for another stream while
	// fewer than a share of the slots are free, so one client opening
	// thousands of slow uploads leaves a share to everyone else. Default
	// 25; 100 turns it off (all traffic through one balancer address).
	// The source is SourceHeader's last entry when set, else the IP of
	// Envoy's source.address request attribute (the ext_proc filter must
	// list it: request_attributes: [source.address]); a stream with
	// neither is bounded by MaxOpen alone.
	MaxOpenPerSourcePercent int `yaml:"max_open_per_source_percent"`
	// SourceHeader names the request header identifying the client, e.g.
	// x-forwarded-for when Envoy's HttpConnectionManager sets
	// use_remote_address: true (it then appends the peer's address, the
	// entry kvgate reads). "" reads source.address.
	SourceHeader string `yaml:"source_header"`
	// MinBodyBytesPerSecond and BodyGrace bound a streamed request body's
	// progress: BodyGrace after its headers it must have delivered
	// MinBodyBytesPerSecond bytes for every second since (each byte buys
	// 1/rate s), or it gets 408 (FULL_DUPLEX_STREAMED only; Envoy buffers
	// a BUFFERED body itself). Defaults 1024 B/s and 10 s: an 8 MiB body
	// has to average 70 KB/s anyway to beat request_timeout's 2 min.
	MinBodyBytesPerSecond int               `yaml:"min_body_bytes_per_second"`
	BodyGrace             yamlconf.Duration `yaml:"body_grace"`
	// RequestIdleTimeout is the longest gap between two request-path
	// messages before the request is routed (408 past it).
	RequestIdleTimeout yamlconf.Duration `yaml:"request_idle_timeout"`
	// RequestTimeout bounds request headers to routing decision (408).
	RequestTimeout yamlconf.Duration `yaml:"request_timeout"`
	// MaxDuration bounds a whole stream, response included; past it kvgate
	// ends the stream cleanly and Envoy carries on with the response
	// unprocessed (ext_proc.cc onGrpcClose), its load released as a
	// timeout. Default 1h: longer than any generation, short enough that a
	// stream whose end was never seen does not hold accounting forever.
	MaxDuration yamlconf.Duration `yaml:"max_duration"`
}

// Defaults for StreamLimits, also extproc/server's DefaultConfig (the
// server applies them to a Config built in code).
const (
	DefaultBufferBudgetBytes  = 64 << 20
	DefaultMaxOpenStreams     = 4096
	DefaultRequestIdleTimeout = 30 * time.Second
	DefaultRequestTimeout     = 2 * time.Minute
	DefaultMaxStreamDuration  = time.Hour

	DefaultMaxOpenPerSourcePercent = 25
	DefaultMinBodyBytesPerSecond   = 1024
	DefaultBodyRateGrace           = 10 * time.Second
)

func (s *StreamLimits) applyDefaults() {
	if s.BufferBudgetBytes == 0 {
		s.BufferBudgetBytes = DefaultBufferBudgetBytes
	}
	if s.MaxOpen == 0 {
		s.MaxOpen = DefaultMaxOpenStreams
	}
	if s.RequestIdleTimeout == 0 {
		s.RequestIdleTimeout = yamlconf.Duration(DefaultRequestIdleTimeout)
	}
	if s.RequestTimeout == 0 {
		s.RequestTimeout = yamlconf.Duration(DefaultRequestTimeout)
	}
	if s.MaxDuration == 0 {
		s.MaxDuration = yamlconf.Duration(DefaultMaxStreamDuration)
	}
	if s.MaxOpenPerSourcePercent == 0 {
		s.MaxOpenPerSourcePercent = DefaultMaxOpenPerSourcePercent
	}
	if s.MinBodyBytesPerSecond == 0 {
		s.MinBodyBytesPerSecond = DefaultMinBodyBytesPerSecond
	}
	if s.BodyGrace == 0 {
		s.BodyGrace = yamlconf.Duration(DefaultBodyRateGrace)
	}
}

// validate reports the first invalid bound; path is the section's key
// path, maxBodyKey the key maxBody was read from.
func (s StreamLimits) validate(path, maxBodyKey string, maxBody int) error {
	switch {
	case s.BufferBudgetBytes < int64(maxBody):
		return fmt.Errorf("%s.buffer_budget_bytes: %d is below %s %d: no body that large could ever be buffered", path, s.BufferBudgetBytes, maxBodyKey, maxBody)
	case s.BufferBudgetBytes > 64<<30:
		return fmt.Errorf("%s.buffer_budget_bytes: must be at most 64 GiB", path)
	case s.MaxOpen < 1 || s.MaxOpen > 1<<20:
		return fmt.Errorf("%s.max_open: must be in 1..%d", path, 1<<20)
	case s.RequestIdleTimeout.D() < 100*time.Millisecond:
		return fmt.Errorf("%s.request_idle_timeout: must be at least 100ms", path)
	case s.RequestTimeout.D() < s.RequestIdleTimeout.D():
		return fmt.Errorf("%s.request_timeout: must be at least request_idle_timeout (%s)", path, s.RequestIdleTimeout.D())
	case s.MaxDuration.D() < s.RequestTimeout.D():
		return fmt.Errorf("%s.max_duration: must be at least request_timeout (%s)", path, s.RequestTimeout.D())
	case s.MaxOpenPerSourcePercent < 1 || s.MaxOpenPerSourcePercent > 100:
		return fmt.Errorf("%s.max_open_per_source_percent: %d outside [1, 100] (100: no per-source share)", path, s.MaxOpenPerSourcePercent)
	case s.SourceHeader != "" && (s.SourceHeader != strings.ToLower(s.SourceHeader) || strings.ContainsAny(s.SourceHeader, " :\t")):
		return fmt.Errorf("%s.source_header: %q must be a lower-case header name (Envoy sends header names lower-case)", path, s.SourceHeader)
	case s.MinBodyBytesPerSecond < 1:
		return fmt.Errorf("%s.min_body_bytes_per_second: must be at least 1", path)
	case s.BodyGrace.D() < time.Second || s.BodyGrace.D() > s.RequestTimeout.D():
		return fmt.Errorf("%s.body_grace: %s outside [1s, request_timeout %s]", path, s.BodyGrace.D(), s.RequestTimeout.D())
	}
	return nil
}

// GRPC bounds the ext_proc gRPC server's connections.
type GRPC struct {
	// MaxConcurrentStreams is advertised per connection
	// (SETTINGS_MAX_CONCURRENT_STREAMS); Envoy's HTTP/2 pool opens another
	// connection when one is full.
	MaxConcurrentStreams uint32 `yaml:"max_concurrent_streams"`
	// KeepaliveMinTime: a client pinging more often is disconnected
	// (GOAWAY ENHANCE_YOUR_CALM). grpc-go's default, 5m, would cut off an
	// Envoy configured with HTTP/2 connection_keepalive.
	KeepaliveMinTime yamlconf.Duration `yaml:"keepalive_min_time"`
	// KeepaliveTime: the server pings a connection idle this long ...
	KeepaliveTime yamlconf.Duration `yaml:"keepalive_time"`
	// KeepaliveTimeout: ... and closes it if the ping is not answered.
	KeepaliveTimeout yamlconf.Duration `yaml:"keepalive_timeout"`
}

func (g *GRPC) applyDefaults() {
	if g.MaxConcurrentStreams == 0 {
		g.MaxConcurrentStreams = 1000
	}
	if g.KeepaliveMinTime == 0 {
		g.KeepaliveMinTime = yamlconf.Duration(10 * time.Second)
	}
	if g.KeepaliveTime == 0 {
		g.KeepaliveTime = yamlconf.Duration(30 * time.Second)
	}
	if g.KeepaliveTimeout == 0 {
		g.KeepaliveTimeout = yamlconf.Duration(10 * time.Second)
	}
}

func (g GRPC) validate(path string) error {
	switch {
	case g.MaxConcurrentStreams > 1<<20:
		return fmt.Errorf("%s.max_concurrent_streams: must be at most %d", path, 1<<20)
	case g.KeepaliveMinTime.D() < time.Second:
		return fmt.Errorf("%s.keepalive_min_time: must be at least 1s", path)
	case g.KeepaliveTime.D() < time.Second:
		return fmt.Errorf("%s.keepalive_time: must be at least 1s", path)
	case g.KeepaliveTimeout.D() < 100*time.Millisecond:
		return fmt.Errorf("%s.keepalive_timeout: must be at least 100ms", path)
	}
	return nil
}
