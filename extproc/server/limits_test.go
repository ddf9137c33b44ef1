package server_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// rawStream is an ext_proc stream driven message by message, for clients
// that never finish a request (the harness always completes one).
type rawStream struct {
	s      extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
}

func openRaw(t *testing.T, e *env) *rawStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	s, err := extprocv3.NewExternalProcessorClient(e.conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawStream{s: s, cancel: cancel}
	hs := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/completions")},
		{Key: ":authority", RawValue: []byte("t")}, {Key: ":scheme", RawValue: []byte("http")},
	}}
	if err := s.Send(&extprocv3.ProcessingRequest{
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED},
		Request:        &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hs}},
	}); err != nil && err != io.EOF { // EOF: the server already answered and ended the stream
		t.Fatal(err)
	}
	return r
}

func (r *rawStream) chunk(b []byte) error {
	return r.s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: b}}})
}

// immediate waits for the stream's local reply.
func (r *rawStream) immediate(t *testing.T) *extprocv3.ImmediateResponse {
	t.Helper()
	for {
		m, err := r.s.Recv()
		if err != nil {
			t.Fatalf("no immediate response: %v", err)
		}
		if ir := m.GetImmediateResponse(); ir != nil {
			return ir
		}
	}
}

// The buffer budget is shared by every stream: large bodies that never
// end are refused (503, retry-after) once they hold three quarters of it,
// and small requests are still routed meanwhile.
func TestBufferBudgetRefusesLargeBodiesNotSmallOnes(t *testing.T) {
	e := startServer(t, staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"}),
		server.Config{MaxBodyBytes: 1 << 20, BufferBudgetBytes: 2 << 20, RequestIdleTimeout: hangGuard, RequestTimeout: hangGuard})
	piece := bytes.Repeat([]byte("a"), 64<<10)
	var open []*rawStream
	for range 4 {
		r := openRaw(t, e)
		open = append(open, r)
		for range 14 { // 896 KiB, under the body limit
			if r.chunk(piece) != nil {
				break
			}
		}
	}
	poll.True(t, "a large body refused", hangGuard, func() bool { return e.srv.Stats().LimitHits["buffer_budget"] > 0 })
	// Two bodies take the large share (2 × 640 KiB past their small
	// allowance of 256 KiB, of 1.5 MiB); the third cannot.
	if ir := open[2].immediate(t); ir.GetStatus().GetCode() != http.StatusServiceUnavailable ||
		!strings.Contains(string(ir.GetBody()), "buffering its limit") || ir.GetHeaders() == nil {
		t.Fatalf("third large body: %v %q", ir.GetStatus(), ir.GetBody())
	}
	if used := e.srv.Stats().BufferedBytes; used > 2<<20 {
		t.Fatalf("%d bytes held, over the 2 MiB budget", used)
	}
	// A normal request still gets through.
	x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{Method: "POST", Body: []byte(`{"prompt":"hi"}`)})
	mustForward(t, x)
	for _, r := range open {
		r.cancel()
	}
	poll.True(t, "the budget released", hangGuard, func() bool { return e.srv.Stats().BufferedBytes == 0 })
}

