package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/e2e/enginesim"
	"github.com/kvgate/kvgate/e2e/replay"
	"github.com/kvgate/kvgate/extproc"
	"github.com/kvgate/kvgate/extproc/envoyharness"
	"github.com/kvgate/kvgate/extproc/modelfiles"
)

func init() {
	register("demo", command{
		summary: "local gateway demo on embedded defaults: simulated vLLM engines, kvgate extproc, a gateway on localhost:8080, a trace replay",
		run:     runGatewayDemo,
	})
}

type gatewayDemoOptions struct {
	engines   int
	listen    string
	trace     string
	requests  int
	duration  time.Duration
	speedup   float64
	exitAfter bool
}

func runGatewayDemo(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := gatewayDemoOptions{}
	fs.IntVar(&o.engines, "engines", 4, "simulated engines (1..16)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "gateway address (falls back to a free port when taken)")
	fs.StringVar(&o.trace, "trace", "", "Mooncake-format trace to replay (default: ../shared's conversation trace, else the slice in e2e/replay/testdata)")
	fs.IntVar(&o.requests, "requests", 120, "requests of the trace to replay (0..100000)")
	fs.DurationVar(&o.duration, "replay-duration", 20*time.Second, "compress the slice's arrivals into about this long")
	fs.Float64Var(&o.speedup, "speedup", 10, "engine speed-up over the simulated GPU timing model")
	fs.BoolVar(&o.exitAfter, "exit", false, "exit after the summary instead of serving until Ctrl-C")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.engines < 1 || o.engines > 16 || o.requests < 0 || o.requests > 100000 || o.speedup <= 0 {
		fmt.Fprintln(stderr, "kvgate demo: --engines 1..16, --requests 0..100000, --speedup > 0")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := gatewayDemo(ctx, stdout, o); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "kvgate demo: %v\n", err)
		return 1
	}
	return 0
}

const demoModel = "qwen3"

// gatewayDemo wires the whole system in one process, as it runs in a mesh:
// simulated vLLM engines (HTTP + ZMQ KV events) ← gateway (the Envoy
// harness, playing Envoy) ↔ kvgate extproc (gRPC ext_proc, in-memory index
// fed by the engines' events).
func gatewayDemo(ctx context.Context, out io.Writer, o gatewayDemoOptions) error {
	tokDir, err := modelfiles.Model(demoModel)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Components without a logger option log through the default; keep the
	// demo's output to what it prints itself.
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(quiet)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	cfg := config.Default()
	cfg.Models = []config.Model{{Name: demoModel, BlockSize: 64, Tokenizer: tokDir}}
	cfg.Extproc.Listen, cfg.Extproc.Admin = "127.0.0.1:0", "127.0.0.1:0"
	// The demo shows, and its replay reads, each decision in x-kvgate-debug;
	// everything listens on loopback. Production leaves it off.
	cfg.Extproc.DebugHeader.AllowAnyClient = true
	engines := make([]*enginesim.Server, o.engines)
	for i := range engines {
		s, err := enginesim.NewServer(enginesim.ServerConfig{
			Model: demoModel, TokenizerDir: tokDir, Seed: uint64(i + 1), Logger: quiet,
			Engine: enginesim.Config{BlockSize: 64, NumGPUBlocks: 2048, SpeedUp: o.speedup},
			Events: enginesim.EventsConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"},
		})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		engines[i] = s
		wg.Add(1)
		go func() { defer wg.Done(); s.Serve(runCtx, ln, time.Second) }()
		cfg.Engines = append(cfg.Engines, config.Engine{Endpoint: ln.Addr().String(), Model: demoModel, DPRanks: 1, Role: "both",
			Events: s.EventsAddr(), Replay: s.ReplayAddr()})
	}
	if err := cfg.Validate(); err != nil {
		return err
	}

	type addrs struct{ grpc, admin net.Addr }
	ready := make(chan addrs, 1)
	routerc := make(chan *extproc.Router, 1)
	extErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		extErr <- serveExtproc(runCtx, cfg, extprocOptions{drain: time.Second, log: quiet,
			listening:   func(g, a net.Addr) { ready <- addrs{g, a} },
			routerReady: func(r *extproc.Router) { routerc <- r },
		})
	}()
	var a addrs
	select {
	case a = <-ready:
	case err := <-extErr:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
	router := <-routerc
	gw, err := demoProxy(cfg, a.grpc.String(), quiet)
	if err != nil {
		return err
	}
	defer gw.Close()
	gln, err := net.Listen("tcp", o.listen)
	if err != nil {
		if gln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
	}
	gws := newHTTPServer(gw)
	go gws.Serve(gln)
	defer gws.Close()
	base := "http://" + gln.Addr().String()

	fmt.Fprintf(out, "kvgate demo: %d simulated vLLM engines (%s, KV events over ZMQ), kvgate extproc on %s (in-memory index),\n", o.engines, demoModel, a.grpc)
	fmt.Fprintf(out, "and a gateway playing Envoy's side of ext_proc on %s. Metrics and recent decisions: http://%s/metrics, http://%s/debug/decisions\n\n", base, a.admin, a.admin)
	fmt.Fprintf(out, "Try it:\n  curl -s %s/v1/chat/completions -H 'content-type: application/json' -H 'x-kvgate-debug: 1' -D - \\\n    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],\"max_tokens\":16}'\n\n", base, demoModel)
	fmt.Fprint(out, plannerDemoHint(cfg.Engines, a.admin.String()))

	if o.requests > 0 {
		if err := replaySlice(ctx, out, base, o, engines); err != nil {
			return err
		}
		st := router.Load().Stats()
		fmt.Fprintf(out, "kvgate accounting after the replay: %d requests begun, %d still open\n", st.Begun, st.Open)
	}
	if o.exitAfter {
		return nil
	}
	fmt.Fprintf(out, "\nThe gateway stays up at %s; Ctrl-C stops everything.\n", base)
	select {
	case <-ctx.Done():
	case err := <-extErr:
		return err
	}
	return nil
}

