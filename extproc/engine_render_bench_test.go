package extproc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// BenchmarkEngineModeDecision measures what engine-side rendering adds to
// a routing decision (issue 29): Router.Decide for qwen3 chat requests of
// about 1k and 8k tokens, with the model in local mode and in engine mode,
// rendered by an enginesim over loopback HTTP (kvgate's own renderer
// behind vLLM's /tokenize shape, so the difference is the call: HTTP,
// JSON both ways, the engine's render). Every request is distinct (no
// render-cache hit) except in engine-cached, where one request repeats
// (every decision after the first is a cache hit). Reports the decision's p50 and p99 in microseconds; the
// ratio engine/local at each is the added latency. BENCHMARKS.md, "Issue
// 29 — engine-side rendering", has a run.
func BenchmarkEngineModeDecision(b *testing.B) {
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		b.Fatal(err)
	}
	engine := startBenchEngine(b, dir)
	for _, size := range []struct {
		name string
		reps int
	}{{"1k", 12}, {"8k", 100}} {
		text := strings.Repeat("Review the attached design for the payments ledger and list the risks you see. ", size.reps)
		for _, mode := range []string{"local", "engine", "engine-cached"} {
			b.Run(size.name+"/"+mode, func(b *testing.B) {
				r := benchRouter(b, dir, engine, mode != "local")
				// Warm both sides (template, segment caches, connections)
				// on requests outside the measured ones.
				for i := range 50 {
					d, rerr := r.Decide(context.Background(), &server.Request{Method: "POST", Path: "/v1/chat/completions", Headers: map[string]string{},
						Body: chatBody("qwen3", fmt.Sprintf("Warm-up %d. %s", i, text))})
					if rerr != nil {
						b.Fatalf("decide: %d %s", rerr.Status, rerr.Body)
					}
					d.Ticket.Finish(server.OutcomeOK)
				}
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := range b.N {
					n := i
					if mode == "engine-cached" {
						n = 0 // one request, answered from the render cache after its first call
					}
					req := &server.Request{Method: "POST", Path: "/v1/chat/completions", Headers: map[string]string{},
						Body: chatBody("qwen3", fmt.Sprintf("Ticket %d. %s", n, text))}
					start := time.Now()
					d, rerr := r.Decide(context.Background(), req)
					lat = append(lat, time.Since(start))
					if rerr != nil {
						b.Fatalf("decide: %d %s", rerr.Status, rerr.Body)
					}
					if d.Ticket != nil {
						d.Ticket.Finish(server.OutcomeOK)
					}
				}
				b.StopTimer()
				if mode != "local" {
					if st := r.reg.EngineRenderStats(); st.Fallbacks != [len(preprocess.EngineReasons)]uint64{} {
						b.Fatalf("engine fell back: %+v", st)
					}
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}

// startBenchEngine serves an in-process enginesim for qwen3 on loopback.
func startBenchEngine(b *testing.B, dir string) string {
	s, err := enginesim.NewServer(enginesim.ServerConfig{Model: "qwen3", TokenizerDir: dir,
		Engine: enginesim.Config{BlockSize: 16, NumGPUBlocks: 4096, SpeedUp: 200}, Seed: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, time.Second) }()
	b.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// benchRouter is the request path for one qwen3 pool of four workers, the
// first of them the engine at engine (the only one that renders).
func benchRouter(b *testing.B, dir, engine string, engineMode bool) *Router {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: "qwen3", BlockSize: 16, Tokenizer: dir}}
	if engineMode {
		cfg.Models[0].Preprocess.Mode = preprocess.ModeEngine
	}
	cfg.Engines = append(cfg.Engines, config.Engine{Endpoint: engine, Model: "qwen3", DPRanks: 1, Role: "both", Events: "tcp://127.0.0.1:1"})
	for _, w := range workers {
		cfg.Engines = append(cfg.Engines, config.Engine{Endpoint: w, Model: "qwen3", DPRanks: 1, Role: "both", Events: "tcp://127.0.0.1:1", Kind: "sglang"})
	}
	cfg.Extproc.FlowControl.Disabled = true
	// What is measured is the call's latency, not the fallback: on a
	// shared machine one 8k render can pass the 200ms default.
	cfg.Extproc.Preprocess.Engine.Timeout = yamlconf.Duration(5 * time.Second)
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	reg, err := preprocess.New(cfg.Models, preprocess.OptionsFor(cfg.Extproc.Preprocess, cfg.Extproc.MaxBodyBytes, ""))
	if err != nil {
		b.Fatal(err)
	}
	r, err := NewRouter(routerConfig(b, cfg), reg, kvindex.NewMemory(kvindex.MemoryConfig{}), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	return r
}
