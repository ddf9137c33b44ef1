package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

type modeCase struct {
	name string
	cfg  envoyharness.Config
}

func modes() []modeCase {
	return []modeCase{
		{"full_duplex", envoyharness.DefaultConfig()},
		{"buffered", bufferedConfig()},
	}
}

func staticDecider(d server.Decision) *fakeDecider {
	return &fakeDecider{fn: func(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
		cp := d
		return &cp, nil
	}}
}

func mustStart(t *testing.T, h *envoyharness.Harness, req *envoyharness.Request) *envoyharness.Exchange {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	x, err := h.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Cancel)
	return x
}

func mustForward(t *testing.T, x *envoyharness.Exchange) *envoyharness.Forwarded {
	t.Helper()
	if x.Local != nil {
		t.Fatalf("got local reply %d (%s): %v body=%q", x.Local.Status, x.Local.Cause, x.Local.Err, x.Local.Body)
	}
	return x.Forward
}

func TestRoutingHeadersAndMetadata(t *testing.T) {
	body := bytes.Repeat([]byte(`{"model":"m","prompt":"hello"}`), 100)
	for _, m := range modes() {
		t.Run(m.name, func(t *testing.T) {
			r := staticDecider(server.Decision{
				Endpoint:  "10.0.0.1:8000",
				Fallbacks: []string{"10.0.0.2:8000", "[fd00::3]:8000"},
				Prefiller: "10.0.0.9:8100",
			})
			e := startServer(t, r, server.Config{})
			x := mustStart(t, e.harness(t, m.cfg), &envoyharness.Request{
				Method: "POST", Path: "/v1/completions", Body: body, ChunkSize: 700,
				Headers: []envoyharness.Header{{Name: "content-type", Value: "application/json"}, {Name: "x-request-id", Value: "req-1"}, {Name: "x-kvgate-debug", Value: "1"}},
			})
			f := mustForward(t, x)
			// The header carries the metadata's value (GIE: never two values).
			if v, _ := envoyharness.Get(f.Headers, "x-gateway-destination-endpoint"); v != "10.0.0.1:8000,10.0.0.2:8000,[fd00::3]:8000" {
				t.Errorf("destination header = %q", v)
			}
			if v, _ := envoyharness.Get(f.Headers, "x-prefiller-host-port"); v != "10.0.0.9:8100" {
				t.Errorf("prefiller header = %q", v)
			}
			md := x.Metadata()["envoy.lb"].GetFields()["x-gateway-destination-endpoint"].GetStringValue()
			if md != "10.0.0.1:8000,10.0.0.2:8000,[fd00::3]:8000" {
				t.Errorf("envoy.lb metadata = %q", md)
			}
			if f.Upstream != "10.0.0.1:8000" {
				t.Errorf("upstream %q", f.Upstream)
			}
			if !f.RouteCacheCleared {
				t.Error("route cache not cleared")
			}
			if !bytes.Equal(f.Body, body) {
				t.Errorf("forwarded body changed: %d bytes, want %d", len(f.Body), len(body))
			}
			calls := r.seen()
			if len(calls) != 1 {
				t.Fatalf("router called %d times", len(calls))
			}
			c := calls[0]
			// The client's x-kvgate-debug never reaches kvgate: the shipped
			// config strips x-kvgate-* before ext_proc.
			if c.Method != "POST" || c.Path != "/v1/completions" || c.RequestID != "req-1" || c.Debug || !bytes.Equal(c.Body, body) {
				t.Errorf("router saw method=%q path=%q id=%q debug=%v body=%d bytes", c.Method, c.Path, c.RequestID, c.Debug, len(c.Body))
			}
			if c.Headers["content-type"] != "application/json" {
				t.Errorf("router headers = %v", c.Headers)
			}
			if c.SubsetHint != nil {
				t.Errorf("subset hint = %v, want nil", c.SubsetHint)
			}
		})
	}
}

