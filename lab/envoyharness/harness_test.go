package envoyharness

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

const hangGuard = 20 * time.Second

// scriptedProcessor is an ext_proc server driven by a test function, to
// check how the harness treats replies a correct processor never sends.
type scriptedProcessor struct {
	extprocv3.UnimplementedExternalProcessorServer
	script func(stream extprocv3.ExternalProcessor_ProcessServer) error

	mu   sync.Mutex
	seen []*extprocv3.ProcessingRequest
}

func (p *scriptedProcessor) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	return p.script(&recordingStream{ExternalProcessor_ProcessServer: stream, p: p})
}

type recordingStream struct {
	extprocv3.ExternalProcessor_ProcessServer
	p *scriptedProcessor
}

func (r *recordingStream) Recv() (*extprocv3.ProcessingRequest, error) {
	m, err := r.ExternalProcessor_ProcessServer.Recv()
	if err == nil {
		r.p.mu.Lock()
		r.p.seen = append(r.p.seen, m)
		r.p.mu.Unlock()
	}
	return m, err
}

func startScripted(t *testing.T, script func(extprocv3.ExternalProcessor_ProcessServer) error) (*scriptedProcessor, *grpc.ClientConn) {
	t.Helper()
	p := &scriptedProcessor{script: script}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(g, p)
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); g.Stop() })
	return p, conn
}

func run(t *testing.T, conn *grpc.ClientConn, cfg Config, req *Request) *Exchange {
	t.Helper()
	h, err := New(conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	x, err := h.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Cancel)
	return x
}

func headersReply(m *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{HeaderMutation: m, ClearRouteCache: m != nil},
	}}}
}

func streamedReply(b []byte, eos bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos},
		}}},
	}}}
}

func plainBodyReply() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}}
}

func routeMetadata(ns, ep string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{ns: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"x-gateway-destination-endpoint": structpb.NewStringValue(ep),
	}})}}
}

// drainUntil reads messages until one satisfies stop.
func drainUntil(s extprocv3.ExternalProcessor_ProcessServer, stop func(*extprocv3.ProcessingRequest) bool) error {
	for {
		m, err := s.Recv()
		if err != nil {
			return err
		}
		if stop(m) {
			return nil
		}
	}
}

func isBodyEnd(m *extprocv3.ProcessingRequest) bool { return m.GetRequestBody().GetEndOfStream() }

func TestEnvoyMessageShape(t *testing.T) {
	p, conn := startScripted(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
		if err := drainUntil(s, isBodyEnd); err != nil {
			return err
		}
		md := routeMetadata("envoy.lb", "10.0.0.1:80")
		md.Fields["other.ns"] = structpb.NewStructValue(&structpb.Struct{})
		r := headersReply(nil)
		r.DynamicMetadata = md
		if err := s.Send(r); err != nil {
			return err
		}
		for _, b := range [][]byte{[]byte("abc"), []byte("def")} {
			if err := s.Send(streamedReply(b, false)); err != nil {
				return err
			}
		}
		return s.Send(streamedReply(nil, true))
	})
	x := run(t, conn, DefaultConfig().WithWorkers("10.0.0.1:80"), &Request{Method: "POST", Body: []byte("abcdef"), ChunkSize: 2, Headers: []Header{{"X-Mixed", "v"}}})
	if x.Local != nil {
		t.Fatalf("local %+v", x.Local)
	}
	if string(x.Forward.Body) != "abcdef" || x.Forward.Upstream != "10.0.0.1:80" {
		t.Errorf("forward %+v", x.Forward)
	}
	if d := x.DroppedNamespaces(); len(d) != 1 || d[0] != "other.ns" {
		t.Errorf("dropped %v", d)
	}
	if x.Forward.RouteCacheCleared {
		t.Error("clear_route_cache without a header mutation took effect")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) != 4 { // headers + 3 chunks of 2 bytes
		t.Fatalf("%d messages", len(p.seen))
	}
	for i, m := range p.seen {
		if (m.GetProtocolConfig() != nil) != (i == 0) {
			t.Errorf("message %d protocol_config %v", i, m.GetProtocolConfig())
		}
	}
	pc := p.seen[0].GetProtocolConfig()
	if pc.GetRequestBodyMode() != filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		t.Errorf("protocol config %v", pc)
	}
	for _, h := range p.seen[0].GetRequestHeaders().GetHeaders().GetHeaders() {
		if h.GetValue() != "" || len(h.GetRawValue()) == 0 {
			t.Errorf("header %q not in raw_value only", h.GetKey())
		}
		if h.GetKey() == "X-Mixed" {
			t.Error("header name not lower-cased")
		}
	}
	if p.seen[0].GetRequestHeaders().GetEndOfStream() || !p.seen[3].GetRequestBody().GetEndOfStream() {
		t.Error("end_of_stream flags wrong")
	}
}

