// Package server is kvgate's Envoy external processor (ext_proc) on the wire:
// it decodes Envoy's messages for one HTTP request, asks a Decider once where
// the request goes, and encodes the answer the way the Gateway API Inference
// Extension endpoint-picker protocol expects. Routing itself lives behind
// Decider (extproc.Router is the one kvgate ships); nothing here knows about
// tokens, caches or load.
package server

import (
	"context"

	"github.com/kvgate/kvgate/extproc/openai"
)

// Decider decides where one request goes. It is called exactly once per
// request, when the whole request body is in hand (or at the end of the
// headers for a request without a body).
type Decider interface {
	// Decide decides for one request. A non-nil *RouteError becomes an
	// ImmediateResponse (its status and OpenAI-style JSON body); otherwise the
	// Decision must be non-nil.
	Decide(ctx context.Context, req *Request) (*Decision, *RouteError)
}

// Request is what the decider sees of one HTTP request.
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
	// (x-kvgate-debug: 1). Whether it gets it is the decider's decision.
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

// Decision is the decider's answer for a routed request.
type Decision struct {
	Endpoint  string   // primary ip:port
	Fallbacks []string // ip:port each, walked in order on retry
	Prefiller string   // ip:port of the prefill worker, or "" for none
	// DebugHeader, when non-empty, is returned to the client as response
	// header x-kvgate-debug.
	DebugHeader string
	// Ticket follows the request to its end; may be nil.
	Ticket Lifecycle
}

// ErrorShaper is implemented by a Decider whose routes answer errors in
// more than one shape (extproc.Router: Anthropic's for /v1/messages, as
// vLLM answers there). The server asks it for the body of every local
// reply it writes itself once the request's :path is known (body too
// large, buffer budget, per-source share, timeouts, a failed decider);
// without it, or before the headers are read, the body is OpenAI's.
type ErrorShaper interface {
	ErrorBody(path string, e *openai.Error) []byte
}

// RouteError rejects a request with an HTTP status and an OpenAI-style JSON
// error body.
type RouteError struct {
	Status  int
	Body    []byte            // the error JSON; generated from Status when nil (in the route's shape: ErrorShaper)
	Headers map[string]string // extra response headers
}
