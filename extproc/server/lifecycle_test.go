package server_test

import (
	"context"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

func ticketDecider(tickets chan *ticket) *fakeDecider {
	return &fakeDecider{fn: func(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
		tk := newTicket()
		tickets <- tk
		return &server.Decision{Endpoint: "10.0.0.1:8000", Ticket: tk}, nil
	}}
}

// TestCancelBeforeRoutingFinishesNothing: a request abandoned before its
// body is complete is never routed, so no ticket exists to finish.
func TestCancelBeforeRoutingFinishesNothing(t *testing.T) {
	for _, point := range []envoyharness.CancelPoint{envoyharness.CancelAfterHeaders, envoyharness.CancelMidBody} {
		tickets := make(chan *ticket, 4)
		r := ticketDecider(tickets)
		e := startServer(t, r, server.Config{})
		x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{
			Method: "POST", Body: make([]byte, 8000), ChunkSize: 1000, Cancel: point,
		})
		if x.Local == nil || x.Local.Cause != "client_cancel" {
			t.Fatalf("point %d: %+v", point, x.Local)
		}
		e.waitIdle(t)
		if n := len(r.seen()); n != 0 {
			t.Errorf("point %d: router called %d times", point, n)
		}
	}
}

// TestFinishExactlyOnceAtEveryPhase counts Lifecycle calls for a request
// abandoned or completed at each phase after routing.
func TestFinishExactlyOnceAtEveryPhase(t *testing.T) {
	type phase struct {
		name       string
		run        func(t *testing.T, x *envoyharness.Exchange)
		outcome    server.Outcome
		firstBytes int32
	}
	respond := func(t *testing.T, x *envoyharness.Exchange, code int) {
		t.Helper()
		if _, err := x.RespondHeaders(code, nil, false); err != nil {
			t.Fatal(err)
		}
	}
	drainTo := func(t *testing.T, x *envoyharness.Exchange, wantEnd bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		for {
			_, end, err := x.Downstream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if end || !wantEnd {
				return
			}
		}
	}
	phases := []phase{
		{"cancel_after_routing", func(t *testing.T, x *envoyharness.Exchange) { x.Cancel() }, server.OutcomeClientCancel, 0},
		{"cancel_after_response_headers", func(t *testing.T, x *envoyharness.Exchange) {
			respond(t, x, 200)
			x.Cancel()
		}, server.OutcomeClientCancel, 0},
		{"cancel_after_first_byte", func(t *testing.T, x *envoyharness.Exchange) {
			respond(t, x, 200)
			if err := x.RespondBody([]byte("data: {}\n\n"), false); err != nil {
				t.Fatal(err)
			}
			drainTo(t, x, false) // the server has seen the chunk once it echoes it
			x.Cancel()
		}, server.OutcomeClientCancel, 1},
		{"cancel_after_end", func(t *testing.T, x *envoyharness.Exchange) {
			respond(t, x, 200)
			_ = x.RespondBody([]byte("data: {}\n\n"), false)
			_ = x.RespondBody([]byte("data: [DONE]\n\n"), true)
			drainTo(t, x, true)
			x.Cancel()
		}, server.OutcomeOK, 1},
		{"close_after_end", func(t *testing.T, x *envoyharness.Exchange) {
			respond(t, x, 200)
			_ = x.RespondBody([]byte("ok"), true)
			drainTo(t, x, true)
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			if err := x.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}, server.OutcomeOK, 1},
		{"headers_only_response", func(t *testing.T, x *envoyharness.Exchange) {
			if _, err := x.RespondHeaders(204, nil, true); err != nil {
				t.Fatal(err)
			}
			x.Cancel()
		}, server.OutcomeOK, 1},
		{"upstream_503", func(t *testing.T, x *envoyharness.Exchange) {
			respond(t, x, 503)
			_ = x.RespondBody([]byte("no"), true)
			drainTo(t, x, true)
			x.Cancel()
		}, server.OutcomeUpstreamError, 1},
		{"upstream_504", func(t *testing.T, x *envoyharness.Exchange) {
			respond(t, x, 504)
			_ = x.RespondBody(nil, true)
			drainTo(t, x, true)
			x.Cancel()
		}, server.OutcomeTimeout, 1},
		{"response_trailers_end", func(t *testing.T, x *envoyharness.Exchange) {
			respond(t, x, 200)
			_ = x.RespondBody([]byte("x"), false)
			if _, err := x.RespondTrailers([]envoyharness.Header{{Name: "grpc-status", Value: "0"}}); err != nil {
				t.Fatal(err)
			}
			x.Cancel()
		}, server.OutcomeOK, 1},
	}
	for _, m := range modes() {
		for _, p := range phases {
			if m.name == "buffered" && p.name == "response_trailers_end" {
				continue // the buffered config skips response trailers
			}
			t.Run(m.name+"/"+p.name, func(t *testing.T) {
				tickets := make(chan *ticket, 4)
				e := startServer(t, ticketDecider(tickets), server.Config{})
				x := mustStart(t, e.harness(t, m.cfg), &envoyharness.Request{Method: "POST", Body: []byte(`{"prompt":"x"}`)})
				mustForward(t, x)
				tk := <-tickets
				p.run(t, x)
				tk.wait(t)
				e.waitIdle(t)
				if n := tk.finishes.Load(); n != 1 {
					t.Errorf("Finish called %d times", n)
				}
				if o := server.Outcome(tk.outcome.Load()); o != p.outcome {
					t.Errorf("outcome %v, want %v", o, p.outcome)
				}
				if n := tk.firstBytes.Load(); n != p.firstBytes {
					t.Errorf("FirstByte called %d times, want %d", n, p.firstBytes)
				}
			})
		}
	}
}

