package envoyharness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// ProtocolError is a reply Envoy's ext_proc filter would refuse: out of
// order, the wrong kind for the mode, or malformed.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "ext_proc protocol violation: " + e.Msg }

func violation(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// errStreamClosed is the processor ending its side while Envoy still
// expected a reply.
var errStreamClosed = errors.New("ext_proc stream closed by the processor")

// seqState records what each side has sent, to check the processor's
// replies keep Envoy's order: headers → body → trailers, per direction.
type seqState struct {
	reqHeadersSent, reqTrailersSent               bool
	reqBodySent                                   int
	reqHeadersReplied, reqTrailersReplied         bool
	reqBodyEndSeen                                bool
	requestDone                                   bool
	resHeadersSent, resTrailersSent               bool
	resBodySent                                   int
	resHeadersReplied, resTrailersReplied, resEnd bool
	pendingChunks                                 []pendingChunk // STREAMED / BUFFERED response chunks awaiting replies
}

type pendingChunk struct {
	body []byte
	end  bool
}

// Exchange is one HTTP request's ext_proc stream, from Envoy's side.
type Exchange struct {
	h      *Harness
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	stream extprocv3.ExternalProcessor_ProcessClient

	sendMu    sync.Mutex
	sentFirst bool

	mu       sync.Mutex
	st       seqState
	metadata map[string]*structpb.Struct
	dropped  []string
	trace    []*extprocv3.ProcessingResponse

	reqCh    chan *extprocv3.ProcessingResponse
	resHdrCh chan *extprocv3.ProcessingResponse
	resTrlCh chan *extprocv3.ProcessingResponse
	down     *byteQueue
	dead     chan struct{}
	deadErr  error // set before dead closes; errStreamClosed for a clean end

	// request path working state
	reqHeaders  []Header
	reqBody     []byte
	reqTrailers []Header
	cleared     bool
	bypass      bool // continue without the processor (failure mode allow, or a clean close)
	bodySent    bool // a FULL_DUPLEX_STREAMED body chunk went to the processor
	resBuf      []byte
	closed      bool        // Envoy closed its side (no more processing configured)
	unprocessed atomic.Bool // the stream ended cleanly: the rest passes unprocessed

	// Forward or Local is set when Start returns.
	Forward *Forwarded
	Local   *LocalReply
}

func newExchange(h *Harness, ctx context.Context, cancel context.CancelFunc, stream extprocv3.ExternalProcessor_ProcessClient) *Exchange {
	x := &Exchange{
		h: h, cfg: h.cfg, ctx: ctx, cancel: cancel, stream: stream,
		metadata: map[string]*structpb.Struct{},
		reqCh:    make(chan *extprocv3.ProcessingResponse, 64),
		resHdrCh: make(chan *extprocv3.ProcessingResponse, 1),
		resTrlCh: make(chan *extprocv3.ProcessingResponse, 1),
		down:     newByteQueue(),
		dead:     make(chan struct{}),
	}
	go x.pump()
	return x
}

// Trace returns every reply received so far, in order.
func (x *Exchange) Trace() []*extprocv3.ProcessingResponse {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]*extprocv3.ProcessingResponse(nil), x.trace...)
}

// Metadata returns the dynamic metadata accepted from the processor, by
// namespace.
func (x *Exchange) Metadata() map[string]*structpb.Struct {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make(map[string]*structpb.Struct, len(x.metadata))
	for k, v := range x.metadata {
		out[k] = proto.Clone(v).(*structpb.Struct)
	}
	return out
}

// DroppedNamespaces lists metadata namespaces the processor sent that the
// configuration does not receive.
func (x *Exchange) DroppedNamespaces() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]string(nil), x.dropped...)
}

// Cancel simulates the downstream client going away: Envoy resets the
// ext_proc stream.
func (x *Exchange) Cancel() { x.cancel() }

