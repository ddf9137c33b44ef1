package envoyharness

import (
	"strings"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
)

// Config is what the harness honours of an Envoy configuration: the
// ext_proc filter, the filters before it, the route and the two clusters
// involved. ParseConfig reads it from a bootstrap, an Istio EnvoyFilter or
// Envoy Gateway policies; tests start from a shipped file (Shipped) and
// may change a field to reach a case no shipped file has.
type Config struct {
	// ext_proc filter (ext_proc.proto, processing_mode.proto).
	RequestBodyMode  filterv3.ProcessingMode_BodySendMode
	ResponseBodyMode filterv3.ProcessingMode_BodySendMode
	// ResponseHeaders is response_header_mode SEND. Request headers are
	// always sent: kvgate needs them, and the validator refuses SKIP.
	ResponseHeaders bool
	// RequestTrailers and ResponseTrailers are trailer mode SEND.
	RequestTrailers  bool
	ResponseTrailers bool
	// MessageTimeout bounds each awaited reply outside FULL_DUPLEX_STREAMED
	// (Envoy default 200 ms); when it passes Envoy answers 504 unless
	// failure mode allows.
	MessageTimeout   time.Duration
	FailureModeAllow bool
	// StatusOnError is the local reply status for a gRPC error or protocol
	// violation (Envoy default 500).
	StatusOnError int
	// BufferLimit is the most a BUFFERED body may hold (Envoy answers 413
	// above it: per_connection_buffer_limit_bytes, default 1 MiB).
	BufferLimit int
	// ReceivingNamespaces lists the dynamic metadata namespaces accepted
	// from the processor (metadata_options.receiving_namespaces.untyped);
	// others are dropped.
	ReceivingNamespaces []string
	// ForwardingNamespaces lists the dynamic metadata namespaces sent to the
	// processor with every message (forwarding_namespaces.untyped).
	ForwardingNamespaces []string
	// RequestAttributes is the filter's request_attributes (attributes.go).
	RequestAttributes []string

	// StripHeaders are the request headers removed before ext_proc runs
	// (envoy.filters.http.header_mutation before it, or Envoy Gateway's
	// earlyRequestHeaders).
	StripHeaders []HeaderMatcher

	// Path is the HTTP connection manager's path normalisation, applied
	// before ext_proc and the router (pathnorm.go); the zero value,
	// Envoy's default, changes nothing.
	Path PathNormalization

	// Route is where the router sends the request.
	Route Route
	// ExtProc is the cluster of ext_proc servers (used by Proxy).
	ExtProc ExtProcCluster
}

// Route is the matched route's action.
type Route struct {
	Cluster Cluster
	// Retry is the route's retry policy; nil: one attempt only.
	Retry *RetryPolicy
}

// RetryPolicy is the part of route_components.proto RetryPolicy the
// harness honours.
type RetryPolicy struct {
	NumRetries           int      // num_retries (default 1)
	On                   []string // retry_on conditions
	RetriableStatusCodes []int
}

// Cluster is the upstream cluster and how it picks a host.
type Cluster struct {
	Name string
	// Exactly one of OriginalDst and OverrideHost is set.
	OriginalDst  *OriginalDst
	OverrideHost *OverrideHost
	// Hosts are the endpoints the cluster knows, in Envoy's address
	// spelling (STATIC/STRICT_DNS load_assignment, or what EDS would
	// deliver: see WithWorkers). Unused by ORIGINAL_DST.
	Hosts []string
	// TLS: the cluster has a transport_socket (or transport_socket_matches):
	// Envoy speaks TLS to its hosts, which the Proxy does not (it sends
	// plaintext HTTP).
	TLS bool
}

// OriginalDst is an ORIGINAL_DST cluster's original_dst_lb_config.
type OriginalDst struct {
	MetadataKey *MetadataKey
	// Header is the header read with use_http_header ("" for none).
	Header string
}

// OverrideHost is envoy.load_balancing_policies.override_host.
type OverrideHost struct {
	Sources []HostSource
	// SelectedHostKey, when set, receives the host used.
	SelectedHostKey *MetadataKey
}

// HostSource is one override_host_sources entry: a header or a metadata
// key.
type HostSource struct {
	Header   string
	Metadata *MetadataKey
}

// MetadataKey names a value in dynamic metadata: a namespace and a path
// of struct keys.
type MetadataKey struct {
	Namespace string
	Path      []string
}

// HeaderMatcher matches header names to remove (a StringMatcher's exact,
// prefix, suffix or contains; names are compared lower-case).
type HeaderMatcher struct {
	Exact, Prefix, Suffix, Contains string
}

func (m HeaderMatcher) matches(name string) bool {
	switch {
	case m.Exact != "":
		return name == m.Exact
	case m.Prefix != "":
		return strings.HasPrefix(name, m.Prefix)
	case m.Suffix != "":
		return strings.HasSuffix(name, m.Suffix)
	case m.Contains != "":
		return strings.Contains(name, m.Contains)
	}
	return false
}