// The shipped configs strip client routing headers before ext_proc; kvgate
// must not depend on that (a user's own Envoy may not), so these cases run
// without the header_mutation filter.
func TestSpoofedRoutingHeadersNeverRouteOrSurvive(t *testing.T) {
	for _, onHeader := range []bool{false, true} {
		for _, m := range modes() {
			t.Run(m.name+"/on_header="+strconv.FormatBool(onHeader), func(t *testing.T) {
				r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
				e := startServer(t, r, server.Config{SingleDestination: onHeader})
				cfg := m.cfg
				if onHeader {
					hr := envoyharness.MustShipped("envoy-header-routing.yaml")
					cfg.Route = hr.Route
				}
				cfg.StripHeaders = nil
				x := mustStart(t, e.harness(t, cfg), &envoyharness.Request{
					Method: "POST", Path: "/v1/chat/completions", Body: []byte(`{"x":1}`),
					Headers: []envoyharness.Header{
						{Name: "x-gateway-destination-endpoint", Value: "6.6.6.6:66"},
						{Name: "X-Gateway-Destination-Endpoint", Value: "6.6.6.7:66"},
						{Name: "x-gateway-destination-endpoint-served", Value: "6.6.6.6:66"},
						{Name: "x-prefiller-host-port", Value: "6.6.6.6:67"},
					},
				})
				f := mustForward(t, x)
				if f.Upstream != "10.0.0.1:8000" {
					t.Errorf("routed to %q", f.Upstream)
				}
				if vs := envoyharness.Values(f.Headers, "x-gateway-destination-endpoint"); len(vs) != 1 || vs[0] != "10.0.0.1:8000" {
					t.Errorf("destination headers upstream = %v", vs)
				}
				for _, n := range []string{"x-gateway-destination-endpoint-served", "x-prefiller-host-port"} {
					if vs := envoyharness.Values(f.Headers, n); len(vs) != 0 {
						t.Errorf("client %s survived: %v", n, vs)
					}
				}
				for k := range r.seen()[0].Headers {
					if k == "x-gateway-destination-endpoint" || k == "x-gateway-destination-endpoint-served" || k == "x-prefiller-host-port" {
						t.Errorf("router saw client routing header %q", k)
					}
				}
			})
		}
	}
}