// Close ends a completed exchange as Envoy does when the HTTP stream is
// done: it half-closes and waits (bounded by ctx) for the processor to end
// the stream. It returns the processor's error status, if any.
//
// If Envoy had already closed the stream itself (the last reply was in,
// or the response path processes nothing), Close returns nil at once.
func (x *Exchange) Close(ctx context.Context) error {
	defer x.cancel()
	x.sendMu.Lock()
	if x.closed {
		x.sendMu.Unlock()
		return nil
	}
	x.closed = true
	err := x.stream.CloseSend()
	x.sendMu.Unlock()
	if err != nil {
		return fmt.Errorf("envoyharness: half-close: %w", err)
	}
	select {
	case <-x.dead:
	case <-ctx.Done():
		return fmt.Errorf("envoyharness: processor did not end the stream: %w", ctx.Err())
	}
	if errors.Is(x.deadErr, errStreamClosed) {
		return nil
	}
	return x.deadErr
}

// Done is closed when the ext_proc stream has ended.
func (x *Exchange) Done() <-chan struct{} { return x.dead }

// Err is why the stream ended (nil while it is open or after a clean end).
func (x *Exchange) Err() error {
	select {
	case <-x.dead:
		if errors.Is(x.deadErr, errStreamClosed) {
			return nil
		}
		return x.deadErr
	default:
		return nil
	}
}

func (x *Exchange) send(m *extprocv3.ProcessingRequest) error {
	// Every message carries the forwarded namespaces of the request's
	// dynamic metadata (ext_proc.cc addDynamicMetadata, called for
	// headers, body chunks and trailers alike).
	m.MetadataContext = x.forwardedMetadata()
	x.sendMu.Lock()
	defer x.sendMu.Unlock()
	if x.closed {
		return io.EOF
	}
	if !x.sentFirst {
		// Only the first message on a stream carries protocol_config
		// (external_processor.proto).
		x.sentFirst = true
		m.ProtocolConfig = &extprocv3.ProtocolConfiguration{
			RequestBodyMode:  x.cfg.RequestBodyMode,
			ResponseBodyMode: x.cfg.ResponseBodyMode,
		}
	}
	return x.stream.Send(m)
}

// pump reads every reply, checks it against what was sent and hands it to
// the phase that awaits it.
func (x *Exchange) pump() {
	for {
		msg, err := x.stream.Recv()
		if err != nil {
			x.sendMu.Lock()
			closedByEnvoy := x.closed
			x.sendMu.Unlock()
			if err == io.EOF || closedByEnvoy {
				err = errStreamClosed
			}
			x.die(err)
			return
		}
		if verr := msg.ValidateAll(); verr != nil {
			x.die(violation("reply fails proto validation: %v", verr))
			return
		}
		x.mu.Lock()
		x.trace = append(x.trace, msg)
		x.takeMetadata(msg)
		dest, err := x.route(msg)
		last := x.lastResponse(msg)
		x.mu.Unlock()
		if err != nil {
			x.die(err)
			return
		}
		if dest != nil {
			dest <- msg
		}
		if last {
			// closeGrpcStreamIfLastRespReceived: nothing more is expected,
			// so Envoy closes the stream.
			x.closeStream()
		}
	}
}

// lastResponse reports whether msg is the last reply of the response path
// (x.mu held): the end of a streamed body, or the trailers reply.
func (x *Exchange) lastResponse(msg *extprocv3.ProcessingResponse) bool {
	switch msg.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_ResponseTrailers:
		return true
	case *extprocv3.ProcessingResponse_ResponseBody:
		return x.st.resEnd && !(x.st.resTrailersSent && !x.st.resTrailersReplied)
	}
	return false
}

func (x *Exchange) die(err error) {
	x.deadErr = err
	if errors.Is(err, errStreamClosed) {
		// A clean close (status OK): Envoy ends processing and the response
		// carries on unprocessed (ext_proc.cc onGrpcClose), so what comes
		// next goes straight downstream.
		x.unprocessed.Store(true)
	}
	close(x.dead)
	if !errors.Is(err, errStreamClosed) {
		x.down.fail(err)
	}
	var pe *ProtocolError
	if errors.As(err, &pe) {
		// Envoy closes the stream on a spurious message.
		x.cancel()
	}
}