// Bookkeeping per chunk is O(1): 20,000 one-byte chunks hold the body's
// bytes (in a buffer that grows by doubling), not a record per chunk.
func TestOneByteChunksCostNoPerChunkMemory(t *testing.T) {
	e := startServer(t, staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"}), server.Config{RequestIdleTimeout: hangGuard, RequestTimeout: hangGuard})
	r := openRaw(t, e)
	const n = 20_000
	for range n {
		if err := r.chunk([]byte{'z'}); err != nil {
			t.Fatal(err)
		}
	}
	// The last chunk has been taken once the reservation stops growing;
	// 32 KiB (the doubled buffer) plus the headers is all it may hold.
	poll.True(t, "the chunks received", hangGuard, func() bool { return e.srv.Stats().BufferedBytes >= n })
	if used := e.srv.Stats().BufferedBytes; used > 2*n+8192 {
		t.Fatalf("%d bytes reserved for a %d-byte body in 1-byte chunks", used, n)
	}
	r.cancel()
}

// Envoy runs no message timer in FULL_DUPLEX_STREAMED
// (processor_state.cc onStartProcessorCall), so kvgate bounds the request
// phase: a stream idle past request_idle_timeout, or incomplete past
// request_timeout, gets 408 and its memory back.
func TestRequestDeadlines(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		e := startServer(t, staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"}), server.Config{RequestIdleTimeout: 100 * time.Millisecond, RequestTimeout: hangGuard})
		r := openRaw(t, e)
		if err := r.chunk([]byte(`{"prompt":`)); err != nil {
			t.Fatal(err)
		}
		ir := r.immediate(t)
		if ir.GetStatus().GetCode() != http.StatusRequestTimeout || !strings.Contains(string(ir.GetBody()), "no request data for 100ms") {
			t.Fatalf("%v %s", ir.GetStatus(), ir.GetBody())
		}
		poll.True(t, "released", hangGuard, func() bool {
			return e.srv.Stats().BufferedBytes == 0 && e.srv.Stats().LimitHits["request_idle_timeout"] == 1
		})
	})
	t.Run("total", func(t *testing.T) {
		e := startServer(t, staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"}), server.Config{RequestIdleTimeout: time.Second, RequestTimeout: 300 * time.Millisecond})
		r := openRaw(t, e)
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
					if r.chunk([]byte("x")) != nil {
						return
					}
				}
			}
		}()
		ir := r.immediate(t)
		close(stop)
		if ir.GetStatus().GetCode() != http.StatusRequestTimeout || !strings.Contains(string(ir.GetBody()), "not complete within 300ms") {
			t.Fatalf("%v %s", ir.GetStatus(), ir.GetBody())
		}
	})
	t.Run("router", func(t *testing.T) {
		// A router that ignores nothing but its context: the request
		// deadline bounds it too, and the client gets 504.
		r := &fakeDecider{fn: func(ctx context.Context, _ *server.Request) (*server.Decision, *server.RouteError) {
			<-ctx.Done()
			return nil, &server.RouteError{Status: 503}
		}}
		e := startServer(t, r, server.Config{RequestIdleTimeout: time.Second, RequestTimeout: 200 * time.Millisecond})
		x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{Method: "POST", Body: []byte("{}")})
		if x.Local == nil || x.Local.Status != http.StatusGatewayTimeout {
			t.Fatalf("local %+v", x.Local)
		}
	})
}