func TestOrderingViolations(t *testing.T) {
	cases := []struct {
		name   string
		cfg    Config
		script func(extprocv3.ExternalProcessor_ProcessServer) error
	}{
		{"body_reply_before_headers_reply", DefaultConfig(), func(s extprocv3.ExternalProcessor_ProcessServer) error {
			if err := drainUntil(s, isBodyEnd); err != nil {
				return err
			}
			return s.Send(streamedReply([]byte("x"), true))
		}},
		{"non_streamed_body_in_full_duplex", DefaultConfig(), func(s extprocv3.ExternalProcessor_ProcessServer) error {
			if err := drainUntil(s, isBodyEnd); err != nil {
				return err
			}
			if err := s.Send(headersReply(nil)); err != nil {
				return err
			}
			return s.Send(plainBodyReply())
		}},
		{"streamed_body_in_buffered", bufferedCfg(), func(s extprocv3.ExternalProcessor_ProcessServer) error {
			if _, err := s.Recv(); err != nil {
				return err
			}
			if err := s.Send(headersReply(nil)); err != nil {
				return err
			}
			if _, err := s.Recv(); err != nil {
				return err
			}
			return s.Send(streamedReply([]byte("x"), true))
		}},
		{"trailers_reply_unasked", DefaultConfig(), func(s extprocv3.ExternalProcessor_ProcessServer) error {
			if _, err := s.Recv(); err != nil {
				return err
			}
			return s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}})
		}},
		{"response_reply_on_request_path", DefaultConfig(), func(s extprocv3.ExternalProcessor_ProcessServer) error {
			if _, err := s.Recv(); err != nil {
				return err
			}
			return s.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, conn := startScripted(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
				if err := c.script(s); err != nil {
					return err
				}
				<-s.Context().Done()
				return nil
			})
			x := run(t, conn, c.cfg, &Request{Method: "POST", Body: []byte("{}")})
			if x.Local == nil || x.Local.Cause != "protocol_error" || x.Local.Status != 500 {
				t.Fatalf("local %+v forward %+v", x.Local, x.Forward)
			}
		})
	}
}

// bufferedCfg is envoy-buffered-failopen.yaml failing closed.
func bufferedCfg() Config {
	c := MustShipped("envoy-buffered-failopen.yaml").WithWorkers("10.0.0.1:80", "10.0.0.2:80")
	c.FailureModeAllow = false
	return c
}