func (x *Exchange) takeMetadata(msg *extprocv3.ProcessingResponse) {
	for ns, v := range msg.GetDynamicMetadata().GetFields() {
		s := v.GetStructValue()
		if !contains(x.cfg.ReceivingNamespaces, ns) || s == nil {
			x.dropped = append(x.dropped, ns)
			continue
		}
		cur, ok := x.metadata[ns]
		if !ok {
			cur = &structpb.Struct{Fields: map[string]*structpb.Value{}}
			x.metadata[ns] = cur
		}
		for k, fv := range s.GetFields() {
			cur.Fields[k] = fv
		}
	}
}

// setMetadata writes one value into the request's dynamic metadata, as a
// filter or load balancer does (StreamInfo::setDynamicMetadata merges into
// the namespace).
func (x *Exchange) setMetadata(k *MetadataKey, v *structpb.Value) {
	x.mu.Lock()
	defer x.mu.Unlock()
	cur, ok := x.metadata[k.Namespace]
	if !ok {
		cur = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		x.metadata[k.Namespace] = cur
	}
	for i, seg := range k.Path {
		if i == len(k.Path)-1 {
			cur.Fields[seg] = v
			return
		}
		next := cur.Fields[seg].GetStructValue()
		if next == nil {
			next = &structpb.Struct{Fields: map[string]*structpb.Value{}}
			cur.Fields[seg] = structpb.NewStructValue(next)
		}
		cur = next
	}
}

// forwardedMetadata is the metadata_context Envoy attaches: only the
// namespaces in forwarding_namespaces.
func (x *Exchange) forwardedMetadata() *corev3.Metadata {
	x.mu.Lock()
	defer x.mu.Unlock()
	var md *corev3.Metadata
	for _, ns := range x.cfg.ForwardingNamespaces {
		if s, ok := x.metadata[ns]; ok {
			if md == nil {
				md = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
			}
			md.FilterMetadata[ns] = proto.Clone(s).(*structpb.Struct)
		}
	}
	return md
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func streamed(c *extprocv3.CommonResponse) (*extprocv3.StreamedBodyResponse, bool) {
	s, ok := c.GetBodyMutation().GetMutation().(*extprocv3.BodyMutation_StreamedResponse)
	if !ok {
		return nil, false
	}
	return s.StreamedResponse, true
}

// route checks one reply's place in the sequence and says which waiting
// phase takes it (x.mu held; the caller delivers after unlocking).
func (x *Exchange) route(msg *extprocv3.ProcessingResponse) (chan *extprocv3.ProcessingResponse, error) {
	st := &x.st
	switch r := msg.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		if !st.reqHeadersSent || st.reqHeadersReplied {
			return nil, violation("request_headers reply without a pending request_headers message")
		}
		st.reqHeadersReplied = true
		return x.reqCh, nil
	case *extprocv3.ProcessingResponse_RequestBody:
		if !st.reqHeadersReplied {
			return nil, violation("request_body reply before the request_headers reply")
		}
		if st.reqBodySent == 0 || st.reqBodyEndSeen || st.reqTrailersReplied {
			return nil, violation("request_body reply without a pending request body")
		}
		sb, isStreamed := streamed(r.RequestBody.GetResponse())
		switch x.cfg.RequestBodyMode {
		case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
			if !isStreamed {
				return nil, violation("request_body reply in FULL_DUPLEX_STREAMED mode without a streamed_response")
			}
			st.reqBodyEndSeen = sb.GetEndOfStream()
		case filterv3.ProcessingMode_BUFFERED:
			if isStreamed {
				return nil, violation("StreamedBodyResponse in BUFFERED mode")
			}
			st.reqBodyEndSeen = true
		}
		return x.reqCh, nil
	case *extprocv3.ProcessingResponse_RequestTrailers:
		if !st.reqTrailersSent || st.reqTrailersReplied || !st.reqHeadersReplied {
			return nil, violation("request_trailers reply without pending request trailers")
		}
		st.reqTrailersReplied = true
		return x.reqCh, nil
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		if st.requestDone {
			return nil, violation("immediate_response on the response path (not supported by the harness)")
		}
		return x.reqCh, nil
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		if !st.resHeadersSent || st.resHeadersReplied {
			return nil, violation("response_headers reply without a pending response_headers message")
		}
		st.resHeadersReplied = true
		return x.resHdrCh, nil
	case *extprocv3.ProcessingResponse_ResponseBody:
		if !st.resHeadersReplied {
			return nil, violation("response_body reply before the response_headers reply")
		}
		if st.resBodySent == 0 || st.resEnd {
			return nil, violation("response_body reply without a pending response body")
		}
		c := r.ResponseBody.GetResponse()
		sb, isStreamed := streamed(c)
		switch x.cfg.ResponseBodyMode {
		case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
			if !isStreamed {
				return nil, violation("response_body reply in FULL_DUPLEX_STREAMED mode without a streamed_response")
			}
			st.resEnd = sb.GetEndOfStream()
			x.down.push(sb.GetBody(), sb.GetEndOfStream())
		default:
			if isStreamed {
				return nil, violation("StreamedBodyResponse in %s mode", x.cfg.ResponseBodyMode)
			}
			if len(st.pendingChunks) == 0 {
				return nil, violation("more response_body replies than chunks sent")
			}
			p := st.pendingChunks[0]
			st.pendingChunks = st.pendingChunks[1:]
			body := p.body
			switch m := c.GetBodyMutation().GetMutation().(type) {
			case *extprocv3.BodyMutation_Body:
				body = m.Body
			case *extprocv3.BodyMutation_ClearBody:
				if m.ClearBody {
					body = nil
				}
			}
			st.resEnd = p.end
			x.down.push(body, p.end)
		}
	case *extprocv3.ProcessingResponse_ResponseTrailers:
		if !st.resTrailersSent || st.resTrailersReplied {
			return nil, violation("response_trailers reply without pending response trailers")
		}
		st.resTrailersReplied = true
		return x.resTrlCh, nil
	default:
		return nil, violation("reply of unsupported kind %T", msg.GetResponse())
	}
	return nil, nil
}

