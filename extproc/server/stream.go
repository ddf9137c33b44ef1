package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errImmediate ends a stream after an ImmediateResponse: Envoy sends the
// local reply and closes its side (external_processor.proto).
var errImmediate = errors.New("immediate response sent")

// protocolError is a message Envoy would never send in this state, or
// content kvgate cannot accept; the stream ends with INVALID_ARGUMENT.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return "ext_proc protocol: " + e.msg }

func protoErr(format string, args ...any) error {
	return &protocolError{msg: fmt.Sprintf(format, args...)}
}

// sendError is a failed Send to Envoy.
type sendError struct{ err error }

func (e *sendError) Error() string { return "ext_proc send: " + e.err.Error() }
func (e *sendError) Unwrap() error { return e.err }

// streamState is one HTTP request's ext_proc stream: Envoy's messages in,
// one Route call, the answer out, then the response path observed for the
// ticket.
type streamState struct {
	s    *Server
	grpc extprocv3.ExternalProcessor_ProcessServer
	ctx  context.Context

	modeSet          bool
	reqMode, resMode filterv3.ProcessingMode_BodySendMode

	// request path
	gotReqHeaders bool
	started       time.Time
	req           Request
	spoofed       []string
	body          []byte
	chunkEnds     []int // end offset in body of each received chunk (FULL_DUPLEX)
	gotBody       bool
	routed        bool

	// after routing
	ticket      Lifecycle
	debugHeader string
	finished    bool
	served      bool

	// response path
	resHeaders bool
	resStatus  int
	firstByte  bool
	resDone    bool
}

func (st *streamState) run() error {
	outcome := OutcomeStreamError
	defer func() { st.finish(outcome) }()
	for {
		msg, err := st.grpc.Recv()
		if err != nil {
			outcome = st.endOutcome(err)
			if err == io.EOF {
				return nil
			}
			if _, ok := status.FromError(err); ok {
				return err
			}
			return status.Errorf(codes.Unknown, "ext_proc receive: %v", err)
		}
		err = st.handle(msg)
		if err == nil {
			continue
		}
		var pe *protocolError
		var se *sendError
		switch {
		case errors.Is(err, errImmediate):
			return nil
		case errors.As(err, &pe):
			st.s.c.protocolErrors.Add(1)
			st.s.log.Warn("ext_proc protocol error", "err", err, "request_id", st.req.RequestID)
			outcome = OutcomeStreamError
			return status.Error(codes.InvalidArgument, err.Error())
		case errors.As(err, &se):
			outcome = OutcomeStreamError
			if st.ctx.Err() != nil {
				outcome = OutcomeClientCancel
			}
			return status.Errorf(codes.Unavailable, "%v", err)
		default:
			if st.ctx.Err() != nil {
				outcome = OutcomeClientCancel
				return status.FromContextError(st.ctx.Err()).Err()
			}
			return status.Errorf(codes.Internal, "%v", err)
		}
	}
}

// endOutcome classifies how the stream closed before the response was seen
// to end. A half-close (EOF) with response body mode NONE is the only end
// signal that mode gives, so it counts as the response's end.
func (st *streamState) endOutcome(err error) Outcome {
	switch {
	case err == io.EOF:
		if st.resHeaders && st.resMode == filterv3.ProcessingMode_NONE {
			return statusOutcome(st.resStatus)
		}
		return OutcomeClientCancel
	case status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled):
		return OutcomeClientCancel
	case status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	}
	return OutcomeStreamError
}

func statusOutcome(code int) Outcome {
	switch {
	case code == http.StatusGatewayTimeout:
		return OutcomeTimeout
	case code >= 500:
		return OutcomeUpstreamError
	}
	return OutcomeOK
}

func (st *streamState) finish(o Outcome) {
	if st.ticket != nil && !st.finished {
		st.finished = true
		st.ticket.Finish(o)
	}
}

func (st *streamState) markFirstByte() {
	if st.ticket != nil && !st.firstByte && !st.finished {
		st.firstByte = true
		st.ticket.FirstByte()
	}
}

func (st *streamState) send(r *extprocv3.ProcessingResponse) error {
	if err := st.grpc.Send(r); err != nil {
		return &sendError{err}
	}
	return nil
}

