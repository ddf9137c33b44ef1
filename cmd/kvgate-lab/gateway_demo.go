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
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/daemon/extprocd"
	"github.com/kvgate/kvgate/extproc"
	"github.com/kvgate/kvgate/internal/adminhttp"
	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/replay"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

func init() {
	register("demo", cli.Command{
		Summary: "local gateway demo on embedded defaults: simulated vLLM engines, kvgate extproc, a gateway on localhost:8080, a trace replay",
		Run:     runGatewayDemo,
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
	// compare also replays through a round-robin fleet first.
	compare bool
	// progressEvery is how often the replay prints how far it is (0: 5 s).
	progressEvery time.Duration
}

func runGatewayDemo(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate-lab demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := gatewayDemoOptions{}
	fs.IntVar(&o.engines, "engines", 4, "simulated engines per fleet (1..16)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "gateway address (when taken, the demo says so and takes a free port)")
	fs.StringVar(&o.trace, "trace", "", "Mooncake-format trace to replay (default: the first 1000 requests of Mooncake's conversation trace, embedded)")
	fs.IntVar(&o.requests, "requests", 600, "requests of the trace to replay through each fleet (0..100000; 0: none, just serve)")
	fs.DurationVar(&o.duration, "replay-duration", 30*time.Second, "compress the slice's arrivals into about this long (per fleet)")
	fs.Float64Var(&o.speedup, "speedup", 10, "engine speed-up over the simulated GPU timing model")
	fs.BoolVar(&o.exitAfter, "exit", false, "exit after the summary instead of serving until Ctrl-C")
	fs.BoolVar(&o.compare, "compare", true, "replay through a round-robin fleet first and print both side by side (false: the kvgate fleet only)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: kvgate-lab demo [flags]\n\n"+
			"Replays a trace slice through two fleets of simulated vLLM engines, one behind a round-robin\n"+
			"load balancer and one behind the gateway and kvgate extproc, prints both side by side, then\n"+
			"keeps the kvgate-lab gateway serving.\n\nexamples:\n  kvgate-lab demo --exit\n  kvgate-lab demo --requests 300 --replay-duration 15s\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "kvgate-lab demo: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if o.engines < 1 || o.engines > 16 || o.requests < 0 || o.requests > 100000 || o.speedup <= 0 || o.duration < 0 {
		fmt.Fprintln(stderr, "kvgate-lab demo: --engines 1..16, --requests 0..100000, --speedup > 0, --replay-duration ≥ 0")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := gatewayDemo(ctx, stdout, o); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "kvgate-lab demo: %v\n", err)
		var missing *modelfiles.MissingError
		if errors.As(err, &missing) {
			return 2
		}
		return 1
	}
	return 0
}

const demoModel = "qwen3"

// demoGPUBlocks is each simulated engine's KV cache: 16384 blocks of 64
// tokens, 1 Mi tokens, the Dynamo mocker's default and `kvgate-lab replay`'s
// (--gpu-blocks 0). Mooncake's conversations come back after long gaps;
// a much smaller cache evicts most prefixes before they are reused, under
// any policy.
const demoGPUBlocks = 16384

// demoFleetRun is one fleet's replay of the slice.
type demoFleetRun struct {
	name      string
	res       *replay.PolicyResult
	failed    int
	perEngine []int
}

// gatewayDemo wires the whole system in one process, as it runs in a mesh:
// simulated vLLM engines (HTTP + ZMQ KV events) ← gateway (the Envoy
// harness, playing Envoy) ↔ kvgate extproc (gRPC ext_proc, in-memory index
// fed by the engines' events). Before serving, it replays the same trace
// slice through a second, fresh fleet behind a round-robin balancer and
// then through the kvgate fleet, and prints both.
func gatewayDemo(ctx context.Context, out io.Writer, o gatewayDemoOptions) error {
	fmt.Fprintf(out, "kvgate-lab demo: finding the %s tokenizer files…\n", demoModel)
	tokDir, err := modelfiles.Model(demoModel)
	if err != nil {
		return err
	}
	var reqs []replay.TraceRequest
	traceName := ""
	if o.requests > 0 {
		if reqs, traceName, err = loadTrace(o.trace, o.requests); err != nil {
			return err
		}
		if len(reqs) == 0 {
			return fmt.Errorf("trace %s: no requests", traceName)
		}
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

	fmt.Fprintf(out, "starting %d simulated vLLM engines for the kvgate fleet (each loads the tokenizer)…\n", o.engines)
	engines, cfgEngines, err := startDemoEngines(runCtx, &wg, o.engines, 1, tokDir, o.speedup, quiet)
	if err != nil {
		return err
	}
	cfg := demoConfig(tokDir)
	cfg.Engines = cfgEngines
	if err := cfg.Validate(); err != nil {
		return err
	}

	fmt.Fprintln(out, "starting kvgate extproc (tokenizer, in-memory index subscribed to the engines' KV events) and the gateway…")
	kvgw, err := startDemoGateway(runCtx, &wg, cfg, quiet)
	if err != nil {
		return err
	}
	defer kvgw.proxy.Close()
	gln, err := listenOrFallback(out, o.listen, "gateway")
	if err != nil {
		return err
	}
	gws := adminhttp.NewServer(kvgw.proxy)
	go gws.Serve(gln)
	defer gws.Close()
	base := "http://" + gln.Addr().String()

	fmt.Fprintf(out, "\nkvgate-lab demo: %d simulated vLLM engines (%s, KV events over ZMQ), kvgate extproc on %s (in-memory index),\n", o.engines, demoModel, kvgw.grpc)
	fmt.Fprintf(out, "and a gateway playing Envoy's side of ext_proc on %s. Metrics and recent decisions: http://%s/metrics, http://%s/debug/decisions\n\n", base, kvgw.admin, kvgw.admin)
	fmt.Fprintf(out, "Try it:\n  curl -s %s/v1/chat/completions -H 'content-type: application/json' -H 'x-kvgate-debug: 1' -D - \\\n    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],\"max_tokens\":16}'\n\n", base, demoModel)
	fmt.Fprint(out, plannerDemoHint(cfg.Engines, kvgw.admin.String()))

	if len(reqs) > 0 {
		if !o.compare {
			fmt.Fprintf(out, "Replaying %d requests of %s through the gateway (arrivals compressed into %s, engines %.0f× faster than the timing model):\n",
				len(reqs), traceName, o.duration, o.speedup)
			kv, err := demoReplay(ctx, out, "kvgate", base, reqs, o, engines)
			if err != nil {
				return err
			}
			writeOneFleet(out, reqs, kv)
			st := kvgw.router.Load().Stats()
			fmt.Fprintf(out, "kvgate accounting after the replay: %d requests begun, %d still open\n", st.Begun, st.Open)
			if kv.failed > 0 {
				return fmt.Errorf("%d of %d requests failed", kv.failed, len(reqs))
			}
		} else {
			fmt.Fprintf(out, "Replaying the same %d requests of %s through two fresh fleets of %d engines, one after the other\n"+
				"(arrivals compressed into %s each, engines %.0f× faster than the timing model):\n",
				len(reqs), traceName, o.engines, o.duration, o.speedup)
			rr, err := roundRobinFleetRun(ctx, out, reqs, o, tokDir, quiet)
			if err != nil {
				return err
			}
			kv, err := demoReplay(ctx, out, "kvgate", base, reqs, o, engines)
			if err != nil {
				return err
			}
			writeSideBySide(out, reqs, rr, kv)
			st := kvgw.router.Load().Stats()
			fmt.Fprintf(out, "kvgate accounting after the replay: %d requests begun, %d still open\n", st.Begun, st.Open)
			if rr.failed+kv.failed > 0 {
				return fmt.Errorf("%d of %d round-robin and %d of %d kvgate requests failed", rr.failed, len(reqs), kv.failed, len(reqs))
			}
		}
	}
	if o.exitAfter {
		return nil
	}
	fmt.Fprintf(out, "\nThe kvgate-lab gateway stays up at %s; Ctrl-C stops everything.\n", base)
	select {
	case <-ctx.Done():
	case err := <-kvgw.extErr:
		return err
	}
	return nil
}

// demoGateway is a kvgate extproc and the gateway (envoyharness playing
// envoy/envoy.yaml) in front of it.
type demoGateway struct {
	grpc, admin net.Addr
	router      *extproc.Router
	extErr      <-chan error // the extproc's end
	proxy       *envoyharness.Proxy
}

// startDemoGateway starts a kvgate extproc on cfg and a gateway using it,
// and waits for the gateway's ext_proc health check to pass.
func startDemoGateway(ctx context.Context, wg *sync.WaitGroup, cfg config.Config, log *slog.Logger) (*demoGateway, error) {
	type addrs struct{ grpc, admin net.Addr }
	ready := make(chan addrs, 1)
	routerc := make(chan *extproc.Router, 1)
	extErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		extErr <- extprocd.Serve(ctx, cfg, extprocd.Options{Drain: time.Second, Log: log,
			Listening:   func(g, a net.Addr) { ready <- addrs{g, a} },
			RouterReady: func(r *extproc.Router) { routerc <- r },
		})
	}()
	var a addrs
	select {
	case a = <-ready:
	case err := <-extErr:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	g := &demoGateway{grpc: a.grpc, admin: a.admin, router: <-routerc, extErr: extErr}
	var err error
	if g.proxy, err = demoProxy(cfg, a.grpc.String(), log); err != nil {
		return nil, err
	}
	return g, nil
}

// startDemoEngines starts n simulated vLLM engines on loopback, serving
// until ctx ends; seeds start at firstSeed so two fleets differ.
func startDemoEngines(ctx context.Context, wg *sync.WaitGroup, n int, firstSeed uint64, tokDir string, speedup float64, log *slog.Logger) ([]*enginesim.Server, []config.Engine, error) {
	servers := make([]*enginesim.Server, n)
	var cfgs []config.Engine
	for i := range servers {
		s, err := enginesim.NewServer(enginesim.ServerConfig{
			Model: demoModel, TokenizerDir: tokDir, Seed: firstSeed + uint64(i), Logger: log,
			Engine: enginesim.Config{BlockSize: 64, NumGPUBlocks: demoGPUBlocks, SpeedUp: speedup},
			Events: enginesim.EventsConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"},
		})
		if err != nil {
			return nil, nil, fmt.Errorf("simulated engine %d: %w", i, err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, fmt.Errorf("simulated engine %d: %w", i, err)
		}
		servers[i] = s
		wg.Add(1)
		go func() { defer wg.Done(); s.Serve(ctx, ln, time.Second) }()
		cfgs = append(cfgs, config.Engine{Endpoint: ln.Addr().String(), Model: demoModel, DPRanks: 1, Role: "both",
			Events: s.EventsAddr(), Replay: s.ReplayAddr()})
	}
	return servers, cfgs, nil
}

// listenOrFallback listens on addr or, when it is taken, on a free
// loopback port, saying so loudly: a demo that moves silently leaves the
// user curling the wrong process.
func listenOrFallback(out io.Writer, addr, what string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	ln, ferr := net.Listen("tcp", "127.0.0.1:0")
	if ferr != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w; and on a free port: %w", what, addr, err, ferr)
	}
	fmt.Fprintf(out, "\n*** %s: %s is not available (%v);\n*** listening on %s INSTEAD (choose with --listen).\n\n", what, addr, err, ln.Addr())
	return ln, nil
}

// roundRobinFleetRun replays reqs through a fresh fleet routed round
// robin, and stops that fleet. The requests take the same path as the
// kvgate fleet's (the gateway, a kvgate extproc parsing, tokenizing and
// hashing each request and seeing its response) so that the comparison
// is of the routing alone: this extproc knows one engine, a round-robin
// balancer in front of the fleet (what Envoy's ROUND_ROBIN load balancer
// does), and routes everything there. The balancer is one extra loopback
// hop that only this fleet pays.
func roundRobinFleetRun(ctx context.Context, out io.Writer, reqs []replay.TraceRequest, o gatewayDemoOptions, tokDir string, log *slog.Logger) (*demoFleetRun, error) {
	fmt.Fprintf(out, "starting %d more simulated engines behind a round-robin balancer, with its own gateway and extproc…\n", o.engines)
	fleetCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	engines, cfgs, err := startDemoEngines(fleetCtx, &wg, o.engines, 101, tokDir, o.speedup, log)
	if err != nil {
		return nil, err
	}
	targets := make([]string, len(cfgs))
	for i, c := range cfgs {
		targets[i] = c.Endpoint
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := adminhttp.NewServer(newRoundRobinProxy(targets))
	go srv.Serve(ln)
	defer srv.Close()
	cfg := demoConfig(tokDir)
	// No events: the extproc routes this one "engine" in approximate mode.
	cfg.Engines = []config.Engine{{Endpoint: ln.Addr().String(), Model: demoModel, DPRanks: 1, Role: "both"}}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g, err := startDemoGateway(fleetCtx, &wg, cfg, log)
	if err != nil {
		return nil, err
	}
	defer g.proxy.Close()
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	gws := adminhttp.NewServer(g.proxy)
	go gws.Serve(gln)
	defer gws.Close()
	return demoReplay(ctx, out, "round-robin", "http://"+gln.Addr().String(), reqs, o, engines)
}

// demoConfig is the demo extprocs' configuration, without engines.
func demoConfig(tokDir string) config.Config {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: demoModel, BlockSize: 64, Tokenizer: tokDir}}
	cfg.Extproc.Listen, cfg.Extproc.Admin = "127.0.0.1:0", "127.0.0.1:0"
	// The demo shows, and its replay reads, each decision in x-kvgate-debug;
	// everything listens on loopback. Production leaves it off.
	cfg.Extproc.DebugHeader.AllowAnyClient = true
	return cfg
}

// demoReplay sends reqs through the gateway at base as token-id
// completions, arrivals compressed in time, printing progress, and
// collects what the engines reported: prefix-cached tokens and time to
// first token.
func demoReplay(ctx context.Context, out io.Writer, name, base string, reqs []replay.TraceRequest, o gatewayDemoOptions, engines []*enginesim.Server) (*demoFleetRun, error) {
	fmt.Fprintf(out, "  %s: replaying %d requests…\n", name, len(reqs))
	var answered atomic.Int64
	every := cmp.Or(o.progressEvery, 5*time.Second)
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(progressDone)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				fmt.Fprintf(out, "  %s: %d/%d answered (%s)\n", name, answered.Load(), len(reqs), time.Since(start).Round(time.Second))
			}
		}
	}()
	res, results, err := liveReplay(ctx, base, reqs, liveOptions{model: demoModel, span: o.duration, maxTokens: 64, answered: &answered})
	close(stopProgress)
	<-progressDone
	if err != nil {
		return nil, fmt.Errorf("%s replay: %w", name, err)
	}
	run := &demoFleetRun{name: name, res: res}
	var firstErr error
	for _, r := range results {
		if r.err != nil {
			run.failed++
			firstErr = cmp.Or(firstErr, r.err)
		}
	}
	for _, e := range engines {
		run.perEngine = append(run.perEngine, int(e.Stats().Engine.Finished))
	}
	fmt.Fprintf(out, "  %s: %d requests, %d failed, in %s\n", name, len(reqs), run.failed, res.Elapsed.Round(time.Millisecond))
	if firstErr != nil {
		fmt.Fprintf(out, "  %s: first failure: %v\n", name, firstErr)
	}
	return run, nil
}