// await waits for the next request-path reply. A nil reply with a nil
// local reply means: continue without the processor (failure_mode_allow).
func (x *Exchange) await(ch chan *extprocv3.ProcessingResponse, timed bool) (*extprocv3.ProcessingResponse, *LocalReply) {
	var timeout <-chan time.Time
	if timed {
		t := time.NewTimer(x.cfg.MessageTimeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case r := <-ch:
		return r, nil
	case <-x.dead:
		select {
		case r := <-ch:
			return r, nil
		default:
		}
		return nil, x.failure()
	case <-timeout:
		if x.failureModeAllow() {
			x.bypass = true
			x.cancel()
			return nil, nil
		}
		x.cancel()
		return nil, &LocalReply{Status: 504, Body: []byte("ext_proc message timeout"), Cause: "message_timeout"}
	}
}

// failure turns the stream's end into what Envoy does with it.
func (x *Exchange) failure() *LocalReply {
	err := x.deadErr
	var pe *ProtocolError
	switch {
	case errors.As(err, &pe):
		return &LocalReply{Status: x.cfg.StatusOnError, Cause: "protocol_error", Err: err}
	case x.ctx.Err() != nil:
		return &LocalReply{Cause: "client_cancel", Err: x.ctx.Err()}
	case errors.Is(err, errStreamClosed):
		// The processor closed cleanly (status OK) without answering:
		// onGrpcClose ends processing and the request carries on
		// unprocessed, whatever failure_mode_allow says.
		x.bypass = true
		return nil
	case x.failureModeAllow():
		x.bypass = true
		return nil
	}
	return &LocalReply{Status: x.cfg.StatusOnError, Cause: "grpc_error", Err: err}
}

// failureModeAllow is ext_proc.cc Filter::failureModeAllow: fail-open
// stops holding once a FULL_DUPLEX_STREAMED body chunk has been sent.
func (x *Exchange) failureModeAllow() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.cfg.FailureModeAllow && !x.bodySent
}

func immediateLocal(ir *extprocv3.ImmediateResponse) *LocalReply {
	code := 200
	if ir.GetStatus() != nil {
		code = int(ir.GetStatus().GetCode())
	}
	if code < 200 {
		code = 500 // mutation_utils.cc isValidHttpStatus
	}
	hs, _, err := applyHeaderMutation(nil, ir.GetHeaders())
	l := &LocalReply{Status: code, Headers: hs, Body: ir.GetBody(), Cause: "immediate_response"}
	if err != nil {
		l.Err = err
	}
	return l
}

