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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/daemon/extprocd"
	"github.com/kvgate/kvgate/extproc"
	"github.com/kvgate/kvgate/internal/adminhttp"
	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/internal/yamlconf"
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
	// repeats is how many rounds (round robin, then kvgate) compare runs.
	repeats int
	// roundBudget bounds one round's wall time (0: roundBudgetFor); past
	// it the demo stops as on a machine too busy to run it.
	roundBudget time.Duration
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
	fs.IntVar(&o.repeats, "repeats", 3, "rounds of the comparison, each with fresh fleets (1..20): the summary gives each figure's median and range")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: kvgate-lab demo [flags]\n\n"+
			"Replays a trace slice through two fleets of simulated vLLM engines, one behind a round-robin\n"+
			"load balancer and one behind the gateway and kvgate extproc, --repeats rounds with fresh fleets,\n"+
			"prints both side by side (median and range over the rounds) and a one-sentence verdict, then\n"+
			"keeps the last kvgate fleet serving behind the kvgate-lab gateway.\n\n"+
			"exit status: 0 when the summary was printed, or when the demo stopped because this machine was\n"+
			"too busy to run it in time (it says so); 1 when a request failed or a part did not start (a defect);\n"+
			"2 for bad flags or missing tokenizer files.\n\n"+
			"examples:\n  kvgate-lab demo --exit\n  kvgate-lab demo --requests 300 --replay-duration 15s --repeats 1\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "kvgate-lab demo: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if o.engines < 1 || o.engines > 16 || o.requests < 0 || o.requests > 100000 || o.speedup <= 0 || o.duration < 0 || o.repeats < 1 || o.repeats > 20 {
		fmt.Fprintln(stderr, "kvgate-lab demo: --engines 1..16, --requests 0..100000, --speedup > 0, --replay-duration ≥ 0, --repeats 1..20")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := gatewayDemo(ctx, stdout, o); err != nil && !errors.Is(err, context.Canceled) {
		var slow *slowMachineStop
		if errors.As(err, &slow) {
			// Not a defect: `make run` must not fail on a busy machine.
			fmt.Fprintf(stdout, "\nkvgate-lab demo: stopped early: %v.\nThis machine is too busy to run the demo in time right now; that is not a kvgate defect (exit status 0). Try again when it is quieter, or with fewer --requests.\n", err)
			return 0
		}
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
// fed by the engines' events). With compare (the default) it replays the
// same trace slice, o.repeats rounds, through a fresh fleet behind a
// round-robin balancer and then a fresh kvgate fleet, prints the figures
// over the rounds and a verdict, and keeps the last kvgate fleet serving
// (unless exitAfter). Without compare it starts one kvgate fleet, announces
// it, replays through it once and keeps it serving.
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
	if o.compare && len(reqs) > 0 {
		return compareFleets(ctx, out, o, reqs, traceName, tokDir, quiet)
	}

	fmt.Fprintf(out, "starting %d simulated vLLM engines (each loads the tokenizer), kvgate extproc and the gateway…\n", o.engines)
	kvf, err := startKvgateFleet(ctx, out, o, o.listen, tokDir, quiet)
	if err != nil {
		return err
	}
	defer kvf.stop()
	kvf.announce(out, o)
	if len(reqs) > 0 {
		fmt.Fprintf(out, "Replaying %d requests of %s through the gateway (arrivals compressed into %s, engines %.0f× faster than the timing model):\n",
			len(reqs), traceName, o.duration, o.speedup)
		kv, err := demoReplay(ctx, out, "kvgate", kvf.base, reqs, o, kvf.engines)
		if err != nil {
			return err
		}
		writeOneFleet(out, reqs, kv)
		st := kvf.gw.router.Load().Stats()
		fmt.Fprintf(out, "kvgate accounting after the replay: %d requests begun, %d still open\n", st.Begun, st.Open)
		if kv.failed > 0 {
			return fmt.Errorf("%d of %d requests failed", kv.failed, len(reqs))
		}
	}
	if o.exitAfter {
		return nil
	}
	return kvf.serveUntilDone(ctx, out)
}

// kvgateFleet is simulated engines behind a kvgate extproc and the
// gateway, serving at base until stop.
type kvgateFleet struct {
	engines []*enginesim.Server
	cfg     config.Config
	gw      *demoGateway
	base    string
	stop    func() // ends the fleet and waits for its goroutines
}

// startKvgateFleet starts o.engines simulated engines, a kvgate extproc
// subscribed to their KV events and a gateway in front of it listening on
// listen (a taken address falls back to a free port, said loudly).
func startKvgateFleet(ctx context.Context, out io.Writer, o gatewayDemoOptions, listen, tokDir string, log *slog.Logger) (*kvgateFleet, error) {
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var closers []func()
	f := &kvgateFleet{stop: func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		cancel()
		wg.Wait()
	}}
	fail := func(err error) (*kvgateFleet, error) {
		f.stop()
		return nil, err
	}
	engines, cfgEngines, err := startDemoEngines(fctx, &wg, o.engines, 1, tokDir, o.speedup, log)
	if err != nil {
		return fail(err)
	}
	f.engines = engines
	f.cfg = demoConfig(tokDir)
	f.cfg.Engines = cfgEngines
	if err := f.cfg.Validate(); err != nil {
		return fail(err)
	}
	if f.gw, err = startDemoGateway(fctx, &wg, f.cfg, log); err != nil {
		return fail(err)
	}
	closers = append(closers, func() { f.gw.proxy.Close() })
	gln, err := listenOrFallback(out, listen, "gateway")
	if err != nil {
		return fail(err)
	}
	gws := adminhttp.NewServer(f.gw.proxy)
	go gws.Serve(gln)
	closers = append(closers, func() { gws.Close() })
	f.base = "http://" + gln.Addr().String()
	return f, nil
}

