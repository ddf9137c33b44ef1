package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// Names of the endpoint-picker protocol (proposal 004; the same strings as
// GIE's pkg/lwepp/metadata/consts.go).
const (
	hintNamespace     = "envoy.lb.subset_hint"
	hintKey           = "x-gateway-destination-endpoint-subset"
	lbNamespace       = "envoy.lb"
	destinationKey    = "x-gateway-destination-endpoint"
	servedKey         = "x-gateway-destination-endpoint-served"
	destinationHeader = "x-gateway-destination-endpoint"
	// prefillerHeader is llm-d's P/D convention: the decode-side routing
	// sidecar sends the prefill leg to this ip:port
	// (llm-d-routing-sidecar internal/proxy/connector_nixlv2.go).
	prefillerHeader = "x-prefiller-host-port"
	// objectiveHeader names a request's InferenceObjective (GIE
	// pkg/epp/metadata/consts.go ObjectiveKey, v1.5.0).
	objectiveHeader = "x-gateway-inference-objective"
)

// env is what the cases share: the connection to the picker and the fake
// endpoints.
type env struct {
	opts Options
	conn *grpc.ClientConn
	eps  *Endpoints
}

// request is one HTTP request the suite plays through the picker.
type request struct {
	path    string // default /v1/chat/completions
	model   string // default the first endpoint's model
	stream  bool
	headers [][2]string // extra client headers
	body    []byte      // default chatBody(model, stream, 0)
	chunks  int         // body chunks Envoy sends (default 1)
	// hint is the subset hint's value in metadata_context; nil sends none.
	hint *structpb.Value
	// trailers ends the request with trailers instead of end_of_stream on
	// the last body chunk.
	trailers bool
	// partial sends only the first half of the body chunks, then nothing:
	// a client still uploading.
	partial bool
}

type received struct {
	msg *extprocv3.ProcessingResponse
	err error
}

// exchange is one ext_proc stream: one HTTP request and its response.
type exchange struct {
	e      *env
	req    request
	cancel context.CancelFunc
	stream extprocv3.ExternalProcessor_ProcessClient
	recv   chan received
	sent   chan error // the request sender's end

	clientHeaders [][2]string
	// Filled while routing.
	order       []string // kinds of the picker's replies, in order
	headersResp *extprocv3.HeadersResponse
	routed      [][2]string // the request headers after the picker's mutation
	mutationErr error       // a mutation Envoy would reject
	bodyOut     []byte
	bodyEOS     int  // streamed replies marked end_of_stream
	eosLast     bool // the end_of_stream reply was the last body reply
	unstreamed  int  // body replies without streamed_response
	trailersOK  bool
	metadata    map[string]*structpb.Struct // dynamic metadata, by namespace
	immediate   *extprocv3.ImmediateResponse
}

// protocolConfig is what Envoy's filter announces on a stream's first
// message (external_processor.proto ProtocolConfiguration): the GIE
// reference configuration's FULL_DUPLEX_STREAMED both ways.
func protocolConfig() *extprocv3.ProtocolConfiguration {
	return &extprocv3.ProtocolConfiguration{
		RequestBodyMode:  filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	}
}

// chatBody is an OpenAI chat completion request of at least size bytes
// (exactly size when size is large enough), padded in its user message.
func chatBody(model string, stream bool, size int) []byte {
	head := fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":4,"messages":[{"role":"user","content":"Write one line about the sea.`, model, stream)
	tail := `"}]}`
	pad := size - len(head) - len(tail)
	b := make([]byte, 0, max(size, len(head)+len(tail)))
	b = append(b, head...)
	for i := 0; i < pad; i++ {
		if i%6 == 0 {
			b = append(b, ' ')
		} else {
			b = append(b, "waves"[i%6-1])
		}
	}
	return append(b, tail...)
}

func (e *env) defaultModel() string { return e.eps.Model(e.eps.Addrs()[0]) }