func (x *Exchange) requestHeadersMessage(eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: toHeaderMap(x.reqHeaders), EndOfStream: eos,
	}}}
}

func buildRequestHeaders(req *Request) []Header {
	method, path, authority, scheme := req.Method, req.Path, req.Authority, req.Scheme
	if method == "" {
		method = "GET"
	}
	if path == "" {
		path = "/"
	}
	if authority == "" {
		authority = "kvgate.test"
	}
	if scheme == "" {
		scheme = "http"
	}
	hs := []Header{{":authority", authority}, {":path", path}, {":method", method}, {":scheme", scheme}}
	for _, h := range req.Headers {
		hs = append(hs, Header{lower(h.Name), h.Value})
	}
	if _, ok := Get(hs, "x-request-id"); !ok {
		// The connection manager generates one by default
		// (generate_request_id).
		hs = append(hs, Header{"x-request-id", newRequestID()})
	}
	return hs
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

var requestIDs struct {
	sync.Mutex
	n uint64
}

func newRequestID() string {
	requestIDs.Lock()
	requestIDs.n++
	n := requestIDs.n
	requestIDs.Unlock()
	return "harness-" + strconv.FormatUint(n, 10)
}

func chunksOf(body []byte, size int) [][]byte {
	if size <= 0 {
		size = 16 << 10
	}
	var out [][]byte
	for len(body) > size {
		out = append(out, body[:size])
		body = body[size:]
	}
	if len(body) > 0 {
		out = append(out, body)
	}
	return out
}

// runRequest plays the request path for the configured body mode.
func (x *Exchange) runRequest(req *Request) {
	x.reqHeaders = stripHeaders(buildRequestHeaders(req), x.cfg.StripHeaders)
	x.seedMetadata(req) // attributes.go
	if req.SubsetHint != nil {
		// What a filter before ext_proc (or the control plane) puts in the
		// request's metadata; it reaches the processor only if forwarded.
		list := make([]any, len(req.SubsetHint))
		for i, s := range req.SubsetHint {
			list[i] = s
		}
		v, _ := structpb.NewList(list)
		x.setMetadata(&MetadataKey{Namespace: subsetHintNamespace, Path: []string{subsetHintKey}}, structpb.NewListValue(v))
	}
	x.reqBody = append([]byte(nil), req.Body...)
	x.reqTrailers = append([]Header(nil), req.Trailers...)
	hasBody, hasTrailers := len(req.Body) > 0, len(req.Trailers) > 0
	headersEnd := !hasBody && !hasTrailers
	mode := x.cfg.RequestBodyMode
	fullDuplex := mode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED

	x.mu.Lock()
	x.st.reqHeadersSent = true
	x.mu.Unlock()
	if err := x.send(x.withAttributes(x.requestHeadersMessage(headersEnd), req)); err != nil {
		// The reason shows up on the receive side.
		_ = err
	}
	if x.cfg.shouldRemoveContentLength() {
		// ext_proc.cc decodeHeaders: after the headers went to the
		// processor, content-length is removed (the body may change size).
		x.reqHeaders = removeAll(x.reqHeaders, "content-length")
	}
	if req.Cancel == CancelAfterHeaders {
		x.clientGone()
		return
	}

	if headersEnd || mode == filterv3.ProcessingMode_NONE {
		if !x.step(x.reqCh, !fullDuplex) {
			return
		}
		if !headersEnd && hasTrailers && x.cfg.RequestTrailers && !x.bypass {
			if !x.sendTrailers(req, !fullDuplex) {
				return
			}
		}
		x.finishRequest()
		return
	}

	switch mode {
	case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		x.runFullDuplex(req, hasTrailers)
	case filterv3.ProcessingMode_BUFFERED:
		x.runBuffered(req, hasTrailers)
	}
}

// runFullDuplex sends every chunk (and the trailers) without waiting, then
// collects the headers reply, the streamed body and the trailers reply.
func (x *Exchange) runFullDuplex(req *Request, hasTrailers bool) {
	chunks := chunksOf(req.Body, req.ChunkSize)
	sendAll := func(upTo int) {
		for i := 0; i < upTo; i++ {
			x.mu.Lock()
			x.st.reqBodySent++
			x.bodySent = true
			x.mu.Unlock()
			m := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
				Body: chunks[i], EndOfStream: i == len(chunks)-1 && !hasTrailers,
			}}}
			if x.send(m) != nil {
				return
			}
		}
		if upTo == len(chunks) && hasTrailers {
			x.mu.Lock()
			x.st.reqTrailersSent = true
			x.mu.Unlock()
			_ = x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{Trailers: toHeaderMap(x.reqTrailers)}}})
		}
	}
	switch req.Cancel {
	case CancelMidBody:
		sendAll(len(chunks) / 2)
		x.clientGone()
		return
	case CancelAfterBody:
		sendAll(len(chunks))
		x.clientGone()
		return
	}
	go sendAll(len(chunks))

	if !x.step(x.reqCh, false) {
		return
	}
	// The headers reply is in; the body comes back as the processor
	// re-emits it, ended by an end_of_stream chunk or, with trailers, by the
	// trailers reply. In FULL_DUPLEX_STREAMED Envoy drains what it sent
	// (ext_proc.cc handleDataStreamedModeBase): only what comes back goes
	// upstream.
	x.reqBody = nil
	if x.bypass {
		x.finishRequest()
		return
	}
	for {
		r, local := x.await(x.reqCh, false)
		if local != nil {
			x.Local = local
			return
		}
		if r == nil {
			// The processor closed cleanly mid-body: the request goes on
			// with what came back so far.
			x.finishRequest()
			return
		}
		if !x.apply(r) {
			return
		}
		switch v := r.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_RequestBody:
			if sb, _ := streamed(v.RequestBody.GetResponse()); sb.GetEndOfStream() && !hasTrailers {
				x.finishRequest()
				return
			}
		case *extprocv3.ProcessingResponse_RequestTrailers:
			x.finishRequest()
			return
		}
	}
}