// replaySlice sends the first requests of a Mooncake trace through the
// gateway as token-id completions, arrivals compressed in time, and prints
// what the engines report: prefix-cached tokens and time to first token.
func replaySlice(ctx context.Context, out io.Writer, base string, o gatewayDemoOptions, engines []*enginesim.Server) error {
	path := o.trace
	if path == "" {
		path = demoTracePath()
	}
	reqs, err := replay.LoadTrace(path, o.requests)
	if err != nil {
		return err
	}
	if len(reqs) == 0 {
		return fmt.Errorf("trace %s: no requests", path)
	}
	fmt.Fprintf(out, "Replaying %d requests of %s through the gateway (arrivals compressed into %s, engines %.0f× faster than the timing model)…\n", len(reqs), filepath.Base(path), o.duration, o.speedup)
	res, results, err := liveReplay(ctx, base, reqs, liveOptions{model: demoModel, span: o.duration, maxTokens: 64})
	if err != nil {
		return err
	}
	failed := 0
	var firstErr error
	for _, r := range results {
		if r.err != nil {
			failed++
			firstErr = cmp.Or(firstErr, r.err)
		}
	}
	fmt.Fprintf(out, "\nSummary: %d requests, %d failed, in %s\n", len(reqs), failed, res.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(out, "  prefix-cache hit ratio %.1f%% of prompt tokens (the trace slice's infinite-cache ideal: %.1f%%)\n",
		100*res.HitRatio, 100*replay.IdealHitRatio(reqs, 64))
	fmt.Fprintf(out, "  time to first token p50 %.0f ms, p90 %.0f ms, p99 %.0f ms (simulated engines, %.0f× speed-up); load imbalance (max/mean) %.2f\n",
		res.TTFTP50Ms, res.TTFTP90Ms, res.TTFTP99Ms, o.speedup, res.LoadImbalance)
	fmt.Fprintf(out, "  requests per engine:")
	for _, e := range engines {
		fmt.Fprintf(out, " %d", e.Stats().Engine.Finished)
	}
	fmt.Fprintln(out)
	if failed > 0 {
		return fmt.Errorf("%d of %d requests failed; first: %w", failed, len(reqs), firstErr)
	}
	return nil
}

// demoTracePath prefers the full conversation trace beside the
// repository and falls back to the slice committed for tests.
func demoTracePath() string {
	dir, err := modelfiles.Dir() // <repo>/.cache/models
	if err == nil {
		root := filepath.Dir(filepath.Dir(dir))
		full := filepath.Join(root, "..", "shared", "traces", "mooncake", "conversation_trace.jsonl")
		if _, err := os.Stat(full); err == nil {
			return full
		}
		return filepath.Join(root, "e2e", "replay", "testdata", "conversation_head300.jsonl")
	}
	return filepath.Join("e2e", "replay", "testdata", "conversation_head300.jsonl")
}

// demoProxy plays envoy/envoy.yaml in front of the demo's engines, with
// one difference: it lets the local user's x-kvgate-debug through (the
// shipped file strips every client x-kvgate-* header), since the demo
// gateway listens on loopback for the user who started it.
func demoProxy(cfg config.Config, extprocAddr string, log *slog.Logger) (*envoyharness.Proxy, error) {
	ecfg := envoyharness.DefaultConfig().AllowingClientDebug()
	var workers []string
	for _, e := range cfg.Engines {
		workers = append(workers, e.Endpoint)
	}
	p, err := envoyharness.NewProxy(ecfg, envoyharness.ProxyOptions{ExtProc: []string{extprocAddr}, Workers: workers, Logger: log})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.WaitHealthy(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}