func (st *streamState) handle(msg *extprocv3.ProcessingRequest) error {
	if !st.modeSet {
		// Only the first message carries protocol_config
		// (external_processor.proto).
		st.modeSet = true
		st.reqMode, st.resMode = st.s.cfg.AssumedRequestBodyMode, st.s.cfg.AssumedResponseBodyMode
		if pc := msg.GetProtocolConfig(); pc != nil {
			st.reqMode, st.resMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
		}
	}
	switch r := msg.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.onRequestHeaders(msg, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return st.onRequestBody(r.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return st.onRequestTrailers()
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return st.onResponseHeaders(msg, r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return st.onResponseBody(msg, r.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return st.onResponseTrailers(msg)
	}
	return protoErr("message carries no request, response or trailers")
}

func (st *streamState) onRequestHeaders(msg *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	if st.gotReqHeaders {
		return protoErr("request_headers received twice on one stream")
	}
	st.gotReqHeaders = true
	st.started = time.Now()
	req, spoofed, err := decodeRequestHeaders(h.GetHeaders(), st.s.cfg.MaxHeaderCount, st.s.cfg.MaxHeaderBytes)
	if err != nil {
		st.req.RequestID = req.RequestID
		return st.immediate(http.StatusRequestHeaderFieldsTooLarge, errorJSON(http.StatusRequestHeaderFieldsTooLarge, err.Error()), nil, "kvgate_headers_too_large")
	}
	hint, err := subsetHint(msg.GetMetadataContext())
	if err != nil {
		return protoErr("%v", err)
	}
	req.SubsetHint = hint
	req.Source, req.EnvoyDebug = sourceAddress(msg.GetAttributes()), envoyDebug(msg.GetMetadataContext())
	st.req, st.spoofed = req, spoofed

	if h.GetEndOfStream() || st.reqMode == filterv3.ProcessingMode_NONE {
		st.s.c.headerOnly.Add(1)
		d, err := st.decide(nil)
		if err != nil {
			return err
		}
		// A headers response can replace the body only with
		// CONTINUE_AND_REPLACE; a request without a body keeps none.
		d.MutatedBody = nil
		c := &extprocv3.CommonResponse{HeaderMutation: routingMutation(st.spoofed, d), ClearRouteCache: true}
		if err := st.send(requestHeadersResponse(c, destinationMetadata(d))); err != nil {
			return err
		}
		st.decided()
		return nil
	}
	switch st.reqMode {
	case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		// The headers answer waits for the whole body: routing needs it, and
		// in full-duplex mode Envoy keeps streaming the body meanwhile. GIE's
		// EPP does the same (pkg/lwepp/handlers/server.go, headersDeferred).
		st.s.c.fullDuplex.Add(1)
		return nil
	case filterv3.ProcessingMode_BUFFERED:
		// Envoy waits for this answer before sending the buffered body; the
		// routing headers go in the body response.
		st.s.c.buffered.Add(1)
		return st.send(requestHeadersResponse(&extprocv3.CommonResponse{HeaderMutation: stripMutation(st.spoofed)}, nil))
	}
	return protoErr("request body mode %s is not supported (kvgate needs FULL_DUPLEX_STREAMED, BUFFERED or NONE)", st.reqMode)
}

func (st *streamState) onRequestBody(b *extprocv3.HttpBody) error {
	if !st.gotReqHeaders {
		return protoErr("request_body before request_headers")
	}
	if st.routed {
		return protoErr("request_body after the request was routed")
	}
	limit := st.s.cfg.MaxBodyBytes
	switch st.reqMode {
	case filterv3.ProcessingMode_BUFFERED:
		if st.gotBody {
			return protoErr("second request_body in BUFFERED mode (Envoy sends the whole body once)")
		}
		st.gotBody = true
		if len(b.GetBody()) > limit {
			return st.tooLarge()
		}
		d, err := st.decide(b.GetBody())
		if err != nil {
			return err
		}
		c := &extprocv3.CommonResponse{HeaderMutation: routingMutation(st.spoofed, d), ClearRouteCache: true}
		if d.MutatedBody != nil {
			c.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: d.MutatedBody}}
		}
		if err := st.send(requestBodyResponse(c, destinationMetadata(d))); err != nil {
			return err
		}
		st.decided()
		return nil
	case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		chunk := b.GetBody()
		if len(chunk) > limit-len(st.body) {
			return st.tooLarge()
		}
		st.body = appendBounded(st.body, chunk, limit)
		st.chunkEnds = append(st.chunkEnds, len(st.body))
		st.gotBody = true
		if b.GetEndOfStream() {
			return st.routeFullDuplex(true)
		}
		return nil
	}
	return protoErr("request_body received but request body mode is %s", st.reqMode)
}

// appendBounded appends without letting capacity grow past limit, so an
// accepted body never reserves more than the configured bound.
func appendBounded(dst, src []byte, limit int) []byte {
	need := len(dst) + len(src)
	if need > cap(dst) {
		c := min(max(2*cap(dst), need, 4096), limit)
		grown := make([]byte, len(dst), max(c, need))
		copy(grown, dst)
		dst = grown
	}
	return append(dst, src...)
}

func (st *streamState) onRequestTrailers() error {
	if !st.gotReqHeaders {
		return protoErr("request_trailers before request_headers")
	}
	if !st.routed {
		switch st.reqMode {
		case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
			// Trailers end a full-duplex request whose last body chunk had no
			// end_of_stream.
			if err := st.routeFullDuplex(false); err != nil {
				return err
			}
		default:
			return protoErr("request_trailers before request_body in %s mode", st.reqMode)
		}
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}})
}

