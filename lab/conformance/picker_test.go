package conformance_test

import (
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// defect is one way a picker breaks the protocol; miniPicker with none is
// a small picker that keeps it (the suite's second implementation besides
// kvgate, so that a case failing against a defect fails for that defect).
type defect int

const (
	none               defect = iota
	noHealth                  // no gRPC health services
	wrongNamespace            // destination metadata outside envoy.lb
	headerOnlyPrimary         // the header names the primary, the metadata the list
	unofferedFallback         // a fallback the hint never offered
	duplicateFallback         // the primary again as a fallback
	ignoresHint               // picks from its whole pool
	listHintOnly              // reads the hint only in its list form
	routesEmptyHint           // an empty hint means "no constraint"
	unknownHintError          // no eligible endpoint: a gRPC error, not a 503
	rejectsServed             // fails the stream on the served-endpoint report
	unstreamedBody            // answers the body as in STREAMED mode
	noEndOfStream             // hands the body back without end_of_stream
	smallBodyLimit            // refuses bodies over 256 KiB
	buffersResponse           // holds the response until its end
	rewritesResponse          // changes the response bytes
	appendsDestination        // appends its header to the client's
	trustsClientHeader        // routes where the client's header says
	leaksOnCancel             // a reset stream keeps its load booked
	shedsWith503              // answers saturation with 503
	ignoresModel              // routes every model to the first model's pool
	keepsPrefiller            // no P/D, and lets the client's x-prefiller-host-port through
	prefillerIsPrimary        // names the decode endpoint as its own prefill leg
	rejectsObjective          // refuses requests that name an objective
)

// miniPicker is a minimal endpoint picker: ext_proc in FULL_DUPLEX_STREAMED
// mode, round robin over its pool, GIE's subset hint, a bound on requests
// in flight, health services.
type miniPicker struct {
	extprocv3.UnimplementedExternalProcessorServer
	defect      defect
	pool        []string          // in order
	models      map[string]string // endpoint → model
	maxInflight int
	// pdModel's long prompts are split: its first endpoint prefills (named
	// in llm-d's x-prefiller-host-port), its second decodes.
	pdModel string

	mu       sync.Mutex
	inflight int
	next     int
}

func startPicker(t *testing.T, p *miniPicker) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, p)
	if p.defect != noHealth {
		hs := health.NewServer()
		for _, svc := range []string{"liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"} {
			hs.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
		}
		healthpb.RegisterHealthServer(gs, hs)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// miniStream is one request's state.
type miniStream struct {
	p       *miniPicker
	srv     extprocv3.ExternalProcessor_ProcessServer
	headers map[string]string
	hint    []string
	hinted  bool
	model   string
	body    []byte
	routed  bool
	booked  bool
	resBody []byte
}

func (p *miniPicker) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	s := &miniStream{p: p, srv: srv}
	defer func() {
		if s.booked && p.defect != leaksOnCancel {
			p.release()
		}
	}()
	for {
		m, err := srv.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.handle(m); err != nil {
			return err
		}
	}
}

func (p *miniPicker) release() {
	p.mu.Lock()
	p.inflight--
	p.mu.Unlock()
}

func (s *miniStream) handle(m *extprocv3.ProcessingRequest) error {
	switch r := m.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		s.headers = map[string]string{}
		for _, h := range r.RequestHeaders.GetHeaders().GetHeaders() {
			s.headers[h.GetKey()] = string(h.GetRawValue())
		}
		s.readHint(m.GetMetadataContext())
		if r.RequestHeaders.GetEndOfStream() {
			return s.route(true)
		}
	case *extprocv3.ProcessingRequest_RequestBody:
		s.body = append(s.body, r.RequestBody.GetBody()...)
		if s.p.defect == smallBodyLimit && len(s.body) > 256<<10 {
			return s.immediate(413)
		}
		if r.RequestBody.GetEndOfStream() {
			return s.route(true)
		}
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if !s.routed {
			if err := s.route(false); err != nil {
				return err
			}
		}
		return s.srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if _, ok := m.GetMetadataContext().GetFilterMetadata()["envoy.lb"]; ok && s.p.defect == rejectsServed {
			return status.Error(codes.InvalidArgument, "unexpected metadata_context")
		}
		if err := s.srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}); err != nil {
			return err
		}
		if r.ResponseHeaders.GetEndOfStream() {
			s.done()
		}
	case *extprocv3.ProcessingRequest_ResponseBody:
		return s.responseBody(r.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return s.srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}})
	}
	return nil
}

func (s *miniStream) done() {
	if s.booked {
		s.booked = false
		s.p.release()
	}
}

func (s *miniStream) responseBody(b *extprocv3.HttpBody) error {
	chunk := b.GetBody()
	switch s.p.defect {
	case buffersResponse:
		s.resBody = append(s.resBody, chunk...)
		if !b.GetEndOfStream() {
			return nil
		}
		chunk = s.resBody
	case rewritesResponse:
		chunk = []byte(strings.ReplaceAll(string(chunk), "data: ", "DATA: "))
	}
	if b.GetEndOfStream() {
		s.done()
	}
	return s.srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
		Response: streamed(chunk, b.GetEndOfStream())}}})
}