func (x *Exchange) runBuffered(req *Request, hasTrailers bool) {
	if !x.step(x.reqCh, true) {
		return
	}
	if x.bypass {
		x.finishRequest()
		return
	}
	if len(req.Body) > x.cfg.BufferLimit {
		// Envoy's buffer limit reply.
		x.cancel()
		x.Local = &LocalReply{Status: 413, Body: []byte("Payload Too Large"), Cause: "buffer_limit"}
		return
	}
	x.mu.Lock()
	x.st.reqBodySent = 1
	x.mu.Unlock()
	_ = x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: req.Body, EndOfStream: !hasTrailers,
	}}})
	if req.Cancel == CancelAfterBody || req.Cancel == CancelMidBody {
		x.clientGone()
		return
	}
	if !x.step(x.reqCh, true) {
		return
	}
	if hasTrailers && x.cfg.RequestTrailers && !x.bypass {
		if !x.sendTrailers(req, true) {
			return
		}
	}
	x.finishRequest()
}

func (x *Exchange) sendTrailers(req *Request, timed bool) bool {
	x.mu.Lock()
	x.st.reqTrailersSent = true
	x.mu.Unlock()
	_ = x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{Trailers: toHeaderMap(x.reqTrailers)}}})
	return x.step(x.reqCh, timed)
}

// step awaits one reply and applies it; false means the request path ended
// (local reply set).
func (x *Exchange) step(ch chan *extprocv3.ProcessingResponse, timed bool) bool {
	r, local := x.await(ch, timed)
	if local != nil {
		x.Local = local
		return false
	}
	if r == nil { // failure_mode_allow: carry on unprocessed
		return true
	}
	return x.apply(r)
}

func (x *Exchange) clientGone() {
	x.cancel()
	x.Local = &LocalReply{Cause: "client_cancel", Err: context.Canceled}
}

