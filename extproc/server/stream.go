package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
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

// received is one Recv's result, handed from the reader goroutine.
type received struct {
	msg *extprocv3.ProcessingRequest
	err error
}

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
	held          reservation // this stream's share of the buffer budget
	gotBody       bool
	routed        bool
	// source is the client's key once its headers came (sources.go);
	// bodyBytes the request body received so far, for the minimum rate.
	source    string
	bodyBytes int64

	// after routing
	ticket      Lifecycle
	debugHeader string
	finished    bool
	served      bool
	// sent maps each endpoint sent to Envoy (canonical) to the decider's
	// spelling of it, so the served endpoint is reported as the decider
	// knows it.
	sent map[string]string

	// response path
	resHeaders bool
	resStatus  int
	firstByte  bool
	resDone    bool
}

func (st *streamState) run() error {
	outcome := OutcomeStreamError
	defer func() {
		st.releaseBody()
		st.finish(outcome)
	}()
	done := make(chan struct{})
	defer close(done)
	msgs := st.receive(done)
	clk := st.startClocks()
	defer st.s.putClocks(clk)
	for {
		var r received
		select {
		case r = <-msgs:
		case <-clk.rateC:
			outcome = OutcomeTimeout
			return st.expired(limitBodyRate)
		case <-clk.idleC:
			outcome = OutcomeTimeout
			return st.expired(limitRequestIdle)
		case <-clk.wholeC:
			outcome = OutcomeTimeout
			return st.expired(limitRequestTime)
		case <-clk.maxDur:
			outcome = OutcomeTimeout
			return st.expired(limitStreamDuration)
		}
		if r.err != nil {
			outcome = st.endOutcome(r.err)
			return receiveEnded(r.err)
		}
		err := st.handle(r.msg)
		clk.afterMessage(st)
		if err != nil {
			return st.failed(err, &outcome)
		}
	}
}