func TestBufferedMessageTimeoutAndFailOpen(t *testing.T) {
	block := func(s extprocv3.ExternalProcessor_ProcessServer) error {
		<-s.Context().Done()
		return nil
	}
	_, conn := startScripted(t, block)
	cfg := bufferedCfg()
	cfg.MessageTimeout = 5 * time.Millisecond
	x := run(t, conn, cfg, &Request{Method: "POST", Body: []byte("{}")})
	if x.Local == nil || x.Local.Status != 504 || x.Local.Cause != "message_timeout" {
		t.Fatalf("fail closed: %+v", x.Local)
	}
	// As shipped (fail open): the request goes on unprocessed, and the
	// workers' own load balancer picks, since kvgate named nobody. The
	// client's routing header was stripped before ext_proc and could not
	// have steered it anyway (override_host reads metadata only).
	cfg.FailureModeAllow = true
	x = run(t, conn, cfg, &Request{Method: "POST", Body: []byte("{}"), Headers: []Header{{"x-gateway-destination-endpoint", "6.6.6.6:1"}}})
	if x.Forward == nil || string(x.Forward.Body) != "{}" || x.Forward.RouteErr != nil || (x.Forward.Upstream != "10.0.0.1:80" && x.Forward.Upstream != "10.0.0.2:80") {
		t.Fatalf("fail open: forward %+v local %+v", x.Forward, x.Local)
	}
	if _, ok := Get(x.Forward.Headers, "x-gateway-destination-endpoint"); ok {
		t.Error("client routing header survived")
	}
}

func TestFullDuplexHasNoMessageTimer(t *testing.T) {
	_, conn := startScripted(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
		if err := drainUntil(s, isBodyEnd); err != nil {
			return err
		}
		// Far beyond message_timeout: full duplex has no per-message timer.
		time.Sleep(50 * time.Millisecond)
		r := headersReply(&extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-gateway-destination-endpoint", RawValue: []byte("10.0.0.1:80")}}}})
		r.DynamicMetadata = routeMetadata("envoy.lb", "10.0.0.1:80")
		if err := s.Send(r); err != nil {
			return err
		}
		if err := s.Send(streamedReply([]byte("{}"), true)); err != nil {
			return err
		}
		<-s.Context().Done()
		return nil
	})
	cfg := DefaultConfig().WithWorkers("10.0.0.1:80")
	cfg.MessageTimeout = time.Millisecond
	x := run(t, conn, cfg, &Request{Method: "POST", Body: []byte("{}")})
	if x.Forward == nil || !x.Forward.RouteCacheCleared || x.Forward.Upstream != "10.0.0.1:80" {
		t.Fatalf("forward %+v local %+v", x.Forward, x.Local)
	}
}

func TestBufferLimit413(t *testing.T) {
	_, conn := startScripted(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
		if _, err := s.Recv(); err != nil {
			return err
		}
		if err := s.Send(headersReply(nil)); err != nil {
			return err
		}
		<-s.Context().Done()
		return nil
	})
	cfg := bufferedCfg()
	cfg.BufferLimit = 10
	cfg.MessageTimeout = hangGuard
	x := run(t, conn, cfg, &Request{Method: "POST", Body: make([]byte, 11)})
	if x.Local == nil || x.Local.Status != 413 || x.Local.Cause != "buffer_limit" {
		t.Fatalf("local %+v", x.Local)
	}
}

func TestConfigRejectedLikeEnvoy(t *testing.T) {
	_, conn := startScripted(t, func(extprocv3.ExternalProcessor_ProcessServer) error { return nil })
	c := DefaultConfig()
	c.RequestTrailers = false
	if _, err := New(conn, c); err == nil {
		t.Error("FULL_DUPLEX without trailer SEND accepted")
	}
	// Fail-open with FULL_DUPLEX_STREAMED is a valid config since
	// envoyproxy/envoy#41276.
	c = DefaultConfig()
	c.FailureModeAllow = true
	if _, err := New(conn, c); err != nil {
		t.Errorf("FULL_DUPLEX with failure_mode_allow refused: %v", err)
	}
}

func TestImmediateResponseStatusRules(t *testing.T) {
	if l := immediateLocal(&extprocv3.ImmediateResponse{}); l.Status != 200 {
		t.Errorf("no status: %d", l.Status)
	}
	if l := immediateLocal(&extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_Continue}}); l.Status != 500 {
		t.Errorf("1xx status: %d", l.Status)
	}
}