// start opens a stream and sends the request the way Envoy's filter does
// in FULL_DUPLEX_STREAMED mode: headers, body chunks and trailers without
// waiting for replies (ext_proc.cc Filter::decodeHeaders / decodeData,
// processor_state.cc: no message timer in this mode). Replies are read by
// route and respond.
func (e *env) start(ctx context.Context, r request) (*exchange, error) {
	if r.path == "" {
		r.path = "/v1/chat/completions"
	}
	if r.model == "" {
		r.model = e.defaultModel()
	}
	if r.body == nil {
		r.body = chatBody(r.model, r.stream, 0)
	}
	if r.chunks < 1 {
		r.chunks = 1
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := extprocv3.NewExternalProcessorClient(e.conn).Process(sctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open ext_proc stream: %w", err)
	}
	x := &exchange{e: e, req: r, cancel: cancel, stream: stream, recv: make(chan received, 64), sent: make(chan error, 1),
		metadata: map[string]*structpb.Struct{}}
	x.clientHeaders = append([][2]string{
		{":method", "POST"}, {":path", r.path}, {":authority", "gateway.conformance"}, {":scheme", "http"},
		{"content-type", "application/json"}, {"x-request-id", fmt.Sprintf("conformance-%p", x)},
	}, r.headers...)
	go func() {
		for {
			m, err := stream.Recv()
			select {
			case x.recv <- received{m, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { x.sent <- x.sendRequest() }()
	return x, nil
}

func (x *exchange) sendRequest() error {
	hm := &corev3.HeaderMap{}
	for _, h := range x.clientHeaders {
		// Envoy sends values in raw_value (send_header_raw_value).
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: h[0], RawValue: []byte(h[1])})
	}
	first := &extprocv3.ProcessingRequest{
		Request:        &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm}},
		ProtocolConfig: protocolConfig(),
	}
	if x.req.hint != nil {
		first.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			hintNamespace: {Fields: map[string]*structpb.Value{hintKey: x.req.hint}},
		}}
	}
	if err := x.stream.Send(first); err != nil {
		return err
	}
	body, n := x.req.body, x.req.chunks
	for i := 0; i < n; i++ {
		if x.req.partial && i >= (n+1)/2 {
			return nil
		}
		lo, hi := len(body)*i/n, len(body)*(i+1)/n
		eos := i == n-1 && !x.req.trailers
		if err := x.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body[lo:hi], EndOfStream: eos}}}); err != nil {
			return err
		}
	}
	if x.req.trailers {
		return x.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
			RequestTrailers: &extprocv3.HttpTrailers{Trailers: &corev3.HeaderMap{}}}})
	}
	return nil
}

// next returns the picker's next reply, or why none came.
func (x *exchange) next(ctx context.Context) (*extprocv3.ProcessingResponse, error) {
	select {
	case r := <-x.recv:
		if r.err == io.EOF {
			return nil, errors.New("the picker ended the stream")
		}
		if r.err != nil {
			// The stream shares the case's deadline. When it passes, the
			// picker's side (which got it as grpc-timeout) may reset the
			// stream before our own timer fires, and gRPC reports that
			// reset as DeadlineExceeded (grpc-go http2_client.go
			// handleRSTStream: CANCEL past the stream's deadline) while
			// ctx.Err() is still nil; or both are ready and select picks
			// either. Nothing came in time in every one of these, so say
			// that, the same every run.
			if d, ok := ctx.Deadline(); ctx.Err() != nil || status.Code(r.err) == codes.DeadlineExceeded || (ok && !time.Now().Before(d)) {
				return nil, fmt.Errorf("no reply from the picker: %w (the stream: %v)", ctx.Err(), r.err)
			}
			return nil, fmt.Errorf("the stream failed: %w", r.err)
		}
		return r.msg, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no reply from the picker: %w", ctx.Err())
	}
}

func (x *exchange) mergeMetadata(md *structpb.Struct) {
	for ns, v := range md.GetFields() {
		if s := v.GetStructValue(); s != nil {
			if x.metadata[ns] == nil {
				x.metadata[ns] = &structpb.Struct{Fields: map[string]*structpb.Value{}}
			}
			for k, f := range s.GetFields() {
				x.metadata[ns].Fields[k] = f
			}
		}
	}
}