// receive runs Recv on its own goroutine and hands each message (or the
// error that ends the stream) over the returned channel until done closes:
// Recv blocks until Envoy sends or the stream ends, and run must also watch
// the deadlines (Envoy bounds nothing in FULL_DUPLEX_STREAMED mode, kvgate
// must).
func (st *streamState) receive(done <-chan struct{}) <-chan received {
	msgs := make(chan received)
	go func() {
		for {
			m, err := st.grpc.Recv()
			select {
			case msgs <- received{m, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return msgs
}

// requestClocks are the deadlines of a stream: idle (no request data for
// RequestIdleTimeout), whole (the request not complete within
// RequestTimeout), rate (a streamed body below MinBodyBytesPerSecond,
// armed at the headers; bodyDeadline) and maxDur (MaxStreamDuration, the
// only one still running once the request is routed). A nil channel never
// fires.
type requestClocks struct {
	idle, whole, rate, max       *time.Timer
	idleC, wholeC, rateC, maxDur <-chan time.Time
	cfg                          *Config
}

// startClocks arms a stream's clocks, reusing a finished stream's timers
// (Server.clocks): four timers per stream were a tenth of the server's
// own allocations per request. Reuse is safe because a timer's channel is
// synchronous since Go 1.23 (go.mod says 1.26): after Stop or Reset
// returns, no value from the earlier arming can be received.
func (st *streamState) startClocks() *requestClocks {
	c, _ := st.s.clocks.Get().(*requestClocks)
	if c == nil {
		c = &requestClocks{
			idle:  time.NewTimer(time.Hour),
			whole: time.NewTimer(time.Hour),
			rate:  time.NewTimer(time.Hour),
			max:   time.NewTimer(time.Hour),
		}
		c.stop()
	}
	c.cfg = &st.s.cfg
	c.idle.Reset(st.s.cfg.RequestIdleTimeout)
	c.whole.Reset(st.s.cfg.RequestTimeout)
	c.idleC, c.wholeC, c.rateC, c.maxDur = c.idle.C, c.whole.C, nil, nil
	if d := st.s.cfg.MaxStreamDuration; d > 0 {
		c.max.Reset(d)
		c.maxDur = c.max.C
	}
	return c
}

// afterMessage moves the clocks on after a message was handled: once the
// request is routed what follows is the response, which may stream for
// minutes, so only maxDur still bounds it; before that each message
// restarts idle and re-arms the body rate.
func (c *requestClocks) afterMessage(st *streamState) {
	if c.idleC == nil {
		return
	}
	if st.routed {
		c.idle.Stop()
		c.whole.Stop()
		c.rate.Stop()
		c.idleC, c.wholeC, c.rateC = nil, nil, nil
		return
	}
	c.idle.Reset(c.cfg.RequestIdleTimeout)
	if d, ok := st.bodyDeadline(); ok {
		c.rate.Reset(time.Until(d))
		c.rateC = c.rate.C
	}
}

func (c *requestClocks) stop() {
	c.idle.Stop()
	c.whole.Stop()
	c.rate.Stop()
	c.max.Stop()
}

// putClocks stops a finished stream's clocks and keeps them for the next.
func (s *Server) putClocks(c *requestClocks) {
	c.stop()
	c.cfg = nil
	s.clocks.Put(c)
}

// expired ends the stream for the deadline that fired, counting it.
func (st *streamState) expired(which int) error {
	st.s.c.limitHits[which].Add(1)
	cfg := &st.s.cfg
	switch which {
	case limitBodyRate:
		why := fmt.Sprintf("the request body arrived slower than %d bytes/s (%d bytes in %s; extproc.streams.min_body_bytes_per_second, after body_grace %s)",
			cfg.MinBodyBytesPerSecond, st.bodyBytes, time.Since(st.started).Round(time.Millisecond), cfg.BodyRateGrace)
		st.s.refused.note(refusedSlowBody, st.source, why)
		return st.endWith(st.requestTimeout(why))
	case limitRequestIdle:
		return st.endWith(st.requestTimeout(fmt.Sprintf("no request data for %s", cfg.RequestIdleTimeout)))
	case limitRequestTime:
		return st.endWith(st.requestTimeout(fmt.Sprintf("the request was not complete within %s", cfg.RequestTimeout)))
	default: // limitStreamDuration
		// Past routing this ends kvgate's part only: a clean close makes
		// Envoy carry on unprocessed (ext_proc.cc onGrpcClose).
		if !st.routed {
			return st.endWith(st.requestTimeout(fmt.Sprintf("the stream outlived %s", cfg.MaxStreamDuration)))
		}
		return nil
	}
}

// receiveEnded is run's answer when Recv ends the stream: nil at a clean
// end (io.EOF), the gRPC status as it came, anything else as Unknown.
func receiveEnded(err error) error {
	if err == io.EOF {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Unknown, "ext_proc receive: %v", err)
}

// failed turns an error from handle into the stream's gRPC status and
// sets its outcome: an immediate response already sent ends it cleanly, a
// protocol error is Envoy's (InvalidArgument), a failed send or a
// cancelled client is the stream's.
func (st *streamState) failed(err error, outcome *Outcome) error {
	var pe *protocolError
	var se *sendError
	switch {
	case errors.Is(err, errImmediate):
		return nil
	case errors.As(err, &pe):
		st.s.c.protocolErrors.Add(1)
		st.s.log.Warn("ext_proc protocol error", "err", err, "request_id", st.req.RequestID)
		*outcome = OutcomeStreamError
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.As(err, &se):
		*outcome = OutcomeStreamError
		if st.ctx.Err() != nil {
			*outcome = OutcomeClientCancel
		}
		return status.Errorf(codes.Unavailable, "%v", err)
	default:
		if st.ctx.Err() != nil {
			*outcome = OutcomeClientCancel
			return status.FromContextError(st.ctx.Err()).Err()
		}
		return status.Errorf(codes.Internal, "%v", err)
	}
}

// bodyDeadline is when a streamed request body that has delivered
// bodyBytes falls below MinBodyBytesPerSecond: the headers' time plus
// BodyRateGrace plus one second per MinBodyBytesPerSecond bytes received,
// so a client keeping up the rate is never cut, whatever its body's size
// (RequestTimeout still bounds the whole request). Only in
// FULL_DUPLEX_STREAMED: there each chunk arrives as the client sends it;
// in BUFFERED Envoy holds the body until it is whole and kvgate sees no
// progress to judge.
func (st *streamState) bodyDeadline() (time.Time, bool) {
	rate := st.s.cfg.MinBodyBytesPerSecond
	if rate <= 0 || !st.gotReqHeaders || st.routed || st.reqMode != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		return time.Time{}, false
	}
	credit := time.Duration(float64(st.bodyBytes) / float64(rate) * float64(time.Second))
	return st.started.Add(st.s.cfg.BodyRateGrace + credit), true
}

// endWith turns the error of a deadline's local reply into the stream's
// end: nil after the reply went out, the send error otherwise.
func (st *streamState) endWith(err error) error {
	if err == nil || errors.Is(err, errImmediate) {
		return nil
	}
	return status.Errorf(codes.Unavailable, "%v", err)
}

// requestTimeout answers a request that did not arrive (or could not be
// routed) in time. 408 when kvgate was waiting for the client, 504 when
// it was itself still deciding.
func (st *streamState) requestTimeout(why string) error {
	st.releaseBody()
	code, msg := http.StatusRequestTimeout, "request timed out: "+why
	return st.immediate(code, st.errorJSON(code, msg), nil, "kvgate_request_timeout")
}

// endOutcome classifies how the stream closed before the response was seen
// to end.
//
// Envoy closes its side once no more processing is configured: after the
// response headers reply when the response body mode is NONE
// (ext_proc.cc closeGrpcStreamIfLastRespReceived), or, when the response
// path sends nothing at all (header mode SKIP, body NONE, trailers SKIP),
// at the upstream's response headers without sending them
// (ext_proc.cc encodeHeaders, EncodingProcessorState::noExternalProcess).
// Its close is a half-close followed by a reset (client_impl.cc
// ExternalProcessorStreamImpl::close), the same as when the client goes
// away, so in the second case kvgate cannot tell a finished request from a
// cancelled one and says so (OutcomeUnobserved) instead of guessing.
func (st *streamState) endOutcome(err error) Outcome {
	eof := err == io.EOF
	cancelled := status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled)
	switch {
	case (eof || cancelled) && st.resMode == filterv3.ProcessingMode_NONE && st.resHeaders:
		return statusOutcome(st.resStatus)
	case (eof || cancelled) && st.resMode == filterv3.ProcessingMode_NONE && st.routed:
		return OutcomeUnobserved
	case eof || cancelled:
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
	req, spoofed, size, err := decodeRequestHeaders(h.GetHeaders(), st.s.cfg.MaxHeaderCount, st.s.cfg.MaxHeaderBytes)
	if err != nil {
		st.req.RequestID = req.RequestID
		return st.immediate(http.StatusRequestHeaderFieldsTooLarge, errorJSON(http.StatusRequestHeaderFieldsTooLarge, err.Error()), nil, "kvgate_headers_too_large")
	}
	if !st.s.budget.grow(&st.held, int64(size)) {
		st.req.RequestID, st.req.Path = req.RequestID, req.Path // the reply's shape follows the route
		return st.overBudget()
	}
	hint, err := subsetHint(msg.GetMetadataContext())
	if err != nil {
		return protoErr("%v", err)
	}
	req.SubsetHint = hint
	req.Source, req.EnvoyDebug = sourceAddress(msg.GetAttributes()), envoyDebug(msg.GetMetadataContext())
	st.req, st.spoofed = req, spoofed
	src := st.s.sourceOf(&st.req)
	if !st.s.admitSource(src) {
		return st.overShare(src)
	}
	st.source = src

	if h.GetEndOfStream() || st.reqMode == filterv3.ProcessingMode_NONE {
		st.s.c.headerOnly.Add(1)
		d, err := st.decide(nil)
		if err != nil {
			return err
		}
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
		// in full-duplex mode Envoy keeps streaming the body meanwhile
		// (ext_proc.cc onData sends body chunks while HeadersCallback is
		// pending in FULL_DUPLEX_STREAMED).
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
		if !st.s.budget.grow(&st.held, int64(len(b.GetBody()))) {
			return st.overBudget()
		}
		d, err := st.decide(b.GetBody())
		if err != nil {
			return err
		}
		c := &extprocv3.CommonResponse{HeaderMutation: routingMutation(st.spoofed, d), ClearRouteCache: true}
		if err := st.send(requestBodyResponse(c, destinationMetadata(d))); err != nil {
			return err
		}
		st.decided()
		st.releaseBody()
		return nil
	case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		chunk := b.GetBody()
		st.bodyBytes += int64(len(chunk))
		if len(chunk) > limit-len(st.body) {
			return st.tooLarge()
		}
		if err := st.appendBody(chunk, limit); err != nil {
			return err
		}
		st.gotBody = true
		if b.GetEndOfStream() {
			return st.routeFullDuplex(true)
		}
		return nil
	}
	return protoErr("request_body received but request body mode is %s", st.reqMode)
}

// appendBody adds a chunk to the body, reserving any capacity it grows by
// from the buffer budget first. Bookkeeping per chunk is O(1): the chunks
// are not remembered, the body is re-cut at MaxStreamedChunk when it goes
// back (Envoy accepts M chunks answered by N StreamedBodyResponses in
// FULL_DUPLEX_STREAMED, processor_state.cc handleDuplexStreamedBodyResponse).
func (st *streamState) appendBody(chunk []byte, limit int) error {
	need := len(st.body) + len(chunk)
	if need > cap(st.body) {
		c := max(min(max(2*cap(st.body), 4096), limit), need)
		if cap(st.body) == 0 {
			// First chunk: a declared content-length sizes the buffer
			// once instead of doubling it (and copying) up to an 8k-token
			// prompt's 40 KB. Only a hint: bounded by the limit, and a
			// budget that cannot hold it falls back to doubling.
			if n := declaredLength(st.req.Headers); n > c && n <= limit && st.s.budget.grow(&st.held, int64(n)) {
				st.body = make([]byte, 0, n)
				st.body = append(st.body, chunk...)
				return nil
			}
		}
		if !st.s.budget.grow(&st.held, int64(c-cap(st.body))) {
			return st.overBudget()
		}
		grown := make([]byte, len(st.body), c)
		copy(grown, st.body)
		st.body = grown
	}
	st.body = append(st.body, chunk...)
	return nil
}

// declaredLength is the request's content-length header as a number, or 0
// when it is absent or not a plain decimal (Envoy has already rejected a
// malformed one for HTTP/1 and HTTP/2; RFC 9110 §8.6).
func declaredLength(h map[string]string) int {
	n, err := strconv.Atoi(h[headerContentLength])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// releaseBody drops the buffered body and returns the stream's share of
// the budget.
func (st *streamState) releaseBody() {
	st.body, st.req.Body = nil, nil
	st.s.budget.release(&st.held)
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

// routeFullDuplex answers the deferred headers, then re-emits the body, as
// it came, in StreamedBodyResponses cut at MaxStreamedChunk. end marks the
// last chunk end_of_stream (false when trailers follow).
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
	if !st.gotBody {
		// Headers then trailers: Envoy sent no body, so none goes back.
		st.releaseBody()
		return nil
	}
	chunks := appendChunks(nil, st.body)
	for i, ch := range chunks {
		if err := st.send(requestBodyResponse(streamedChunk(ch, end && i == len(chunks)-1), nil)); err != nil {
			return err
		}
	}
	st.releaseBody()
	return nil
}

// decide calls the decider once and validates its answer; a rejection is
// sent as an ImmediateResponse and returned as errImmediate.
func (st *streamState) decide(body []byte) (*Decision, error) {
	st.req.Body = body
	// The decider's work is bounded by the request deadline too: Envoy
	// would wait for it forever in FULL_DUPLEX_STREAMED.
	ctx, cancel := context.WithDeadline(st.ctx, st.started.Add(st.s.cfg.RequestTimeout))
	defer cancel()
	d, rerr, panicked := st.callDecider(ctx)
	if panicked != nil {
		st.s.c.deciderPanics.Add(1)
		st.s.log.Error("decider panicked", "panic", panicked, "request_id", st.req.RequestID)
		return nil, st.immediate(http.StatusInternalServerError, st.errorJSON(http.StatusInternalServerError, "kvgate routing failed"), nil, "kvgate_router_panic")
	}
	if rerr == nil && d != nil {
		// Owned from here: every exit path finishes it.
		st.ticket = d.Ticket
	}
	if err := st.ctx.Err(); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		st.s.c.limitHits[limitRequestTime].Add(1)
		st.finish(OutcomeTimeout)
		msg := fmt.Sprintf("kvgate could not route the request within %s", st.s.cfg.RequestTimeout)
		return nil, st.immediate(http.StatusGatewayTimeout, st.errorJSON(http.StatusGatewayTimeout, msg), nil, "kvgate_route_timeout")
	}
	if rerr != nil {
		return nil, st.immediate(rerr.Status, rerr.Body, rerr.Headers, "kvgate_route_error")
	}
	if err := validateDecision(d, &st.s.endpoints); err != nil {
		st.s.c.badDecisions.Add(1)
		st.s.log.Error("decider returned an invalid decision", "err", err, "request_id", st.req.RequestID)
		st.finish(OutcomeStreamError)
		return nil, st.immediate(http.StatusInternalServerError, st.errorJSON(http.StatusInternalServerError, "kvgate routing failed"), nil, "kvgate_invalid_decision")
	}
	st.canonicalize(d)
	st.debugHeader = d.DebugHeader
	return d, nil
}

// canonicalize rewrites the decision's endpoints to the spelling Envoy's
// host map uses (override_host looks hosts up exactly) and remembers the
// decider's own, to report the served endpoint back in it. With
// SingleDestination the fallbacks are dropped: ORIGINAL_DST would fail to
// parse a list.
func (st *streamState) canonicalize(d *Decision) {
	st.sent = make(map[string]string, 1+len(d.Fallbacks))
	fix := func(ep string) string {
		c, err := st.s.endpoints.canonical(ep)
		if err != nil {
			return ep // validateDecision already refused anything unparsable
		}
		if _, dup := st.sent[c]; !dup {
			st.sent[c] = ep
		}
		return c
	}
	d.Endpoint = fix(d.Endpoint)
	if st.s.cfg.SingleDestination {
		d.Fallbacks = nil
	}
	fbs := make([]string, 0, len(d.Fallbacks))
	for _, f := range d.Fallbacks {
		fbs = append(fbs, fix(f))
	}
	d.Fallbacks = fbs
	if d.Prefiller != "" {
		if c, err := st.s.endpoints.canonical(d.Prefiller); err == nil {
			d.Prefiller = c
		}
	}
}

func (st *streamState) callDecider(ctx context.Context) (d *Decision, rerr *RouteError, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			d, rerr, panicked = nil, nil, p
		}
	}()
	d, rerr = st.s.decider.Decide(ctx, &st.req)
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
	st.releaseBody()
	return st.immediate(http.StatusRequestEntityTooLarge, st.errorJSON(http.StatusRequestEntityTooLarge, msg), nil, "kvgate_body_too_large")
}

// overBudget refuses a request kvgate has no memory left to buffer: the
// budget is shared by every stream, so this is kvgate's load, not the
// client's fault (503, retry-after).
func (st *streamState) overBudget() error {
	st.s.c.limitHits[limitBuffer].Add(1)
	st.s.refused.note(refusedBudget, st.s.sourceOf(&st.req), fmt.Sprintf("%d of %d bytes held (extproc.streams.buffer_budget_bytes)", st.s.budget.inUse(), st.s.cfg.BufferBudgetBytes))
	st.releaseBody()
	msg := fmt.Sprintf("kvgate is buffering its limit of %d request bytes; retry shortly", st.s.cfg.BufferBudgetBytes)
	return st.immediate(http.StatusServiceUnavailable, st.errorJSON(http.StatusServiceUnavailable, msg), map[string]string{"retry-after": "1"}, "kvgate_buffer_budget")
}

// overShare refuses a stream whose source already holds its share of the
// open streams while fewer than a share are free (sources.go). 429: it is
// this client's load, not kvgate's, and Envoy's router never retries a
// filter's local reply.
func (st *streamState) overShare(source string) error {
	st.s.c.limitHits[limitPerSource].Add(1)
	st.releaseBody()
	st.s.refused.note(refusedSource, source, fmt.Sprintf("source holds its share of %d streams (extproc.streams.max_open_per_source_percent %d%% of max_open %d)",
		st.s.sourceShare, st.s.cfg.MaxOpenPerSourcePercent, st.s.cfg.MaxOpenStreams))
	msg := fmt.Sprintf("too many requests in progress from this client (%d at once); retry shortly", st.s.sourceShare)
	return st.immediate(http.StatusTooManyRequests, st.errorJSON(http.StatusTooManyRequests, msg), map[string]string{"retry-after": "1"}, "kvgate_source_share")
}

// errorJSON renders an error kvgate answers itself in the shape of the
// request's route: the decider says which when it implements ErrorShaper
// (Anthropic's for /v1/messages), OpenAI's otherwise.
func (st *streamState) errorJSON(status int, message string) []byte {
	e := errorFor(status, message)
	if sh, ok := st.s.decider.(ErrorShaper); ok && st.req.Path != "" {
		return sh.ErrorBody(st.req.Path, e)
	}
	return e.JSON()
}

func (st *streamState) immediate(code int, body []byte, headers map[string]string, details string) error {
	if body == nil {
		body = st.errorJSON(code, http.StatusText(code))
	}
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
	ep := servedEndpoint(msg.GetMetadataContext())
	if ep == "" {
		return
	}
	st.served = true
	if own, ok := st.sent[ep]; ok {
		ep = own
	}
	if r, ok := st.ticket.(ServedReporter); ok && !st.finished {
		r.Served(ep)
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
	st.noteUnreported(h)
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