func TestHeaderOnlyGETRoutedAtHeaders(t *testing.T) {
	for _, m := range modes() {
		t.Run(m.name, func(t *testing.T) {
			r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
			e := startServer(t, r, server.Config{})
			x := mustStart(t, e.harness(t, m.cfg), &envoyharness.Request{Method: "GET", Path: "/v1/models"})
			f := mustForward(t, x)
			if f.Upstream != "10.0.0.1:8000" || len(f.Body) != 0 {
				t.Errorf("upstream %q body %q", f.Upstream, f.Body)
			}
			if _, ok := envoyharness.Get(f.Headers, "content-length"); ok {
				t.Error("content-length set on a body-less request")
			}
			if c := r.seen()[0]; c.Body != nil || c.Method != "GET" {
				t.Errorf("router saw body %v method %q", c.Body, c.Method)
			}
			if s := e.srv.Stats(); s.RequestsHeaderOnly != 1 || s.Routed != 1 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

func TestModesCounted(t *testing.T) {
	r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
	e := startServer(t, r, server.Config{})
	for _, m := range modes() {
		mustForward(t, mustStart(t, e.harness(t, m.cfg), &envoyharness.Request{Method: "POST", Body: []byte("{}")}))
	}
	if s := e.srv.Stats(); s.RequestsFullDuplex != 1 || s.RequestsBuffered != 1 || s.Routed != 2 {
		t.Errorf("stats %+v", s)
	}
}

func TestOversizeBodyGets413(t *testing.T) {
	for _, m := range modes() {
		t.Run(m.name, func(t *testing.T) {
			r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
			e := startServer(t, r, server.Config{MaxBodyBytes: 4000})
			x := mustStart(t, e.harness(t, m.cfg), &envoyharness.Request{Method: "POST", Body: make([]byte, 4001), ChunkSize: 512})
			if x.Local == nil || x.Local.Status != 413 || x.Local.Cause != "immediate_response" {
				t.Fatalf("local reply %+v, forward %v", x.Local, x.Forward)
			}
			if ct, _ := envoyharness.Get(x.Local.Headers, "content-type"); ct != "application/json" {
				t.Errorf("content-type %q", ct)
			}
			var body struct {
				Error struct {
					Message, Type string
					Code          *string
				}
			}
			if err := json.Unmarshal(x.Local.Body, &body); err != nil || body.Error.Code == nil || *body.Error.Code != "request_too_large" {
				t.Errorf("body %s (%v)", x.Local.Body, err)
			}
			if len(r.seen()) != 0 {
				t.Error("router called for an oversize body")
			}
			if got := e.srv.Stats().ImmediateResponses[413]; got != 1 {
				t.Errorf("413 count %d", got)
			}
		})
	}
	t.Run("exact_limit_accepted", func(t *testing.T) {
		r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
		e := startServer(t, r, server.Config{MaxBodyBytes: 4000})
		mustForward(t, mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{Method: "POST", Body: make([]byte, 4000), ChunkSize: 512}))
	})
}

// TestOversize413BeforeEndOfBody shows the 413 comes as soon as the limit
// is crossed, without waiting for (or holding) the rest of the body.
func TestOversize413BeforeEndOfBody(t *testing.T) {
	r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
	e := startServer(t, r, server.Config{MaxBodyBytes: 1000})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(e.conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(m *extprocv3.ProcessingRequest) {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	send(fdHeaders(false))
	send(body(make([]byte, 600), false))
	send(body(make([]byte, 600), false)) // crosses 1000; no end_of_stream ever sent
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetImmediateResponse().GetStatus().GetCode(); got != 413 {
		t.Fatalf("reply %v", resp)
	}
}

func TestRouteErrorBecomesImmediateResponse(t *testing.T) {
	for _, m := range modes() {
		t.Run(m.name, func(t *testing.T) {
			want := []byte(`{"error":{"message":"shed","type":"rate_limit","param":null,"code":null}}`)
			r := &fakeDecider{fn: func(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
				return nil, &server.RouteError{Status: 429, Body: want, Headers: map[string]string{"retry-after": "1", "content-type": "text/html"}}
			}}
			e := startServer(t, r, server.Config{})
			x := mustStart(t, e.harness(t, m.cfg), &envoyharness.Request{Method: "POST", Body: []byte(`{}`)})
			if x.Local == nil || x.Local.Status != 429 || !bytes.Equal(x.Local.Body, want) {
				t.Fatalf("local %+v", x.Local)
			}
			if v, _ := envoyharness.Get(x.Local.Headers, "retry-after"); v != "1" {
				t.Errorf("retry-after %q", v)
			}
			if vs := envoyharness.Values(x.Local.Headers, "content-type"); len(vs) != 1 || vs[0] != "application/json" {
				t.Errorf("content-type %v", vs)
			}
		})
	}
	t.Run("generated_body", func(t *testing.T) {
		r := &fakeDecider{fn: func(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
			return nil, &server.RouteError{Status: 503}
		}}
		e := startServer(t, r, server.Config{})
		x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{Method: "GET"})
		var body struct {
			Error struct{ Message, Type string }
		}
		if x.Local == nil || x.Local.Status != 503 || json.Unmarshal(x.Local.Body, &body) != nil || body.Error.Message != "Service Unavailable" || body.Error.Type != "server_error" {
			t.Fatalf("local %+v", x.Local)
		}
	})
}

// kvgate forwards the body as it came (the P/D sidecar, not kvgate, adds
// kv_transfer_params); a body larger than one streamed chunk goes back cut
// at MaxStreamedChunk.
func TestLargeBodyForwardedUnchangedAndRechunked(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 200_000/16+1)
	for _, m := range modes() {
		t.Run(m.name, func(t *testing.T) {
			r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
			e := startServer(t, r, server.Config{})
			x := mustStart(t, e.harness(t, m.cfg), &envoyharness.Request{
				Method: "POST", Body: body, ChunkSize: 16 << 10,
				Headers: []envoyharness.Header{{Name: "content-length", Value: strconv.Itoa(len(body))}},
			})
			f := mustForward(t, x)
			if !bytes.Equal(f.Body, body) {
				t.Fatalf("forwarded %d bytes, want the %d-byte body unchanged", len(f.Body), len(body))
			}
			// BUFFERED: the client's content-length stays, true to the
			// unchanged body. FULL_DUPLEX_STREAMED: Envoy removed it (the
			// upstream request is sent without one).
			want := strconv.Itoa(len(body))
			if m.name == "full_duplex" {
				want = ""
			}
			if v, _ := envoyharness.Get(f.Headers, "content-length"); v != want {
				t.Errorf("content-length %q, want %q", v, want)
			}
			chunks := 0
			for _, resp := range x.Trace() {
				sb := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
				if sb == nil {
					continue
				}
				chunks++
				if len(sb.GetBody()) > server.MaxStreamedChunk {
					t.Errorf("streamed chunk of %d bytes", len(sb.GetBody()))
				}
			}
			if m.name == "full_duplex" && chunks != (len(body)+server.MaxStreamedChunk-1)/server.MaxStreamedChunk {
				t.Errorf("%d streamed chunks", chunks)
			}
		})
	}
}

func TestOriginalChunksPassThroughUnchanged(t *testing.T) {
	r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
	e := startServer(t, r, server.Config{})
	body := make([]byte, 10_300)
	for i := range body {
		body[i] = byte(i * 7)
	}
	x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{Method: "POST", Body: body, ChunkSize: 1000})
	f := mustForward(t, x)
	if !bytes.Equal(f.Body, body) {
		t.Fatal("body changed")
	}
	var sizes []int
	var eos []bool
	for _, resp := range x.Trace() {
		if sb := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse(); sb != nil {
			sizes = append(sizes, len(sb.GetBody()))
			eos = append(eos, sb.GetEndOfStream())
		}
	}
	// The body goes back cut at MaxStreamedChunk, not at Envoy's chunk
	// boundaries: kvgate keeps no per-chunk bookkeeping, and Envoy accepts
	// M chunks answered by N StreamedBodyResponses.
	if len(sizes) != 1 || sizes[0] != len(body) || !eos[0] {
		t.Errorf("chunk sizes %v end flags %v", sizes, eos)
	}
	if _, ok := envoyharness.Get(f.Headers, "content-length"); ok {
		t.Error("content-length added without a body mutation")
	}
}

func TestFullDuplexWithTrailers(t *testing.T) {
	r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
	e := startServer(t, r, server.Config{})
	body := bytes.Repeat([]byte("z"), 5000)
	x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{
		Method: "POST", Body: body, ChunkSize: 2048,
		Trailers: []envoyharness.Header{{Name: "x-checksum", Value: "abc"}},
	})
	f := mustForward(t, x)
	if !bytes.Equal(f.Body, body) || len(f.Trailers) != 1 || f.Trailers[0].Value != "abc" {
		t.Errorf("body %d bytes trailers %v", len(f.Body), f.Trailers)
	}
	if !bytes.Equal(r.seen()[0].Body, body) {
		t.Error("router did not see the whole body")
	}
	t.Run("trailers_without_body", func(t *testing.T) {
		x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{
			Method: "POST", Trailers: []envoyharness.Header{{Name: "x-t", Value: "1"}},
		})
		mustForward(t, x)
	})
}

