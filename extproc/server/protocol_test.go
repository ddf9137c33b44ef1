package server_test

import (
	"context"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvgate/kvgate/extproc/server"
)

func headersMsg(mode filterv3.ProcessingMode_BodySendMode, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: mode, ResponseBodyMode: mode},
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/completions")},
			}},
			EndOfStream: eos,
		}},
	}
}

func fdHeaders(eos bool) *extprocv3.ProcessingRequest {
	return headersMsg(filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, eos)
}

func body(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

func resHeaders(eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")}}}, EndOfStream: eos,
	}}}
}

func resBody(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

// runRaw sends msgs on one stream, reading replies meanwhile, and returns
// the stream's final error.
func runRaw(t *testing.T, e *env, msgs ...*extprocv3.ProcessingRequest) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(e.conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if st.Send(m) != nil {
			break
		}
	}
	_ = st.CloseSend()
	for {
		if _, err := st.Recv(); err != nil {
			return err
		}
	}
}

func TestMalformedSequencesEndWithInvalidArgument(t *testing.T) {
	trailers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
	cases := []struct {
		name string
		msgs []*extprocv3.ProcessingRequest
		want string
	}{
		{"body_before_headers", []*extprocv3.ProcessingRequest{body([]byte("x"), true)}, "request_body before request_headers"},
		{"headers_twice", []*extprocv3.ProcessingRequest{fdHeaders(false), fdHeaders(false)}, "request_headers received twice"},
		{"body_after_routing", []*extprocv3.ProcessingRequest{fdHeaders(true), body([]byte("x"), true)}, "request_body after the request was routed"},
		{"response_body_before_response_headers", []*extprocv3.ProcessingRequest{fdHeaders(true), resBody([]byte("x"), true)}, "response_body before response_headers"},
		{"response_before_request", []*extprocv3.ProcessingRequest{resHeaders(false)}, "response_headers before request_headers"},
		{"empty_message", []*extprocv3.ProcessingRequest{{}}, "carries no request"},
		{"streamed_mode", []*extprocv3.ProcessingRequest{headersMsg(filterv3.ProcessingMode_STREAMED, false)}, "not supported"},
		{"second_buffered_body", []*extprocv3.ProcessingRequest{headersMsg(filterv3.ProcessingMode_BUFFERED, false), body([]byte("{}"), true), body([]byte("{}"), true)}, "request_body after the request was routed"},
		{"buffered_trailers_before_body", []*extprocv3.ProcessingRequest{headersMsg(filterv3.ProcessingMode_BUFFERED, false), trailers}, "request_trailers before request_body"},
		{"response_body_after_end", []*extprocv3.ProcessingRequest{fdHeaders(true), resHeaders(true), resBody([]byte("x"), true)}, "after the end of the response"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := startServer(t, staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"}), server.Config{})
			err := runRaw(t, e, c.msgs...)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want InvalidArgument containing %q", err, c.want)
			}
			if e.srv.Stats().ProtocolErrors != 1 {
				t.Errorf("protocol errors %d", e.srv.Stats().ProtocolErrors)
			}
		})
	}
}

func TestMalformedSubsetHint(t *testing.T) {
	e := startServer(t, staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"}), server.Config{})
	m := fdHeaders(true)
	m.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint-subset": structpb.NewNumberValue(3)}},
	}}
	if err := runRaw(t, e, m); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("err %v", err)
	}
}

func TestSubsetHintAsCommaString(t *testing.T) {
	r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
	e := startServer(t, r, server.Config{})
	m := fdHeaders(true)
	m.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint-subset": structpb.NewStringValue("10.0.0.1:8000, 10.0.0.2:8000,")}},
	}}
	_ = runRaw(t, e, m)
	if h := r.seen()[0].SubsetHint; len(h) != 2 || h[0] != "10.0.0.1:8000" || h[1] != "10.0.0.2:8000" {
		t.Errorf("hint %q", h)
	}
}

// TestNoProtocolConfigUsesAssumedModes: an Envoy too old to send
// protocol_config gets the configured assumption.
func TestNoProtocolConfigUsesAssumedModes(t *testing.T) {
	e := startServer(t, staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"}), server.Config{AssumedRequestBodyMode: filterv3.ProcessingMode_BUFFERED})
	h := headersMsg(filterv3.ProcessingMode_BUFFERED, false)
	h.ProtocolConfig = nil
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(e.conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(h); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil || r.GetRequestHeaders() == nil {
		t.Fatalf("headers reply %v err %v", r, err)
	}
	if err := st.Send(body([]byte("{}"), true)); err != nil {
		t.Fatal(err)
	}
	r, err = st.Recv()
	if err != nil || r.GetRequestBody().GetResponse().GetHeaderMutation() == nil {
		t.Fatalf("body reply %v err %v", r, err)
	}
}

// TestProtocolErrorAfterRoutingFinishesTicket: a broken sequence after the
// decision ends the stream and the ticket, once, as a stream error.
func TestProtocolErrorAfterRoutingFinishesTicket(t *testing.T) {
	tickets := make(chan *ticket, 1)
	e := startServer(t, ticketDecider(tickets), server.Config{})
	err := runRaw(t, e, fdHeaders(true), resHeaders(false), fdHeaders(false))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("err %v", err)
	}
	tk := <-tickets
	tk.wait(t)
	e.waitIdle(t)
	if tk.finishes.Load() != 1 || server.Outcome(tk.outcome.Load()) != server.OutcomeStreamError {
		t.Errorf("finishes %d outcome %v", tk.finishes.Load(), server.Outcome(tk.outcome.Load()))
	}
}