// ExtProcCluster is the cluster grpc_service.envoy_grpc names.
type ExtProcCluster struct {
	Name  string
	Hosts []string
	// HealthCheck is its active gRPC health check; nil: none.
	HealthCheck *HealthCheck
	// Outlier is its passive outlier detection on connection failures;
	// nil: none.
	Outlier *OutlierDetection
	// Retry is the ext_proc filter's grpc_service.retry_policy; nil: none.
	Retry *StreamRetry
	// MaxRetries is the cluster's circuit breaker on retries in flight at
	// once (circuit_breakers default-priority max_retries; Envoy's default
	// is 3, cluster/v3/circuit_breaker.proto): a retry past it is not made.
	MaxRetries int
	// TLS: the cluster has a transport_socket (envoy-mtls.yaml): Envoy
	// dials its hosts with TLS; the Proxy dials with ProxyOptions.DialOptions
	// (default plaintext).
	TLS bool
}

// OutlierDetection is the part of a cluster's outlier_detection that
// reacts to a host refusing connections (a replica killed without a
// drain): with split_external_local_origin_errors such failures count
// toward consecutive_local_origin_failure, otherwise toward
// consecutive_gateway_failure (outlier_detection.proto).
type OutlierDetection struct {
	Consecutive        int
	BaseEjection       time.Duration
	MaxEjectionPercent int
}

// StreamRetry is the ext_proc stream's retry policy: the filter's
// grpc_service.retry_policy (config/core/v3 RetryPolicy). Envoy's gRPC
// client turns it into a route retry policy
// (source/common/grpc/async_client_impl.cc, AsyncClientImpl's constructor,
// through Http::Utility::convertCoreToRouteRetryPolicy in
// source/common/http/utility.cc: retry_on, num_retries (default 1), the
// back-off (default base 1 s, max 10 × base), retry_host_predicate and
// host_selection_retry_max_attempts carried over) and ext_proc buffers
// what it sent so that a retry can replay it (ext_proc.cc openStream:
// setBufferBodyForRetry(grpc_service.has_retry_policy()); the async
// client's retry buffer is unbounded, async_client_impl.h
// retryShadowBufferLimit). The router retries a stream only before its
// response has started, so only a stream the processor never answered is
// retried.
type StreamRetry struct {
	// On: the retry_on conditions the harness plays: "connect-failure"
	// (the stream could not open), "reset" (it opened, or not, and ended
	// without any reply), "refused-stream", and "5xx", which includes both.
	On              map[string]bool
	NumRetries      int
	BaseInterval    time.Duration
	MaxInterval     time.Duration
	PreviousHosts   bool // retry_host_predicate envoy.retry_host_predicates.previous_hosts
	HostSelectTries int  // host_selection_retry_max_attempts (default 1)
}

// HealthCheck is a cluster's grpc_health_check.
type HealthCheck struct {
	Interval, Timeout  time.Duration
	Unhealthy, Healthy int
	Service            string
}

// WithWorkers returns c with the worker cluster's endpoints replaced by
// hosts, as EDS or a headless Service would deliver them. An ORIGINAL_DST
// cluster has no endpoints and ignores them.
func (c Config) WithWorkers(hosts ...string) Config {
	c.Route.Cluster.Hosts = append([]string(nil), hosts...)
	return c
}

// AllowingClientDebug returns c without the removal of client-sent
// x-kvgate-* headers that every shipped config performs before ext_proc,
// for a development gateway or a test that reads kvgate's x-kvgate-debug
// answers; the routing headers are still removed.
func (c Config) AllowingClientDebug() Config {
	keep := make([]HeaderMatcher, 0, len(c.StripHeaders))
	for _, m := range c.StripHeaders {
		if m.Prefix == "x-kvgate-" || m.Exact == "x-kvgate-debug" {
			continue
		}
		keep = append(keep, m)
	}
	c.StripHeaders = keep
	return c
}

// shouldRemoveContentLength is processor_state.h
// ProcessorState::shouldRemoveContentLength for the request: Envoy drops
// content-length after sending the headers when the body may change size
// on its way through the processor, and ignores the processor setting it.
func (c Config) shouldRemoveContentLength() bool {
	switch c.RequestBodyMode {
	case filterv3.ProcessingMode_STREAMED, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_BUFFERED_PARTIAL:
		return true
	}
	return false
}

// responseUnprocessed is EncodingProcessorState::noExternalProcess: the
// response path sends nothing, so Envoy closes the stream at the response
// headers (ext_proc.cc encodeHeaders).
func (c Config) responseUnprocessed() bool {
	return !c.ResponseHeaders && !c.ResponseTrailers && c.ResponseBodyMode == filterv3.ProcessingMode_NONE
}