func TestSubsetHintReachesDecider(t *testing.T) {
	r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
	e := startServer(t, r, server.Config{})
	h := e.harness(t, envoyharness.DefaultConfig())
	mustForward(t, mustStart(t, h, &envoyharness.Request{SubsetHint: []string{"10.0.0.1:8000", "10.0.0.2:8000"}}))
	mustForward(t, mustStart(t, h, &envoyharness.Request{SubsetHint: []string{}}))
	calls := r.seen()
	if len(calls[0].SubsetHint) != 2 || calls[0].SubsetHint[1] != "10.0.0.2:8000" {
		t.Errorf("hint %v", calls[0].SubsetHint)
	}
	if calls[1].SubsetHint == nil || len(calls[1].SubsetHint) != 0 {
		t.Errorf("empty hint came through as %#v", calls[1].SubsetHint)
	}
}

func TestInvalidDecisionAnswered500(t *testing.T) {
	cases := map[string]server.Decision{
		"endpoint_not_ip_port": {Endpoint: "pod-a:8000"},
		"bad_fallback":         {Endpoint: "10.0.0.1:8000", Fallbacks: []string{"10.0.0.2"}},
		"bad_prefiller":        {Endpoint: "10.0.0.1:8000", Prefiller: "x"},
		"crlf_debug_header":    {Endpoint: "10.0.0.1:8000", DebugHeader: "1\r\nx-b: 2"},
	}
	for name, d := range cases {
		t.Run(name, func(t *testing.T) {
			tk := newTicket()
			d.Ticket = tk
			e := startServer(t, staticDecider(d), server.Config{})
			x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{Method: "POST", Body: []byte("{}")})
			if x.Local == nil || x.Local.Status != 500 {
				t.Fatalf("local %+v", x.Local)
			}
			e.waitIdle(t)
			if tk.finishes.Load() != 1 || server.Outcome(tk.outcome.Load()) != server.OutcomeStreamError {
				t.Errorf("finishes %d outcome %v", tk.finishes.Load(), server.Outcome(tk.outcome.Load()))
			}
			if e.srv.Stats().InvalidDecisions != 1 {
				t.Error("invalid decision not counted")
			}
		})
	}
}