func streamed(b []byte, eos bool) *extprocv3.CommonResponse {
	return &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
		StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}}}}
}

func (s *miniStream) readHint(md *corev3.Metadata) {
	v, ok := md.GetFilterMetadata()["envoy.lb.subset_hint"].GetFields()["x-gateway-destination-endpoint-subset"]
	if !ok {
		return
	}
	add := func(str string) {
		for _, e := range strings.Split(str, ",") {
			if e = strings.TrimSpace(e); e != "" {
				s.hint = append(s.hint, e)
			}
		}
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		if s.p.defect == listHintOnly {
			return
		}
		add(k.StringValue)
	case *structpb.Value_ListValue:
		for _, item := range k.ListValue.GetValues() {
			add(item.GetStringValue())
		}
	}
	s.hinted = true
}

func (s *miniStream) immediate(code int) error {
	return s.srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status: &typev3.HttpStatus{Code: typev3.StatusCode(code)}, Body: []byte(`{"error":{"message":"refused"}}`)}}})
}

// candidates are the endpoints the request may go to.
func (s *miniStream) candidates() ([]string, error) {
	var req struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(s.body, &req)
	if s.p.defect == ignoresModel || req.Model == "" {
		req.Model = s.p.models[s.p.pool[0]]
	}
	s.model = req.Model
	var cands []string
	for _, e := range s.p.pool {
		if s.p.models[e] == req.Model {
			cands = append(cands, e)
		}
	}
	if !s.hinted || s.p.defect == ignoresHint || (s.p.defect == routesEmptyHint && len(s.hint) == 0) {
		return cands, nil
	}
	var in []string
	for _, c := range cands {
		for _, h := range s.hint {
			if h == c {
				in = append(in, c)
			}
		}
	}
	if len(in) == 0 && s.p.defect == unknownHintError {
		return nil, status.Error(codes.Unavailable, "no endpoint")
	}
	return in, nil
}

// route decides and answers: the headers reply with the destination, then
// the body back; eos marks the body's last chunk.
func (s *miniStream) route(eos bool) error {
	s.routed = true
	cands, err := s.candidates()
	if err != nil {
		return err
	}
	if len(cands) == 0 {
		return s.immediate(503)
	}
	if _, ok := s.headers["x-gateway-inference-objective"]; ok && s.p.defect == rejectsObjective {
		return s.immediate(400)
	}
	p := s.p
	p.mu.Lock()
	if p.maxInflight > 0 && p.inflight >= p.maxInflight {
		p.mu.Unlock()
		if p.defect == shedsWith503 {
			return s.immediate(503)
		}
		return s.immediate(429)
	}
	p.inflight++
	primary := cands[p.next%len(cands)]
	p.next++
	p.mu.Unlock()
	s.booked = true
	list := []string{primary}
	if len(cands) > 1 {
		list = append(list, cands[(p.next)%len(cands)])
	}
	switch p.defect {
	case unofferedFallback:
		list = append(list, "192.0.2.9:8000")
	case duplicateFallback:
		list = append(list, primary)
	case trustsClientHeader:
		if c := s.headers["x-gateway-destination-endpoint"]; c != "" {
			list = []string{c}
		}
	}
	prefiller := ""
	if s.model == p.pdModel && p.defect != keepsPrefiller && len(s.body) > 16<<10 && len(cands) > 1 {
		list, prefiller = []string{cands[1]}, cands[0]
		if p.defect == prefillerIsPrimary {
			prefiller = cands[1]
		}
	}
	if err := s.srv.Send(s.headersReply(list, prefiller)); err != nil {
		return err
	}
	return s.bodyBack(eos)
}

func (s *miniStream) headersReply(list []string, prefiller string) *extprocv3.ProcessingResponse {
	value := strings.Join(list, ",")
	header := &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-gateway-destination-endpoint", RawValue: []byte(value)}}
	set := []*corev3.HeaderValueOption{header}
	if prefiller != "" {
		set = append(set, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-prefiller-host-port", RawValue: []byte(prefiller)}})
	}
	remove := []string{"x-prefiller-host-port"}
	switch s.p.defect {
	case headerOnlyPrimary:
		header.Header.RawValue = []byte(list[0])
	case appendsDestination:
		//lint:ignore SA1019 the defect is the deprecated append flag.
		header.Append = wrapperspb.Bool(true)
	case keepsPrefiller:
		remove = nil
	}
	ns := "envoy.lb"
	if s.p.defect == wrongNamespace {
		ns = "envoy.lb.destination"
	}
	md, _ := structpb.NewStruct(map[string]any{ns: map[string]any{"x-gateway-destination-endpoint": value}})
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove}, ClearRouteCache: true}}},
		DynamicMetadata: md,
	}
}

func (s *miniStream) bodyBack(eos bool) error {
	if s.body == nil {
		return nil
	}
	c := streamed(s.body, eos && s.p.defect != noEndOfStream)
	if s.p.defect == unstreamedBody {
		c = &extprocv3.CommonResponse{}
	}
	return s.srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: c}}})
}