// writeOneFleet prints the kvgate fleet's figures alone (--compare=false).
func writeOneFleet(out io.Writer, reqs []replay.TraceRequest, kv *demoFleetRun) {
	fmt.Fprintf(out, "\nSummary: %d requests, %d failed\n", len(reqs), kv.failed)
	fmt.Fprintf(out, "  prefix-cache hit ratio %.1f%% of prompt tokens (the slice's infinite-cache ideal: %.1f%%)\n",
		100*kv.res.HitRatio, 100*replay.IdealHitRatio(reqs, 64))
	fmt.Fprintf(out, "  time to first token p50 %.0f ms, p90 %.0f ms, p99 %.0f ms; requests per engine:", kv.res.TTFTP50Ms, kv.res.TTFTP90Ms, kv.res.TTFTP99Ms)
	for _, n := range kv.perEngine {
		fmt.Fprintf(out, " %d", n)
	}
	fmt.Fprintln(out)
}

// writeSideBySide prints the two fleets' figures and kvgate's ratio to
// round robin.
func writeSideBySide(out io.Writer, reqs []replay.TraceRequest, rr, kv *demoFleetRun) {
	ratio := func(k, r float64) string {
		if r <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", k/r)
	}
	perEngine := func(n []int) string {
		s := make([]string, len(n))
		for i, v := range n {
			s[i] = strconv.Itoa(v)
		}
		return strings.Join(s, " ")
	}
	fmt.Fprintf(out, "\nSummary: the same %d requests, round robin vs kvgate\n", len(reqs))
	tw := tabwriter.NewWriter(out, 0, 4, 3, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\tround-robin\tkvgate\tkvgate / round-robin\t\n")
	fmt.Fprintf(tw, "prefix-cache hit ratio (prompt tokens)\t%.1f%%\t%.1f%%\t%s\t\n", 100*rr.res.HitRatio, 100*kv.res.HitRatio, ratio(kv.res.HitRatio, rr.res.HitRatio))
	fmt.Fprintf(tw, "time to first token p50\t%.0f ms\t%.0f ms\t%s\t\n", rr.res.TTFTP50Ms, kv.res.TTFTP50Ms, ratio(kv.res.TTFTP50Ms, rr.res.TTFTP50Ms))
	fmt.Fprintf(tw, "time to first token p90\t%.0f ms\t%.0f ms\t%s\t\n", rr.res.TTFTP90Ms, kv.res.TTFTP90Ms, ratio(kv.res.TTFTP90Ms, rr.res.TTFTP90Ms))
	fmt.Fprintf(tw, "failed requests\t%d\t%d\t\t\n", rr.failed, kv.failed)
	fmt.Fprintf(tw, "requests per engine\t%s\t%s\t\t\n", perEngine(rr.perEngine), perEngine(kv.perEngine))
	tw.Flush()
	fmt.Fprintf(out, "The slice's infinite-cache ideal (every repeated prefix block a hit): %.1f%% of prompt tokens.\n", 100*replay.IdealHitRatio(reqs, 64))
	fmt.Fprintln(out, "TTFT comes from simulated engines on this machine: compare the two columns, not the absolute numbers.")
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
