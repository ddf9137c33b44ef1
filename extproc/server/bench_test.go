package server_test

import (
	"context"
	"testing"

	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

// BenchmarkRoutedRequest is the protocol overhead floor: one full-duplex
// request (1 KiB body) routed by a trivial router, its response headers and
// one body chunk, over a real gRPC stream on loopback.
func BenchmarkRoutedRequest(b *testing.B) {
	r := staticDecider(server.Decision{Endpoint: "10.0.0.1:8000", Fallbacks: []string{"10.0.0.2:8000"}})
	e := startServer(b, r, server.Config{})
	h := e.harness(b, envoyharness.DefaultConfig())
	body := make([]byte, 1024)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		x, err := h.Start(ctx, &envoyharness.Request{Method: "POST", Path: "/v1/completions", Body: body})
		if err != nil || x.Forward == nil {
			b.Fatalf("start: %v %+v", err, x.Local)
		}
		if _, err := x.RespondHeaders(200, nil, false); err != nil {
			b.Fatal(err)
		}
		if err := x.RespondBody([]byte("data: [DONE]\n\n"), true); err != nil {
			b.Fatal(err)
		}
		for {
			_, end, err := x.Downstream(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if end {
				break
			}
		}
		if err := x.Close(ctx); err != nil {
			b.Fatal(err)
		}
		r.mu.Lock()
		r.calls = r.calls[:0]
		r.mu.Unlock()
	}
}