// route reads the picker's replies until the request is routed (the
// headers reply and the whole body back) or refused (an immediate
// response). An error says what went wrong on the stream.
func (x *exchange) route(ctx context.Context) error {
	for {
		if x.immediate != nil {
			return nil
		}
		if x.headersResp != nil && (x.bodyEOS > 0 || x.req.trailers && x.trailersOK) {
			return nil
		}
		m, err := x.next(ctx)
		if err != nil {
			return err
		}
		x.mergeMetadata(m.GetDynamicMetadata())
		switch r := m.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			x.order = append(x.order, "immediate_response")
			x.immediate = r.ImmediateResponse
		case *extprocv3.ProcessingResponse_RequestHeaders:
			x.order = append(x.order, "request_headers")
			if x.headersResp == nil {
				x.headersResp = r.RequestHeaders
				x.routed, x.mutationErr = applyHeaderMutation(x.clientHeaders, r.RequestHeaders.GetResponse().GetHeaderMutation())
			}
		case *extprocv3.ProcessingResponse_RequestBody:
			x.order = append(x.order, "request_body")
			x.takeBody(r.RequestBody.GetResponse())
			if len(x.bodyOut) > len(x.req.body)+maxExtraEcho {
				return fmt.Errorf("the picker handed back more than %d bytes for a %d-byte body", len(x.req.body)+maxExtraEcho, len(x.req.body))
			}
			if x.unstreamed > 0 {
				// Envoy fails the request here: in FULL_DUPLEX_STREAMED a body
				// reply without streamed_response is a "spurious message"
				// (processor_state.cc ProcessorState::handleStreamedBodyCallback).
				return nil
			}
		case *extprocv3.ProcessingResponse_RequestTrailers:
			x.order = append(x.order, "request_trailers")
			x.trailersOK = true
		default:
			return fmt.Errorf("the picker sent %T before the request was routed", r)
		}
	}
}

func (x *exchange) takeBody(c *extprocv3.CommonResponse) {
	sr := c.GetBodyMutation().GetStreamedResponse()
	if sr == nil {
		x.unstreamed++
		x.eosLast = false
		return
	}
	x.bodyOut = append(x.bodyOut, sr.GetBody()...)
	x.eosLast = sr.GetEndOfStream()
	if sr.GetEndOfStream() {
		x.bodyEOS++
	}
}

// status is the immediate response's HTTP status, 0 for none.
func (x *exchange) status() int {
	if x.immediate == nil {
		return 0
	}
	return int(x.immediate.GetStatus().GetCode())
}

// destination is what the picker told the gateway: the header's values
// after its mutation, and the envoy.lb metadata value ("" , false when
// absent or not a string).
func (x *exchange) destination() (header []string, meta string, metaOK bool) {
	for _, h := range x.routed {
		if h[0] == destinationHeader {
			header = append(header, h[1])
		}
	}
	v, ok := x.metadata[lbNamespace].GetFields()[destinationKey]
	if ok {
		if s, isStr := v.GetKind().(*structpb.Value_StringValue); isStr {
			return header, s.StringValue, true
		}
	}
	return header, "", false
}

// routedHeader returns the value of name after the picker's mutation.
func (x *exchange) routedHeader(name string) (string, int) {
	v, n := "", 0
	for _, h := range x.routed {
		if h[0] == name {
			v, n = h[1], n+1
		}
	}
	return v, n
}