// Beyond max_open streams a new one gets 503 at once.
func TestMaxOpenStreams(t *testing.T) {
	e := startServer(t, staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"}), server.Config{MaxOpenStreams: 1, RequestIdleTimeout: hangGuard, RequestTimeout: hangGuard})
	first := openRaw(t, e)
	poll.True(t, "the first stream open", hangGuard, func() bool { return e.srv.Stats().StreamsActive == 1 })
	second := openRaw(t, e)
	if ir := second.immediate(t); ir.GetStatus().GetCode() != http.StatusServiceUnavailable || !strings.Contains(string(ir.GetBody()), "limit of 1 requests") {
		t.Fatalf("%v %s", ir.GetStatus(), ir.GetBody())
	}
	if _, err := second.s.Recv(); err != io.EOF {
		t.Errorf("refused stream ended with %v, want a clean end", err)
	}
	first.cancel()
	poll.True(t, "stats", hangGuard, func() bool { return e.srv.Stats().StreamsRefused == 1 })
}

// A stream past max_duration ends cleanly: Envoy carries on unprocessed
// (ext_proc.cc onGrpcClose) and kvgate's ticket ends as a timeout.
func TestMaxStreamDurationEndsCleanly(t *testing.T) {
	tickets := make(chan *ticket, 1)
	e := startServer(t, ticketDecider(tickets), server.Config{MaxStreamDuration: 300 * time.Millisecond, RequestTimeout: 200 * time.Millisecond, RequestIdleTimeout: 100 * time.Millisecond})
	x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{Method: "POST", Body: []byte("{}")})
	mustForward(t, x)
	tk := <-tickets
	if _, err := x.RespondHeaders(200, nil, false); err != nil {
		t.Fatal(err)
	}
	tk.wait(t)
	<-x.Done()
	if server.Outcome(tk.outcome.Load()) != server.OutcomeTimeout || x.Err() != nil {
		t.Errorf("outcome %v, stream end %v", server.Outcome(tk.outcome.Load()), x.Err())
	}
	// The response goes on without kvgate.
	if err := x.RespondBody([]byte("data"), true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if b, end, err := x.Downstream(ctx); err != nil || !end || string(b) != "data" {
		t.Errorf("downstream %q %v %v", b, end, err)
	}
}

// With the response path unprocessed (envoy-buffered-failopen.yaml:
// response modes SKIP/NONE) Envoy closes the stream at the response
// headers (ext_proc.cc encodeHeaders, noExternalProcess): that is neither
// a client cancel nor a known end, and counts as unobserved.
func TestResponseSkipIsUnobservedNotCancelled(t *testing.T) {
	tickets := make(chan *ticket, 1)
	e := startServer(t, ticketDecider(tickets), server.Config{})
	cfg := envoyharness.MustShipped("envoy-buffered-failopen.yaml")
	cfg.MessageTimeout = hangGuard
	x := mustStart(t, e.harness(t, cfg), &envoyharness.Request{Method: "POST", Body: []byte("{}")})
	mustForward(t, x)
	tk := <-tickets
	if _, err := x.RespondHeaders(200, nil, false); err != nil {
		t.Fatal(err)
	}
	tk.wait(t)
	if o := server.Outcome(tk.outcome.Load()); o != server.OutcomeUnobserved {
		t.Errorf("outcome %v, want unobserved", o)
	}
}

// Endpoints go to Envoy in its canonical spelling (override_host compares
// strings exactly); the served endpoint comes back in the router's.
func TestEndpointsCanonicalServedInRoutersSpelling(t *testing.T) {
	tk := newTicket()
	r := &fakeDecider{fn: func(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
		return &server.Decision{Endpoint: "[0:0:0:0:0:0:0:1]:8000", Fallbacks: []string{"[FD00:0::3]:8000"}, Ticket: tk}, nil
	}}
	e := startServer(t, r, server.Config{})
	h, err := envoyharness.New(e.conn, envoyharness.DefaultConfig().WithWorkers("[::1]:8000", "[fd00::3]:8000"))
	if err != nil {
		t.Fatal(err)
	}
	x := mustStart(t, h, &envoyharness.Request{Method: "POST", Body: []byte("{}")})
	f := mustForward(t, x)
	if v, _ := envoyharness.Get(f.Headers, "x-gateway-destination-endpoint"); v != "[::1]:8000,[fd00::3]:8000" {
		t.Fatalf("destination %q", v)
	}
	if host, err := f.NextUpstream(); err != nil || host != "[fd00::3]:8000" {
		t.Fatalf("retry host %q %v", host, err)
	}
	if _, err := x.RespondHeaders(200, nil, true); err != nil {
		t.Fatal(err)
	}
	tk.wait(t)
	if v, _ := tk.served.Load().(string); v != "[FD00:0::3]:8000" {
		t.Errorf("served %q, want the router's spelling", v)
	}
}

// A host name never reaches Envoy: ORIGINAL_DST cannot parse one and
// override_host would never find it.
func TestHostnameDecisionRefused(t *testing.T) {
	e := startServer(t, staticDecider(server.Decision{Endpoint: "localhost:8001"}), server.Config{})
	x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{Method: "POST", Body: []byte("{}")})
	if x.Local == nil || x.Local.Status != 500 {
		t.Fatalf("local %+v", x.Local)
	}
	if e.srv.Stats().InvalidDecisions != 1 {
		t.Errorf("stats %+v", e.srv.Stats())
	}
}

// A declared content-length sizes the body buffer once (appendBody), but it
// is only a hint: a body longer or shorter than declared, a length past the
// body limit or one that is not a number, still arrives whole and unchanged.
func TestDeclaredLengthIsOnlyAHint(t *testing.T) {
	r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
	e := startServer(t, r, server.Config{MaxBodyBytes: 64 << 10})
	h := e.harness(t, envoyharness.DefaultConfig())
	body := make([]byte, 20_000)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	for _, declared := range []string{"20000", "30000", "5000", "1", "0", "65536", "9999999", "-5", "abc", ""} {
		req := &envoyharness.Request{Method: "POST", Body: body, ChunkSize: 3000}
		if declared != "" {
			req.Headers = []envoyharness.Header{{Name: "content-length", Value: declared}}
		}
		x := mustStart(t, h, req)
		f := mustForward(t, x)
		if !bytes.Equal(f.Body, body) {
			t.Errorf("content-length %q: forwarded %d bytes, not the %d-byte body", declared, len(f.Body), len(body))
		}
		// End the stream here: left to mustStart's context it would close
		// only at hangGuard, the very deadline waitIdle waits for.
		x.Cancel()
		<-x.Done()
	}
	e.waitIdle(t)
	if used := e.srv.Stats().BufferedBytes; used != 0 {
		t.Errorf("%d bytes still reserved after every stream ended", used)
	}
}