// apply applies one request-path reply; false means it ended the request.
func (x *Exchange) apply(r *extprocv3.ProcessingResponse) bool {
	fail := func(cause string, err error) bool {
		x.cancel()
		x.Local = &LocalReply{Status: x.cfg.StatusOnError, Cause: cause, Err: err}
		return false
	}
	var c *extprocv3.CommonResponse
	switch v := r.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		x.Local = immediateLocal(v.ImmediateResponse)
		x.cancel()
		return false
	case *extprocv3.ProcessingResponse_RequestHeaders:
		c = v.RequestHeaders.GetResponse()
		if c.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
			if b, ok := c.GetBodyMutation().GetMutation().(*extprocv3.BodyMutation_Body); ok {
				x.reqBody = b.Body
			}
		}
	case *extprocv3.ProcessingResponse_RequestBody:
		c = v.RequestBody.GetResponse()
		if sb, ok := streamed(c); ok {
			if c.GetHeaderMutation() != nil {
				// Headers already went upstream after the headers reply.
				return fail("protocol_error", violation("header_mutation in a full-duplex body reply comes after the headers were forwarded"))
			}
			x.reqBody = append(x.reqBody, sb.GetBody()...)
			return true
		}
		switch m := c.GetBodyMutation().GetMutation().(type) {
		case *extprocv3.BodyMutation_Body:
			x.reqBody = m.Body
		case *extprocv3.BodyMutation_ClearBody:
			if m.ClearBody {
				x.reqBody = nil
			}
		}
	case *extprocv3.ProcessingResponse_RequestTrailers:
		hs, _, err := applyHeaderMutation(x.reqTrailers, v.RequestTrailers.GetHeaderMutation())
		if err != nil {
			return fail("mutation_error", err)
		}
		x.reqTrailers = hs
		return true
	default:
		return fail("protocol_error", violation("unexpected %T on the request path", r.GetResponse()))
	}
	hm := c.GetHeaderMutation()
	if x.cfg.shouldRemoveContentLength() {
		// processHeaderMutation passes shouldRemoveContentLength to
		// MutationUtils::applyHeaderMutations, which then leaves
		// content-length alone.
		hm = withoutContentLength(hm)
	}
	hs, _, err := applyHeaderMutation(x.reqHeaders, hm)
	if err != nil {
		return fail("mutation_error", err)
	}
	x.reqHeaders = hs
	// clear_route_cache only takes effect with a header mutation
	// (ext_proc.proto).
	if c.GetClearRouteCache() && c.GetHeaderMutation() != nil {
		x.cleared = true
	}
	return true
}

func (x *Exchange) finishRequest() {
	x.mu.Lock()
	x.st.requestDone = true
	md := make(map[string]*structpb.Struct, len(x.metadata))
	for k, v := range x.metadata {
		md[k] = proto.Clone(v).(*structpb.Struct)
	}
	x.mu.Unlock()
	f := &Forwarded{
		Headers: x.reqHeaders, Body: x.reqBody, Trailers: x.reqTrailers, RouteCacheCleared: x.cleared,
		choice: &hostChoice{cluster: x.cfg.Route.Cluster, md: md, headers: x.reqHeaders, rr: &x.h.rr},
		x:      x,
	}
	f.Upstream, f.RouteErr = f.NextUpstream()
	x.Forward = f
}