// routeFullDuplex answers the deferred headers, then re-emits the body as
// StreamedBodyResponses: the original chunks, or the mutated body cut at
// MaxStreamedChunk. end marks the last chunk end_of_stream (false when
// trailers follow).
func (st *streamState) routeFullDuplex(end bool) error {
	var body []byte
	if st.gotBody {
		body = st.body
		if body == nil {
			body = []byte{}
		}
	}
	d, err := st.decide(body)
	if err != nil {
		return err
	}
	c := &extprocv3.CommonResponse{HeaderMutation: routingMutation(st.spoofed, d), ClearRouteCache: true}
	if err := st.send(requestHeadersResponse(c, destinationMetadata(d))); err != nil {
		return err
	}
	st.decided()
	var chunks [][]byte
	if d.MutatedBody != nil {
		chunks = appendChunks(chunks, d.MutatedBody)
	} else {
		start := 0
		for _, e := range st.chunkEnds {
			chunks = appendChunks(chunks, st.body[start:e])
			start = e
		}
	}
	for i, ch := range chunks {
		if err := st.send(requestBodyResponse(streamedChunk(ch, end && i == len(chunks)-1), nil)); err != nil {
			return err
		}
	}
	st.body, st.chunkEnds, st.req.Body = nil, nil, nil
	return nil
}

// decide calls the router once and validates its answer; a rejection is
// sent as an ImmediateResponse and returned as errImmediate.
func (st *streamState) decide(body []byte) (*Decision, error) {
	st.req.Body = body
	d, rerr, panicked := st.callRouter()
	if panicked != nil {
		st.s.c.routerPanics.Add(1)
		st.s.log.Error("router panicked", "panic", panicked, "request_id", st.req.RequestID)
		return nil, st.immediate(http.StatusInternalServerError, errorJSON(http.StatusInternalServerError, "kvgate routing failed"), nil, "kvgate_router_panic")
	}
	if rerr == nil && d != nil {
		// Owned from here: every exit path finishes it.
		st.ticket = d.Ticket
	}
	if err := st.ctx.Err(); err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, st.immediate(rerr.Status, rerr.Body, rerr.Headers, "kvgate_route_error")
	}
	if err := validateDecision(d); err != nil {
		st.s.c.badDecisions.Add(1)
		st.s.log.Error("router returned an invalid decision", "err", err, "request_id", st.req.RequestID)
		st.finish(OutcomeStreamError)
		return nil, st.immediate(http.StatusInternalServerError, errorJSON(http.StatusInternalServerError, "kvgate routing failed"), nil, "kvgate_invalid_decision")
	}
	st.debugHeader = d.DebugHeader
	return d, nil
}

