// Package server is kvgate's Envoy external processor (ext_proc) on the wire:
// it decodes Envoy's messages for one HTTP request, asks a Router once where
// the request goes, and encodes the answer the way the Gateway API Inference
// Extension endpoint-picker protocol expects. Routing itself lives behind
// Router; nothing here knows about tokens, caches or load.
package server

import "context"

// Router decides where one request goes. It is called exactly once per
// request, when the whole request body is in hand (or at the end of the
// headers for a request without a body).
type Router interface {
	// Route decides for one request. A non-nil *RouteError becomes an
	// ImmediateResponse (its status and OpenAI-style JSON body); otherwise the
	// Decision must be non-nil.
	Route(ctx context.Context, req *Request) (*Decision, *RouteError)
}

// Request is what the router sees of one HTTP request.
type Request struct {
	Method string // :method
	Path   string // :path
	// Headers holds every request header (pseudo-headers included) under its
	// lower-case name; repeated headers are joined with ", " (RFC 9110 §5.3).
	// Client-supplied routing headers (x-gateway-destination-endpoint*,
	// x-prefiller-host-port) are already removed: they are never trusted.
	Headers map[string]string
	// Body is the whole request body; nil for a request without one
	// (GET, or request body mode NONE).
	Body []byte
	// SubsetHint lists the endpoints the proxy allows (filter metadata
	// envoy.lb.subset_hint / x-gateway-destination-endpoint-subset, GIE
	// endpoint-picker protocol). nil means no hint; a non-nil empty slice
	// means the proxy sent a hint naming no endpoint (answer 503).
	SubsetHint []string
	RequestID  string // x-request-id
	// Debug: the client asked for the x-kvgate-debug response header
	// (x-kvgate-debug: 1). Whether it gets it is the router's decision.
	Debug bool
	// Source is the client's address as Envoy saw it (the request
	// attribute source.address, "ip:port"), "" when Envoy sends none (its
	// ext_proc filter lists source.address in request_attributes).
	Source string
	// EnvoyDebug: Envoy's metadata_context carries kvgate/debug_header:
	// true, which only Envoy's own configuration can write (a set_metadata
	// filter on an operators' listener); a client cannot.
	EnvoyDebug bool
}

// Decision is the router's answer for a routed request.
type Decision struct {
	Endpoint  string   // primary ip:port
	Fallbacks []string // ip:port each, walked in order on retry
	Prefiller string   // ip:port of the prefill worker, or "" for none
	// MutatedBody replaces the request body when non-nil (content-length is
	// rewritten to match).
	MutatedBody []byte
	// ExtraHeaders are set on the upstream request (lower-case names; the
	// routing headers themselves may not be overridden).
	ExtraHeaders map[string]string
	// DebugHeader, when non-empty, is returned to the client as response
	// header x-kvgate-debug.
	DebugHeader string
	// Ticket follows the request to its end; may be nil.
	Ticket Lifecycle
}

// RouteError rejects a request with an HTTP status and an OpenAI-style JSON
// error body.
type RouteError struct {
	Status  int
	Body    []byte            // OpenAI JSON; generated from Status when nil
	Headers map[string]string // extra response headers
}

// Lifecycle follows one routed request after its routing decision.
// FirstByte is called at most once, when the first response body byte passes
// (or the response ends without a body); Finish is called exactly once per
// routed request, whatever happens to the stream.
type Lifecycle interface {
	FirstByte()
	Finish(outcome Outcome)
}

// ServedReporter is optionally implemented by a Lifecycle that wants the
// endpoint the proxy actually used (metadata_context envoy.lb /
// x-gateway-destination-endpoint-served), which differs from the primary
// after a retry onto a fallback. Called at most once, before Finish.
type ServedReporter interface {
	Served(endpoint string)
}

// ResponseReporter is optionally implemented by a Lifecycle that wants the
// response's status (passive outlier detection). Called at most once, when
// the response headers pass, before Finish. fromUpstream is false for a
// reply the proxy generated itself (a connect failure's 503, an upstream
// timeout's 504): Envoy's router adds x-envoy-upstream-service-time only to
// responses that came from the upstream.
type ResponseReporter interface {
	ResponseStatus(status int, fromUpstream bool)
}

// Outcome is how a routed request ended.
type Outcome int

const (
	// OutcomeOK: the response completed with a status below 500.
	OutcomeOK Outcome = iota
	// OutcomeClientCancel: the proxy abandoned the stream (client
	// disconnect) before the response completed.
	OutcomeClientCancel
	// OutcomeUpstreamError: the response completed with a 5xx status other
	// than 504.
	OutcomeUpstreamError
	// OutcomeTimeout: the response was a 504 (Envoy's upstream timeout
	// reply), or the stream's deadline passed.
	OutcomeTimeout
	// OutcomeStreamError: the ext_proc stream broke or violated the
	// protocol.
	OutcomeStreamError
	// OutcomeUnobserved: the proxy closed the stream after routing without
	// showing the response. Envoy does so at the upstream's response
	// headers when the response path is configured to send nothing
	// (response header mode SKIP, body NONE, trailers SKIP: ext_proc.cc
	// encodeHeaders closes the stream when noExternalProcess), and a client
	// cancel closes it the same way, so kvgate cannot tell which happened.
	// Prefill is over by then at the latest; the decode may go on unseen.
	OutcomeUnobserved
)

func (o Outcome) String() string {
	switch o {
	case OutcomeOK:
		return "ok"
	case OutcomeClientCancel:
		return "client_cancel"
	case OutcomeUpstreamError:
		return "upstream_error"
	case OutcomeTimeout:
		return "timeout"
	case OutcomeStreamError:
		return "stream_error"
	case OutcomeUnobserved:
		return "unobserved"
	}
	return "unknown"
}