// announce says where the fleet serves, its metrics and decisions.
func (f *kvgateFleet) announce(out io.Writer, o gatewayDemoOptions) {
	fmt.Fprintf(out, "\nkvgate-lab demo: %d simulated vLLM engines (%s, KV events over ZMQ), kvgate extproc on %s (in-memory index),\n", o.engines, demoModel, f.gw.grpc)
	fmt.Fprintf(out, "and a gateway playing Envoy's side of ext_proc on %s. Metrics and recent decisions: http://%s/metrics, http://%s/debug/decisions\n\n", f.base, f.gw.admin, f.gw.admin)
}

// serveUntilDone keeps the fleet serving until ctx ends (Ctrl-C), after
// telling the user how to try it.
func (f *kvgateFleet) serveUntilDone(ctx context.Context, out io.Writer) error {
	fmt.Fprintf(out, "Try it (the response's %s header names the engine that served it):\n  curl -s %s/v1/chat/completions -H 'content-type: application/json' -H 'x-kvgate-debug: 1' -D - \\\n    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],\"max_tokens\":16}'\n\n",
		servedByHeader, f.base, demoModel)
	fmt.Fprint(out, plannerDemoHint(f.cfg.Engines, f.gw.admin.String()))
	fmt.Fprintf(out, "The kvgate-lab gateway stays up at %s; Ctrl-C stops everything.\n", f.base)
	select {
	case <-ctx.Done():
	case err := <-f.gw.extErr:
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
	// Each engine loads the tokenizer, the slow part of a fleet's start
	// (seconds of CPU each): loaded side by side they take the machine's
	// free cores, and on a machine shared with other work a larger share
	// of it, instead of one core after the other.
	servers := make([]*enginesim.Server, n)
	errs := make([]error, n)
	var loading sync.WaitGroup
	for i := range servers {
		loading.Add(1)
		go func() {
			defer loading.Done()
			servers[i], errs[i] = enginesim.NewServer(enginesim.ServerConfig{
				Model: demoModel, TokenizerDir: tokDir, Seed: firstSeed + uint64(i), Logger: log,
				Engine: enginesim.Config{BlockSize: 64, NumGPUBlocks: demoGPUBlocks, SpeedUp: speedup},
				Events: enginesim.EventsConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"},
			})
		}()
	}
	loading.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, fmt.Errorf("simulated engines: %w", err)
	}
	var cfgs []config.Engine
	for i, s := range servers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, fmt.Errorf("simulated engine %d: %w", i, err)
		}
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
	fmt.Fprintf(out, "starting %d fresh simulated engines behind a round-robin balancer, with its own gateway and extproc…\n", o.engines)
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
	// extproc.preprocess.timeout (1 s) protects a production extproc from
	// one CPU-heavy prompt; here the extproc shares the machine with its
	// engines, the other fleet and the client, and a starved scheduler,
	// not the request, would trip it and fail the request with a 503.
	cfg.Extproc.Preprocess.Timeout = yamlconf.Duration(30 * time.Second)
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
	p, err := envoyharness.NewProxy(ecfg, envoyharness.ProxyOptions{ExtProc: []string{extprocAddr}, Workers: workers, Logger: log, ServedByHeader: servedByHeader})
	if err != nil {
		return nil, err
	}
	// The replica runs in this process and listens on loopback: a health
	// check that has not passed in a minute is the machine starving it.
	const wait = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := p.WaitHealthy(ctx); err != nil {
		p.Close()
		return nil, &slowMachineStop{fmt.Sprintf("the gateway's health check of its in-process kvgate extproc did not pass within %s (%v)", wait, err)}
	}
	return p, nil
}
