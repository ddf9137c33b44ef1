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
	"strings"
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
	Phase       time.Duration // per case and router, split over Rounds; default 2s
	Rounds      int           // interleaved rounds per case; default 5
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
//
// The floor and the routers take turns: each case (prompt, concurrency)
// runs Rounds rounds, and in each round every router (the floor
// included) serves for Phase/Rounds, in an order that rotates between
// rounds. A case's figures pool its rounds. Measured one after another,
// minutes apart, the floor of one binary moved between 116 and 508 µs
// across quiet runs (BENCHMARKS.md "Issue 27: where each aim stands"), so
// a ratio of two phases minutes apart measured the machine's drift as
// much as kvgate; taking turns puts the drift on both sides of the ratio.
// Each ratio cell also gives the range of the rounds' own ratios.
func Extproc(ctx context.Context, w io.Writer, indexes map[string]kvindex.Index, opt ExtprocOptions) error {
	if opt.Phase <= 0 {
		opt.Phase = 2 * time.Second
	}
	if opt.Rounds <= 0 {
		opt.Rounds = 5
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
	workers, err := cfg.Workers()
	if err != nil {
		return err
	}
	rc := extproc.RouterConfig{Extproc: cfg.Extproc, Workers: workers}

	// One server per router, the floor first, each kept for the whole run.
	arms := []*extprocArm{}
	defer func() {
		for _, a := range arms {
			a.close()
		}
	}()
	floor, err := newExtprocArm("floor", &roundRobinDecider{endpoints: []string{"10.1.0.1:8000", "10.1.0.2:8000"}}, cfg.Extproc.MaxBodyBytes, log)
	if err != nil {
		return err
	}
	arms = append(arms, floor)
	for _, name := range sortedKeys(indexes) {
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
		}
		a, err := newExtprocArm(name, router, cfg.Extproc.MaxBodyBytes, log)
		if err != nil {
			return err
		}
		arms = append(arms, a)
	}

	type result struct {
		index, prompt string
		conc          int
		lat, floor    latency
		rps           float64
		ratios        []float64 // each round's p50 ÷ the floor's
	}
	var results []result
	slice := max(opt.Phase/time.Duration(opt.Rounds), time.Millisecond)
	for _, p := range prompts {
		for _, conc := range opt.Concurrency {
			for _, a := range arms {
				if err := a.warm(ctx, p.body); err != nil {
					return fmt.Errorf("%s %s: %w", a.name, p.name, err)
				}
			}
			samples := make([][]time.Duration, len(arms))
			elapsed := make([]time.Duration, len(arms))
			p50s := make([][]time.Duration, len(arms))
			for r := range opt.Rounds {
				for k := range arms {
					i := (k + r) % len(arms)
					ds, took, err := arms[i].serve(ctx, p.body, conc, slice)
					if err != nil {
						return fmt.Errorf("%s %s c=%d: %w", arms[i].name, p.name, conc, err)
					}
					samples[i] = append(samples[i], ds...)
					elapsed[i] += took
					slices.Sort(ds)
					p50s[i] = append(p50s[i], ds[len(ds)/2])
				}
			}
			fl := percentiles(samples[0])
			for i := 1; i < len(arms); i++ {
				res := result{index: arms[i].name, prompt: p.name, conc: conc, lat: percentiles(samples[i]), floor: fl,
					rps: float64(len(samples[i])) / elapsed[i].Seconds()}
				for r := range opt.Rounds {
					res.ratios = append(res.ratios, float64(p50s[i][r])/float64(p50s[0][r]))
				}
				results = append(results, res)
			}
		}
	}
	slices.SortStableFunc(results, func(a, b result) int { return strings.Compare(a.index, b.index) })

	fmt.Fprintf(w, "## Decision overhead through ext_proc (issue: the ext_proc endpoint picker)\n\n")
	fmt.Fprintf(w, "Command: `%s`. One ext_proc gRPC stream per request over loopback, driven by `lab/envoyharness` as Envoy would (FULL_DUPLEX_STREAMED, 16 KiB body chunks); latency = request headers sent → routing headers received; %d workers, block size 16, Qwen3 tokenizer; the prompt's chain is cached on one worker. Baseline (same run): the same exchange with a router that parses nothing (round-robin) — the protocol floor. The floor and each index take turns: %d rounds per row, each serving %s per round in a rotating order, samples pooled; the last column's range is the rounds' own p50 ratios. Client and server share the 2 cores.\n\n", opt.Command, opt.Workers, opt.Rounds, slice)
	fmt.Fprintf(w, "| index | prompt | concurrency | p50 | p99 | decisions/s | floor p50 | floor p99 | kvgate/floor p50 (rounds) |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		lo, hi := slices.Min(r.ratios), slices.Max(r.ratios)
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %.0f | %s | %s | %.1f× (%.1f–%.1f) |\n", r.index, r.prompt, r.conc, dur(r.lat.p50), dur(r.lat.p99), r.rps, dur(r.floor.p50), dur(r.floor.p99), float64(r.lat.p50)/float64(r.floor.p50), lo, hi)
	}
	return nil
}

// percentiles returns ds's p50 and p99 (ds is sorted in place).
func percentiles(ds []time.Duration) latency {
	slices.Sort(ds)
	return latency{p50: ds[len(ds)/2], p99: ds[len(ds)*99/100]}
}

// extprocArm is one router behind its own loopback gRPC server, driven by
// the Envoy harness.
type extprocArm struct {
	name  string
	h     *envoyharness.Harness
	close func()
}

func newExtprocArm(name string, router server.Decider, maxBody int, log *slog.Logger) (*extprocArm, error) {
	srv, err := server.New(router, server.Config{MaxBodyBytes: maxBody, Logger: log})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	go gs.Serve(ln)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		gs.Stop()
		return nil, err
	}
	h, err := envoyharness.New(conn, envoyharness.DefaultConfig())
	if err != nil {
		conn.Close()
		gs.Stop()
		return nil, err
	}
	return &extprocArm{name: name, h: h, close: func() { conn.Close(); gs.Stop() }}, nil
}

// one sends body as one request and returns the time until its routing
// headers came back.
func (a *extprocArm) one(ctx context.Context, body []byte) (time.Duration, error) {
	// content-length as an HTTP client sends it; Envoy passes it to the
	// processor with the request headers (and only then drops it in
	// FULL_DUPLEX_STREAMED: processor_state.h shouldRemoveContentLength).
	req := &envoyharness.Request{Method: "POST", Path: "/v1/chat/completions", Body: body,
		Headers: []envoyharness.Header{{Name: "content-type", Value: "application/json"}, {Name: "content-length", Value: strconv.Itoa(len(body))}}}
	t := time.Now()
	x, err := a.h.Start(ctx, req)
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

// warm sends body a few times: the tokenizer's word cache, the segment
// cache, the connection.
func (a *extprocArm) warm(ctx context.Context, body []byte) error {
	for range 3 {
		if _, err := a.one(ctx, body); err != nil {
			return err
		}
	}
	return nil
}

// serve sends body from conc clients for phase and returns every
// request's latency and the time it took.
func (a *extprocArm) serve(ctx context.Context, body []byte, conc int, phase time.Duration) ([]time.Duration, time.Duration, error) {
	var mu sync.Mutex
	var all []time.Duration
	var firstErr atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			var mine []time.Duration
			// At least one request each, however late the goroutine
			// starts on a loaded machine.
			for len(mine) == 0 || time.Since(start) < phase && ctx.Err() == nil {
				d, err := a.one(ctx, body)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				mine = append(mine, d)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, 0, err
	}
	return all, time.Since(start), nil
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
