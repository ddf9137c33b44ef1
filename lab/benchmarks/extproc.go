package benchmarks

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc"
	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// ExtprocOptions sizes the decision-overhead benchmark.
type ExtprocOptions struct {
	Phase       time.Duration // per case; default 2s
	Concurrency []int         // default 1, 16, 64
	Workers     int           // fleet size; default 16
	Command     string
}

// Extproc measures what kvgate adds to a request as Envoy sees it: one
// ext_proc stream over loopback gRPC, from the request headers sent until
// the routing headers come back (body streamed in 16 KiB chunks in
// FULL_DUPLEX_STREAMED mode, as Envoy sends it), for chat prompts of about
// 1k, 8k and 32k tokens and a 220 KB prompt, at several concurrencies, for
// each given kvindex. The baseline, measured in the same run, is the same
// gRPC exchange with a router that parses nothing and picks round-robin:
// the protocol's own floor.
func Extproc(ctx context.Context, w io.Writer, indexes map[string]kvindex.Index, opt ExtprocOptions) error {
	if opt.Phase <= 0 {
		opt.Phase = 2 * time.Second
	}
	if len(opt.Concurrency) == 0 {
		opt.Concurrency = []int{1, 16, 64}
	}
	if opt.Workers <= 0 {
		opt.Workers = 16
	}
	cfg, reg, err := decisionFleet(opt.Workers)
	if err != nil {
		return err
	}
	prompts := decisionPrompts()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	type result struct {
		index, prompt string
		conc          int
		lat           latency
		rps           float64
	}
	var results []result
	run := func(router server.Decider, body []byte, conc int) (latency, float64, error) {
		srv, err := server.New(router, server.Config{MaxBodyBytes: cfg.Extproc.MaxBodyBytes, Logger: log})
		if err != nil {
			return latency{}, 0, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return latency{}, 0, err
		}
		gs := grpc.NewServer()
		srv.Register(gs)
		go gs.Serve(ln)
		defer gs.Stop()
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return latency{}, 0, err
		}
		defer conn.Close()
		h, err := envoyharness.New(conn, envoyharness.DefaultConfig())
		if err != nil {
			return latency{}, 0, err
		}
		one := func() (time.Duration, error) {
			// content-length as an HTTP client sends it; Envoy passes it
			// to the processor with the request headers (and only then
			// drops it in FULL_DUPLEX_STREAMED: processor_state.h
			// shouldRemoveContentLength).
			req := &envoyharness.Request{Method: "POST", Path: "/v1/chat/completions", Body: body,
				Headers: []envoyharness.Header{{Name: "content-type", Value: "application/json"}, {Name: "content-length", Value: strconv.Itoa(len(body))}}}
			t := time.Now()
			x, err := h.Start(ctx, req)
			if err != nil {
				return 0, err
			}
			d := time.Since(t)
			if x.Forward == nil {
				return 0, fmt.Errorf("not routed: %+v", x.Local)
			}
			x.Cancel() // the response path is not part of the decision
			<-x.Done()
			return d, nil
		}
		for i := 0; i < 3; i++ { // warm: tokenizer word cache, segment cache, connections
			if _, err := one(); err != nil {
				return latency{}, 0, err
			}
		}
		var mu sync.Mutex
		var all []time.Duration
		var firstErr atomic.Value
		start := time.Now()
		var wg sync.WaitGroup
		for g := 0; g < conc; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []time.Duration
				for time.Since(start) < opt.Phase && ctx.Err() == nil {
					d, err := one()
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					mine = append(mine, d)
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if err, _ := firstErr.Load().(error); err != nil {
			return latency{}, 0, err
		}
		elapsed := time.Since(start)
		slices.Sort(all)
		return latency{p50: all[len(all)/2], p99: all[len(all)*99/100]}, float64(len(all)) / elapsed.Seconds(), nil
	}

	workers, err := cfg.Workers()
	if err != nil {
		return err
	}
	rc := extproc.RouterConfig{Extproc: cfg.Extproc, Workers: workers}
	names := sortedKeys(indexes)
	for _, name := range names {
		idx := indexes[name]
		router, err := extproc.NewRouter(rc, reg, idx, log)
		if err != nil {
			return err
		}
		for _, p := range prompts {
			// The prompt's chain is cached on one worker, so every match
			// walks the whole chain (the expensive case).
			if res, err := reg.Chat(p.body); err == nil {
				if err := idx.Store(ctx, kvfleet.WorkerID{Endpoint: "10.1.0.3:8000"}, kvfleet.TierDevice, kvindex.ChainBlocks(res.Sequence)); err != nil {
					return err
				}
			}
			for _, conc := range opt.Concurrency {
				lat, rps, err := run(router, p.body, conc)
				if err != nil {
					return fmt.Errorf("%s %s c=%d: %w", name, p.name, conc, err)
				}
				results = append(results, result{name, p.name, conc, lat, rps})
			}
		}
	}
	floor := map[string]map[int]latency{}
	for _, p := range prompts {
		floor[p.name] = map[int]latency{}
		for _, conc := range opt.Concurrency {
			lat, _, err := run(&roundRobinDecider{endpoints: []string{"10.1.0.1:8000", "10.1.0.2:8000"}}, p.body, conc)
			if err != nil {
				return err
			}
			floor[p.name][conc] = lat
		}
	}

	fmt.Fprintf(w, "## Decision overhead through ext_proc (issue: the ext_proc endpoint picker)\n\n")
	fmt.Fprintf(w, "Command: `%s`. One ext_proc gRPC stream per request over loopback, driven by `lab/envoyharness` as Envoy would (FULL_DUPLEX_STREAMED, 16 KiB body chunks); latency = request headers sent → routing headers received; %d workers, block size 16, Qwen3 tokenizer; the prompt's chain is cached on one worker. Baseline (same run): the same exchange with a router that parses nothing (round-robin) — the protocol floor. Client and server share the 2 cores.\n\n", opt.Command, opt.Workers)
	fmt.Fprintf(w, "| index | prompt | concurrency | p50 | p99 | decisions/s | floor p50 | floor p99 | kvgate/floor p50 |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		f := floor[r.prompt][r.conc]
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %.0f | %s | %s | %.1f× |\n", r.index, r.prompt, r.conc, dur(r.lat.p50), dur(r.lat.p99), r.rps, dur(f.p50), dur(f.p99), float64(r.lat.p50)/float64(f.p50))
	}
	return nil
}

