package server

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