func (st *streamState) callRouter() (d *Decision, rerr *RouteError, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			d, rerr, panicked = nil, nil, p
		}
	}()
	d, rerr = st.s.router.Route(st.ctx, &st.req)
	return d, rerr, nil
}

// decided records that the routing headers went out.
func (st *streamState) decided() {
	st.routed = true
	st.s.c.routed.Add(1)
	if f := st.s.cfg.OnDecision; f != nil {
		f(time.Since(st.started))
	}
}

func (st *streamState) tooLarge() error {
	msg := fmt.Sprintf("request body exceeds the limit of %d bytes", st.s.cfg.MaxBodyBytes)
	st.body, st.chunkEnds = nil, nil
	return st.immediate(http.StatusRequestEntityTooLarge, errorJSON(http.StatusRequestEntityTooLarge, msg), nil, "kvgate_body_too_large")
}

func (st *streamState) immediate(code int, body []byte, headers map[string]string, details string) error {
	r := immediateResponse(code, body, headers, details)
	st.s.c.immediate[r.GetImmediateResponse().GetStatus().GetCode()].Add(1)
	if err := st.send(r); err != nil {
		return err
	}
	return errImmediate
}

func (st *streamState) reportServed(msg *extprocv3.ProcessingRequest) {
	if st.ticket == nil || st.served {
		return
	}
	if ep := servedEndpoint(msg.GetMetadataContext()); ep != "" {
		st.served = true
		if r, ok := st.ticket.(ServedReporter); ok && !st.finished {
			r.Served(ep)
		}
	}
}

func (st *streamState) onResponseHeaders(msg *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	if !st.gotReqHeaders {
		return protoErr("response_headers before request_headers")
	}
	if st.resHeaders {
		return protoErr("response_headers received twice on one stream")
	}
	// Response headers can precede routing when Envoy answers locally
	// (its own 413 or timeout); there is no ticket then.
	st.resHeaders = true
	st.resStatus = responseStatus(h.GetHeaders())
	st.reportServed(msg)
	if r, ok := st.ticket.(ResponseReporter); ok && !st.finished {
		r.ResponseStatus(st.resStatus, hasHeader(h.GetHeaders(), headerUpstreamServiceTime))
	}
	c := &extprocv3.CommonResponse{}
	if st.debugHeader != "" {
		c.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(HeaderDebug, st.debugHeader)}}
	}
	if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{Response: c}}}); err != nil {
		return err
	}
	if h.GetEndOfStream() || st.resMode == filterv3.ProcessingMode_NONE {
		// With body mode NONE no body message will come: the headers are the
		// first (and last) thing the processor sees of the response.
		st.markFirstByte()
	}
	if h.GetEndOfStream() {
		st.resDone = true
		st.finish(statusOutcome(st.resStatus))
	}
	return nil
}

func (st *streamState) onResponseBody(msg *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) error {
	if !st.resHeaders {
		return protoErr("response_body before response_headers")
	}
	if st.resDone {
		return protoErr("response_body after the end of the response")
	}
	st.reportServed(msg)
	if len(b.GetBody()) > 0 || b.GetEndOfStream() {
		st.markFirstByte()
	}
	switch st.resMode {
	case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		chunks := appendChunks(nil, b.GetBody())
		for i, ch := range chunks {
			r := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
				Response: streamedChunk(ch, b.GetEndOfStream() && i == len(chunks)-1),
			}}}
			if err := st.send(r); err != nil {
				return err
			}
		}
	case filterv3.ProcessingMode_STREAMED, filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_BUFFERED_PARTIAL:
		r := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}}
		if err := st.send(r); err != nil {
			return err
		}
	default:
		return protoErr("response_body received but response body mode is %s", st.resMode)
	}
	if b.GetEndOfStream() {
		st.resDone = true
		st.finish(statusOutcome(st.resStatus))
	}
	return nil
}

func (st *streamState) onResponseTrailers(msg *extprocv3.ProcessingRequest) error {
	if !st.resHeaders {
		return protoErr("response_trailers before response_headers")
	}
	if st.resDone {
		return protoErr("response_trailers after the end of the response")
	}
	st.reportServed(msg)
	if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}); err != nil {
		return err
	}
	st.markFirstByte()
	st.resDone = true
	st.finish(statusOutcome(st.resStatus))
	return nil
}