// respond plays the upstream's response through the picker: response
// headers (carrying the served endpoint in metadata_context when served is
// set, as GIE's protocol asks of the data plane), then each chunk of body.
// With each, it waits for the picker to hand that chunk back before
// sending the next, which proves the picker streams the response. It
// returns the body the picker handed back.
func (x *exchange) respond(ctx context.Context, served string, contentType string, chunks []string, each bool) ([]byte, *extprocv3.HeadersResponse, error) {
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":status", RawValue: []byte("200")}, {Key: "content-type", RawValue: []byte(contentType)},
		{Key: "x-envoy-upstream-service-time", RawValue: []byte("1")},
	}}
	msg := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: len(chunks) == 0}}}
	if served != "" {
		msg.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			lbNamespace: {Fields: map[string]*structpb.Value{servedKey: structpb.NewStringValue(served)}},
		}}
	}
	if err := x.stream.Send(msg); err != nil {
		return nil, nil, fmt.Errorf("send response headers: %w", err)
	}
	var out []byte
	var hr *extprocv3.HeadersResponse
	want, eos, sentBytes := 0, false, 0
	await := func() error {
		for hr == nil || len(out) < want || (want == -1 && !eos) {
			m, err := x.next(ctx)
			if err != nil {
				return err
			}
			switch r := m.GetResponse().(type) {
			case *extprocv3.ProcessingResponse_ResponseHeaders:
				hr = r.ResponseHeaders
			case *extprocv3.ProcessingResponse_ResponseBody:
				sr := r.ResponseBody.GetResponse().GetBodyMutation().GetStreamedResponse()
				if sr == nil {
					return errors.New("a response body reply without streamed_response (FULL_DUPLEX_STREAMED needs one per reply)")
				}
				out = append(out, sr.GetBody()...)
				eos = eos || sr.GetEndOfStream()
				if len(out) > sentBytes+maxExtraEcho {
					return fmt.Errorf("the picker handed back more than %d bytes of a %d-byte response", sentBytes+maxExtraEcho, sentBytes)
				}
			case *extprocv3.ProcessingResponse_ImmediateResponse:
				return fmt.Errorf("the picker answered the response with an immediate response (status %d)", r.ImmediateResponse.GetStatus().GetCode())
			default:
				return fmt.Errorf("the picker sent %T during the response", r)
			}
		}
		return nil
	}
	for i, c := range chunks {
		last := i == len(chunks)-1
		if err := x.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte(c), EndOfStream: last}}}); err != nil {
			return out, hr, fmt.Errorf("send response chunk %d: %w", i, err)
		}
		sentBytes += len(c)
		if each && !last {
			want = sentBytes
			if err := await(); err != nil {
				return out, hr, fmt.Errorf("after response chunk %d of %d: %w", i+1, len(chunks), err)
			}
		}
	}
	want = -1
	if len(chunks) == 0 {
		want, eos = 0, true
	}
	if err := await(); err != nil {
		return out, hr, err
	}
	return out, hr, nil
}

// sendResponseStart sends the upstream's response headers and a first SSE
// event without waiting for the picker: a response under way.
func (x *exchange) sendResponseStart() error {
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":status", RawValue: []byte("200")}, {Key: "content-type", RawValue: []byte("text/event-stream")},
	}}
	if err := x.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm}}}); err != nil {
		return err
	}
	first := SSEStream(x.req.model, "upstream")[0]
	return x.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(first)}}})
}

// pause waits a moment between retries, or returns ctx's error.
func pause(ctx context.Context) error {
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finish plays a short upstream response and closes Envoy's side, as the
// filter does once processing is over (client_impl.cc
// ExternalProcessorStreamImpl::close), so the picker can release the
// request.
func (x *exchange) finish(ctx context.Context) error {
	defer x.cancel()
	if x.immediate != nil {
		return nil
	}
	if _, _, err := x.respond(ctx, "", "application/json", []string{`{"object":"chat.completion"}`}, false); err != nil {
		return err
	}
	if err := x.stream.CloseSend(); err != nil {
		return err
	}
	// The picker ends its side after Envoy's half-close; one that keeps it
	// open is cut by the cancel after closeWait, as Envoy resets the
	// stream right after its half-close.
	wctx, cancel := context.WithTimeout(ctx, closeWait)
	defer cancel()
	for {
		select {
		case r := <-x.recv:
			if r.err != nil {
				return nil
			}
		case <-wctx.Done():
			return nil
		}
	}
}

// abort resets the stream, as Envoy does when the downstream goes away
// (ext_proc.cc Filter::onDestroy closes the stream).
func (x *exchange) abort() { x.cancel() }

// maxExtraEcho bounds what a picker may hand back beyond what it was
// sent, so that a runaway picker cannot make the suite buffer without end.
const maxExtraEcho = 1 << 20

// closeWait bounds how long finish waits for the picker to end its side.
const closeWait = 2 * time.Second