func TestRouterPanicAnswered500(t *testing.T) {
	r := &fakeDecider{fn: func(context.Context, *server.Request) (*server.Decision, *server.RouteError) { panic("boom") }}
	e := startServer(t, r, server.Config{})
	x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{})
	if x.Local == nil || x.Local.Status != 500 || e.srv.Stats().DeciderPanics != 1 {
		t.Fatalf("local %+v stats %+v", x.Local, e.srv.Stats())
	}
}

func TestTooManyHeadersGets431(t *testing.T) {
	r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
	e := startServer(t, r, server.Config{MaxHeaderCount: 20})
	var hs []envoyharness.Header
	for i := range 20 {
		hs = append(hs, envoyharness.Header{Name: "x-h" + strconv.Itoa(i), Value: "v"})
	}
	x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{Headers: hs})
	if x.Local == nil || x.Local.Status != 431 || len(r.seen()) != 0 {
		t.Fatalf("local %+v", x.Local)
	}
	e2 := startServer(t, r, server.Config{MaxHeaderBytes: 100})
	x = mustStart(t, e2.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{Headers: []envoyharness.Header{{Name: "x-big", Value: string(make([]byte, 200))}}})
	if x.Local == nil || x.Local.Status != 431 {
		t.Fatalf("local %+v", x.Local)
	}
}

func TestOnDecisionHook(t *testing.T) {
	var got []time.Duration
	r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"})
	e := startServer(t, r, server.Config{OnDecision: func(d time.Duration) { got = append(got, d) }})
	h := e.harness(t, envoyharness.DefaultConfig())
	for _, req := range []*envoyharness.Request{{Method: "POST", Body: []byte("{}")}, {}} {
		x := mustStart(t, h, req)
		mustForward(t, x)
		x.Cancel()
	}
	e.waitIdle(t)
	if len(got) != 2 || got[0] <= 0 || got[1] <= 0 {
		t.Errorf("decision durations %v", got)
	}
}

func TestDebugHeaderOnResponse(t *testing.T) {
	r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000", DebugHeader: "prefix=3/4 load=0.2"})
	e := startServer(t, r, server.Config{})
	x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{Headers: []envoyharness.Header{{Name: "x-kvgate-debug", Value: "1"}}})
	mustForward(t, x)
	hs, err := x.RespondHeaders(200, []envoyharness.Header{{Name: "content-type", Value: "text/plain"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := envoyharness.Get(hs, "x-kvgate-debug"); v != "prefix=3/4 load=0.2" {
		t.Errorf("debug header %q in %v", v, hs)
	}
}
