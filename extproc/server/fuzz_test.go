package server

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// memStream is an in-memory ext_proc stream: a fixed list of messages,
// then EOF or a cancelled context.
type memStream struct {
	grpc.ServerStream
	ctx         context.Context
	cancel      context.CancelFunc
	msgs        []*extprocv3.ProcessingRequest
	cancelAtEnd bool
	sent        []*extprocv3.ProcessingResponse
}

func (m *memStream) Context() context.Context { return m.ctx }
func (m *memStream) Send(r *extprocv3.ProcessingResponse) error {
	if err := m.ctx.Err(); err != nil {
		return err
	}
	m.sent = append(m.sent, r)
	return nil
}
func (m *memStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if len(m.msgs) == 0 {
		if m.cancelAtEnd {
			m.cancel()
			return nil, context.Canceled
		}
		return nil, io.EOF
	}
	r := m.msgs[0]
	m.msgs = m.msgs[1:]
	return r, nil
}

type countingTicket struct{ firstBytes, finishes int }

func (c *countingTicket) FirstByte()     { c.firstBytes++ }
func (c *countingTicket) Finish(Outcome) { c.finishes++ }

type fuzzDecider struct{ tickets []*countingTicket }

func (f *fuzzDecider) Decide(_ context.Context, req *Request) (*Decision, *RouteError) {
	switch len(req.Body) % 4 {
	case 1:
		return nil, &RouteError{Status: 429 + len(req.Body)%200}
	case 2:
		t := &countingTicket{}
		f.tickets = append(f.tickets, t)
		return &Decision{Endpoint: "not an endpoint", Ticket: t}, nil
	}
	t := &countingTicket{}
	f.tickets = append(f.tickets, t)
	d := &Decision{Endpoint: "10.0.0.1:8000", Fallbacks: []string{"10.0.0.2:8000"}, Ticket: t, DebugHeader: "d"}
	return d, nil
}

var fuzzModes = []filterv3.ProcessingMode_BodySendMode{
	filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_STREAMED,
	filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
}

// decodeOps turns fuzz bytes into an ext_proc message sequence: two bytes
// per message (kind, flags).
func decodeOps(data []byte) []*extprocv3.ProcessingRequest {
	var msgs []*extprocv3.ProcessingRequest
	for i := 0; i+1 < len(data) && len(msgs) < 64; i += 2 {
		kind, flags := data[i]%8, data[i+1]
		eos := flags&1 == 1
		payload := make([]byte, int(flags>>1)*37)
		var m *extprocv3.ProcessingRequest
		switch kind {
		case 0, 7:
			hs := []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/completions")}}
			if kind == 7 {
				hs = append(hs, &corev3.HeaderValue{Key: "x-gateway-destination-endpoint", Value: "6.6.6.6:6"}, &corev3.HeaderValue{Key: "x-kvgate-debug", RawValue: []byte("1")})
			}
			for j := 0; j < int(flags>>4); j++ {
				hs = append(hs, &corev3.HeaderValue{Key: "x-n" + strconv.Itoa(j), RawValue: payload})
			}
			m = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: eos}}}
			if kind == 7 {
				m.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
					SubsetHintNamespace: {Fields: map[string]*structpb.Value{SubsetHintKey: structpb.NewStringValue("10.0.0.1:8000,")}},
				}}
			}
		case 1:
			m = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: payload, EndOfStream: eos}}}
		case 2:
			m = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
		case 3:
			code := []string{"200", "503", "504", "abc"}[flags>>1%4]
			m = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
				Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte(code)}}}, EndOfStream: eos,
			}}}
			m.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
				MetadataNamespace: {Fields: map[string]*structpb.Value{MetadataServed: structpb.NewStringValue("10.0.0.2:8000")}},
			}}
		case 4:
			m = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: payload, EndOfStream: eos}}}
		case 5:
			m = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}}
		case 6:
			m = &extprocv3.ProcessingRequest{}
		}
		if len(msgs) == 0 && flags&2 == 2 {
			m.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: fuzzModes[(flags>>2)%4], ResponseBodyMode: fuzzModes[(flags>>4)%4]}
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// FuzzProcessStream feeds arbitrary message sequences to one stream. Every
// sequence must end (no hang, no panic) and every ticket the router handed
// out must be finished exactly once, with FirstByte at most once.
func FuzzProcessStream(f *testing.F) {
	f.Add([]byte{0, 2 | 0x0c, 1, 8, 1, 9, 3, 0, 4, 8, 4, 1})
	f.Add([]byte{0, 3, 3, 1})
	f.Add([]byte{0, 2 | 0x08, 1, 255, 1, 200})
	f.Add([]byte{7, 0, 2, 0, 3, 4, 5, 0, 1})
	f.Add([]byte{6, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		router := &fuzzDecider{}
		s, err := New(router, Config{MaxBodyBytes: 3000, MaxHeaderCount: 10, MaxHeaderBytes: 4000, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ms := &memStream{ctx: ctx, cancel: cancel, msgs: decodeOps(data), cancelAtEnd: len(data)%2 == 1}
		_ = s.Process(ms)
		for i, tk := range router.tickets {
			if tk.finishes != 1 || tk.firstBytes > 1 {
				t.Fatalf("ticket %d: %d finishes, %d first bytes", i, tk.finishes, tk.firstBytes)
			}
		}
		for _, r := range ms.sent {
			if sb := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse(); sb != nil && len(sb.GetBody()) > MaxStreamedChunk {
				t.Fatalf("streamed chunk of %d bytes", len(sb.GetBody()))
			}
			if err := r.ValidateAll(); err != nil {
				t.Fatalf("invalid reply: %v", err)
			}
		}
		if st := s.Stats(); st.StreamsActive != 0 {
			t.Fatalf("stream still active: %+v", st)
		}
	})
}
