package profiler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/planner-sidecar/perfmodel"
)

const speedUp = 20

func startEngine(t *testing.T) string {
	t.Helper()
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatalf("test model files: %v", err)
	}
	s, err := enginesim.NewServer(enginesim.ServerConfig{
		Model: "Qwen/Qwen3-0.6B", TokenizerDir: dir,
		Engine: enginesim.Config{BlockSize: 16, NumGPUBlocks: 8192, SpeedUp: speedUp},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, 2*time.Second) }()
	t.Cleanup(func() { cancel(); <-done; s.Close() })
	return "http://" + ln.Addr().String()
}

// The engine simulator's step-time model bounds what any honest
// measurement can find: a request's TTFT is at least the prefill step of
// its own prompt, a batch of T prompt tokens needs PrefillMs(T), and a
// decode step takes at least DecodeMs(0) — all divided by the speed-up.
// Measurements can only be slower (HTTP, scheduling), never faster.
func TestProfileSimulatedEngine(t *testing.T) {
	url := startEngine(t)
	var progress strings.Builder
	p, err := Run(context.Background(), Options{
		Engine: url, InputLengths: []int{128, 1024}, Concurrency: []int{1, 4},
		ContextLengths: []int{256}, Batches: []int{1, 4}, Requests: 8, OutputTokens: 12, Seed: 7,
		Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Model != "Qwen/Qwen3-0.6B" || len(p.Prefill) != 4 || len(p.Decode) != 2 {
		t.Fatalf("%+v", p)
	}
	var bestRate float64 // max over T of T / PrefillMs(T), tokens per ms
	for T := 1; T <= 1<<16; T++ {
		bestRate = max(bestRate, float64(T)/enginesim.PrefillMs(T))
	}
	for _, q := range p.Prefill {
		if floor := enginesim.PrefillMs(q.InputTokens) / speedUp / 1e3; q.TTFTSeconds < floor {
			t.Errorf("prefill %+v: TTFT under the model's floor %v s", q, floor)
		}
		if ceil := bestRate * 1e3 * speedUp; q.TokensPerSecond > ceil {
			t.Errorf("prefill %+v: throughput over the model's ceiling %v", q, ceil)
		}
	}
	for _, q := range p.Decode {
		if q.ITLSeconds <= 0 || q.TokensPerSecond <= 0 {
			t.Errorf("decode %+v", q)
		}
	}
	// Every decode request generates exactly the tokens asked for, one
	// chunk each (ignore_eos), which is what the throughput counts.
	c := &client{base: url, model: p.Model, http: &http.Client{Timeout: time.Minute}, rng: rand.New(rand.NewPCG(1, 2))}
	streams, err := c.decodeStreams(context.Background(), 64, 3, 9)
	if err != nil || len(streams) != 3 {
		t.Fatalf("%d streams, %v", len(streams), err)
	}
	for _, s := range streams {
		if len(s) != 9 {
			t.Errorf("stream of %d tokens, want 9", len(s))
		}
	}
	t.Log("\n" + progress.String())
	if !strings.Contains(progress.String(), "prefill input   1024 concurrency    4") {
		t.Errorf("progress: %s", progress.String())
	}
	// The profile is usable as a model.
	if _, err := perfmodel.New(p); err != nil {
		t.Fatal(err)
	}
}

func TestOptionsAreBounded(t *testing.T) {
	for _, o := range []Options{
		{Engine: "localhost:8000"},
		{Engine: "http://x", Concurrency: []int{0}},
		{Engine: "http://x", OutputTokens: 1},
		{Engine: "http://x", InputLengths: make([]int, 40)},
	} {
		if _, err := Run(context.Background(), o); !errors.As(err, new(*OptionsError)) || !strings.Contains(err.Error(), "profile: ") {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

func TestDecodeStatsByHand(t *testing.T) {
	at := func(ms ...float64) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, time.Unix(0, 0).Add(time.Duration(m*float64(time.Millisecond))))
		}
		return out
	}
	// Two requests: mean gaps 10 ms (0→30 in 3) and 20 ms (5→45 in 2).
	// Tokens after the first: 3 + 2 = 5 over 0→45 ms = 111.1/s. p90 of
	// {10, 20} ms by nearest rank: 20 ms. A one-token stream is ignored.
	pt, err := decodeStats([][]time.Time{at(0, 10, 20, 30), at(5, 25, 45), at(7)})
	if err != nil {
		t.Fatal(err)
	}
	if pt.ITLSeconds != 0.02 || pt.TokensPerSecond < 111.11 || pt.TokensPerSecond > 111.12 {
		t.Fatalf("%+v", pt)
	}
	// A burst (every token at once) cannot be measured: an error, not 0 or Inf.
	if _, err := decodeStats([][]time.Time{at(3, 3, 3)}); err == nil {
		t.Fatal("burst accepted")
	}
	if _, err := decodeStats([][]time.Time{at(3)}); err == nil {
		t.Fatal("single tokens accepted")
	}
	if got := p90([]float64{5, 1, 4, 2, 3, 9, 8, 7, 6, 10}); got != 9 {
		t.Fatalf("p90 = %v, want 9 (nearest rank 9 of 10)", got)
	}
}