// roundRobinDecider is the baseline: routes without reading the body.
type roundRobinDecider struct {
	endpoints []string
	n         atomic.Uint64
}

func (r *roundRobinDecider) Decide(context.Context, *server.Request) (*server.Decision, *server.RouteError) {
	i := r.n.Add(1)
	return &server.Decision{Endpoint: r.endpoints[i%uint64(len(r.endpoints))]}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// decisionFleet is the decision bench's configuration: workers engines
// serving qwen3 (block size 16) with an 8 MiB body limit, and its
// preprocessors. Extproc and the go test benchmarks (decisionRig) share it
// so that their figures describe the same request path.
func decisionFleet(workers int) (config.Config, *preprocess.Registry, error) {
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		return config.Config{}, nil, err
	}
	cfg := config.Default()
	cfg.Extproc.MaxBodyBytes = 8 << 20
	cfg.Models = []config.Model{{Name: "qwen3", BlockSize: 16, Tokenizer: dir}}
	for i := 0; i < workers; i++ {
		cfg.Engines = append(cfg.Engines, config.Engine{Endpoint: fmt.Sprintf("10.1.0.%d:8000", i+1), Model: "qwen3", DPRanks: 1, Role: "both", Events: "tcp://127.0.0.1:1"})
	}
	reg, err := preprocess.New(cfg.Models, preprocess.Options{Limits: openai.Limits{MaxBodyBytes: cfg.Extproc.MaxBodyBytes}})
	if err != nil {
		return config.Config{}, nil, err
	}
	return cfg, reg, nil
}

// decisionPrompt is one of the decision bench's chat bodies: name labels
// the table's rows, short the go test sub-benchmarks ("" where a prompt
// is only in the table).
type decisionPrompt struct {
	name, short string
	body        []byte
}

// decisionPrompts draws the bench's prompts from one fixed seed, so every
// run and both benches see the same bodies.
func decisionPrompts() []decisionPrompt {
	rnd := rand.New(rand.NewPCG(3, 5))
	var prompts []decisionPrompt
	for _, c := range []struct {
		name, short  string
		msgs, tokens int
	}{{"~1k tokens", "1k", 4, 1000}, {"~8k tokens", "8k", 16, 8000}, {"~32k tokens", "32k", 40, 32000}, {"220 KB", "", 1, 0}} {
		var msgs []string
		if c.tokens == 0 {
			msgs = []string{text(rnd, 220<<10)}
		} else {
			for i := 0; i < c.msgs; i++ {
				msgs = append(msgs, text(rnd, c.tokens*4/c.msgs))
			}
		}
		prompts = append(prompts, decisionPrompt{c.name, c.short, chatBody("qwen3", msgs)})
	}
	return prompts
}