// TestCancelDuringRouting: the client leaves while Route runs; the ticket
// Route returns is still finished once, as a client cancel.
func TestCancelDuringRouting(t *testing.T) {
	entered := make(chan struct{})
	tk := newTicket()
	r := &fakeDecider{fn: func(ctx context.Context, _ *server.Request) (*server.Decision, *server.RouteError) {
		close(entered)
		<-ctx.Done()
		return &server.Decision{Endpoint: "10.0.0.1:8000", Ticket: tk}, nil
	}}
	e := startServer(t, r, server.Config{})
	h := e.harness(t, envoyharness.DefaultConfig())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *envoyharness.Exchange)
	go func() {
		x, _ := h.Start(ctx, &envoyharness.Request{Method: "POST", Body: []byte("{}")})
		done <- x
	}()
	<-entered
	cancel()
	x := <-done
	if x == nil || x.Local == nil || x.Local.Cause != "client_cancel" {
		t.Fatalf("exchange %+v", x)
	}
	tk.wait(t)
	e.waitIdle(t)
	if tk.finishes.Load() != 1 || server.Outcome(tk.outcome.Load()) != server.OutcomeClientCancel {
		t.Errorf("finishes %d outcome %v", tk.finishes.Load(), server.Outcome(tk.outcome.Load()))
	}
}

func TestServedEndpointReported(t *testing.T) {
	tk0 := newTicket()
	tickets := make(chan *ticket, 1)
	tickets <- tk0
	e := startServer(t, &fakeDecider{fn: func(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
		return &server.Decision{Endpoint: "10.0.0.1:8000", Fallbacks: []string{"10.0.0.2:8000"}, Ticket: tk0}, nil
	}}, server.Config{})
	x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{})
	f := mustForward(t, x)
	tk := <-tickets
	// The primary failed: Envoy's retry makes override_host choose the
	// next listed host, and selected_host_key reports it.
	if host, err := f.NextUpstream(); err != nil || host != "10.0.0.2:8000" {
		t.Fatalf("retry chose %q %v", host, err)
	}
	if _, err := x.RespondHeaders(200, nil, true); err != nil {
		t.Fatal(err)
	}
	tk.wait(t)
	if v, _ := tk.served.Load().(string); v != "10.0.0.2:8000" {
		t.Errorf("served %q", v)
	}
}

// ORIGINAL_DST reports no served host; the ticket never hears one.
func TestServedEndpointNotInventedForOriginalDst(t *testing.T) {
	tickets := make(chan *ticket, 1)
	e := startServer(t, ticketDecider(tickets), server.Config{SingleDestination: true})
	x := mustStart(t, e.harness(t, envoyharness.MustShipped("envoy-original-dst.yaml")), &envoyharness.Request{})
	f := mustForward(t, x)
	tk := <-tickets
	if f.Upstream != "10.0.0.1:8000" {
		t.Fatalf("upstream %q", f.Upstream)
	}
	if v, _ := envoyharness.Get(f.Headers, "x-gateway-destination-endpoint"); v != "10.0.0.1:8000" {
		t.Errorf("destination %q: SingleDestination must send the primary alone", v)
	}
	if _, err := x.RespondHeaders(200, nil, true); err != nil {
		t.Fatal(err)
	}
	tk.wait(t)
	if v := tk.served.Load(); v != nil {
		t.Errorf("served %v reported without selected_host_key", v)
	}
}

// TestResponseBodyModeNone: without response body messages the response
// headers are the first byte and the stream's end is the response's: Envoy
// closes the stream itself right after the response headers reply
// (ext_proc.cc closeGrpcStreamIfLastRespReceived), with a half-close and a
// reset (client_impl.cc close), so either is the end of a response that
// has started, never a client cancel.
func TestResponseBodyModeNone(t *testing.T) {
	cfg := bufferedConfig()
	cfg.ResponseBodyMode = filterv3.ProcessingMode_NONE
	for _, closeCleanly := range []bool{true, false} {
		tickets := make(chan *ticket, 1)
		e := startServer(t, ticketDecider(tickets), server.Config{})
		x := mustStart(t, e.harness(t, cfg), &envoyharness.Request{Method: "POST", Body: []byte("{}")})
		mustForward(t, x)
		tk := <-tickets
		if _, err := x.RespondHeaders(200, nil, false); err != nil {
			t.Fatal(err)
		}
		want := server.OutcomeOK
		if closeCleanly {
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			if err := x.Close(ctx); err != nil {
				t.Fatal(err)
			}
			cancel()
		} else {
			x.Cancel()
		}
		tk.wait(t)
		e.waitIdle(t)
		if tk.finishes.Load() != 1 || tk.firstBytes.Load() != 1 || server.Outcome(tk.outcome.Load()) != want {
			t.Errorf("clean=%v: finishes %d firstBytes %d outcome %v", closeCleanly, tk.finishes.Load(), tk.firstBytes.Load(), server.Outcome(tk.outcome.Load()))
		}
	}
}