// RespondHeaders sends the upstream's response headers through the
// processor and returns them as mutated. The host that answered is the
// last one Forward chose; Envoy tells the processor only through
// override_host's selected_host_key, in a forwarded namespace.
func (x *Exchange) RespondHeaders(code int, headers []Header, endOfStream bool) ([]Header, error) {
	if x.Forward == nil {
		return nil, fmt.Errorf("envoyharness: no forwarded request to respond to")
	}
	hs := append([]Header{{":status", strconv.Itoa(code)}}, headers...)
	if x.bypass || x.unprocessed.Load() {
		x.endDownstream(endOfStream)
		return hs, nil
	}
	if x.cfg.responseUnprocessed() {
		// ext_proc.cc encodeHeaders: nothing of the response is processed,
		// so Envoy closes the stream here, without sending the headers.
		x.closeStream()
		x.bypass = true
		x.endDownstream(endOfStream)
		return hs, nil
	}
	if !x.cfg.ResponseHeaders {
		return nil, fmt.Errorf("envoyharness: response_header_mode SKIP with a response body or trailer mode is not modeled")
	}
	m := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: toHeaderMap(hs), EndOfStream: endOfStream,
	}}}
	x.mu.Lock()
	x.st.resHeadersSent = true
	x.mu.Unlock()
	_ = x.send(m)
	r, local := x.await(x.resHdrCh, x.cfg.ResponseBodyMode != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED)
	if local != nil {
		return nil, fmt.Errorf("envoyharness: response headers: %s (%d): %v", local.Cause, local.Status, local.Err)
	}
	if r != nil {
		out, _, err := applyHeaderMutation(hs, r.GetResponseHeaders().GetResponse().GetHeaderMutation())
		if err != nil {
			x.cancel()
			return nil, err
		}
		hs = out
	}
	x.endDownstream(endOfStream)
	if endOfStream || (x.cfg.ResponseBodyMode == filterv3.ProcessingMode_NONE && !x.cfg.ResponseTrailers) {
		// closeGrpcStreamIfLastRespReceived: the last reply is in.
		x.closeStream()
	}
	return hs, nil
}

// closeStream is ExternalProcessorStreamImpl::close: a half-close
// followed at once by a reset.
func (x *Exchange) closeStream() {
	x.sendMu.Lock()
	if !x.closed {
		x.closed = true
		_ = x.stream.CloseSend()
	}
	x.sendMu.Unlock()
	x.cancel()
}

func (x *Exchange) endDownstream(end bool) {
	if end {
		x.mu.Lock()
		x.st.resEnd = true
		x.mu.Unlock()
		x.down.push(nil, true)
	}
}

// RespondBody sends one upstream response chunk through the processor
// (or straight downstream for body mode NONE). It does not wait for the
// processor: what it releases comes out of Downstream.
func (x *Exchange) RespondBody(chunk []byte, endOfStream bool) error {
	chunk = append([]byte(nil), chunk...)
	if x.bypass || x.unprocessed.Load() || x.cfg.ResponseBodyMode == filterv3.ProcessingMode_NONE {
		x.down.push(chunk, endOfStream)
		return nil
	}
	if x.cfg.ResponseBodyMode == filterv3.ProcessingMode_BUFFERED {
		x.resBuf = append(x.resBuf, chunk...)
		if !endOfStream {
			return nil
		}
		chunk = x.resBuf
	}
	x.mu.Lock()
	x.st.resBodySent++
	if x.cfg.ResponseBodyMode != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		x.st.pendingChunks = append(x.st.pendingChunks, pendingChunk{chunk, endOfStream})
	}
	x.mu.Unlock()
	err := x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
		Body: chunk, EndOfStream: endOfStream,
	}}})
	if err != nil && err != io.EOF {
		return fmt.Errorf("envoyharness: send response body: %w", err)
	}
	return nil
}

// RespondTrailers ends the response with trailers (trailer mode SEND).
func (x *Exchange) RespondTrailers(trailers []Header) ([]Header, error) {
	if x.bypass || x.unprocessed.Load() || !x.cfg.ResponseTrailers {
		x.endDownstream(true)
		return trailers, nil
	}
	x.mu.Lock()
	x.st.resTrailersSent = true
	x.mu.Unlock()
	_ = x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: toHeaderMap(trailers)}}})
	r, local := x.await(x.resTrlCh, x.cfg.ResponseBodyMode != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED)
	if local != nil {
		return nil, fmt.Errorf("envoyharness: response trailers: %s: %v", local.Cause, local.Err)
	}
	out := trailers
	if r != nil {
		var err error
		out, _, err = applyHeaderMutation(trailers, r.GetResponseTrailers().GetHeaderMutation())
		if err != nil {
			x.cancel()
			return nil, err
		}
	}
	x.endDownstream(true)
	return out, nil
}

// Downstream returns the next response body bytes Envoy would send to the
// client; end is true when the response is complete.
func (x *Exchange) Downstream(ctx context.Context) (data []byte, end bool, err error) {
	return x.down.pop(ctx)
}

// StatusCode extracts a gRPC code from a stream error, for tests.
func StatusCode(err error) codes.Code { return status.Code(err) }
