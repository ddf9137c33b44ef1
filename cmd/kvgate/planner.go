package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/internal/adminhttp"
	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/planner-sidecar"
	"github.com/kvgate/kvgate/planner-sidecar/journal"
	"github.com/kvgate/kvgate/planner-sidecar/profiler"
)

func init() {
	register("planner", cli.Command{
		Summary: "size prefill/decode pools to TTFT/ITL targets (--config FILE [--advisory]); profile, explain",
		Run:     runPlanner,
	})
}

func runPlanner(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "profile":
			return runPlannerProfile(args[1:], stdout, stderr)
		case "explain":
			return runPlannerExplain(args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("kvgate planner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (YAML); the planner: section and engines:")
	logFmt := cli.LogFormatFlag(fs)
	advisory := fs.Bool("advisory", false, "decide, journal and export metrics, but change nothing")
	interval := fs.Duration("interval", 0, "time between decisions (default planner.interval)")
	journalPath := fs.String("journal", "", "append decisions to this JSONL file (default planner.journal)")
	profilePath := fs.String("profile", "", "performance profile written by 'kvgate planner profile' (default planner.profile)")
	engines := fs.String("engines", "", "comma-separated engine host:port list to scrape (role both), besides engines:")
	extprocAdmin := fs.String("extproc", "", "kvgate extproc admin host:port to scrape (default planner.scrape.extproc)")
	admin := fs.String("admin", "", "serve /metrics and /healthz here (default planner.admin)")
	steps := fs.Int("steps", 0, "stop after this many decisions (0 = run until interrupted)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kvgate planner --config FILE [--advisory] [--interval 10s] [--journal FILE]")
		fmt.Fprintln(stderr, "       kvgate planner profile --engine URL --out profile.json")
		fmt.Fprintln(stderr, "       kvgate planner explain --journal FILE [--at TIME]")
		fmt.Fprintln(stderr, "       (simulated fleets in simulated time: kvgate-lab planner-simulate)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kvgate planner: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg := config.Default()
	if *cfgPath != "" {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			fmt.Fprintf(stderr, "kvgate planner: %v\n", err)
			return 2
		}
	}
	if *engines != "" {
		for _, ep := range strings.Split(*engines, ",") {
			ep = strings.TrimSpace(ep)
			if _, _, err := net.SplitHostPort(ep); err != nil {
				fmt.Fprintf(stderr, "kvgate planner: --engines: %q: want host:port\n", ep)
				return 2
			}
			cfg.Engines = append(cfg.Engines, config.Engine{Endpoint: ep, Role: "both", DPRanks: 1})
		}
	}
	if *extprocAdmin != "" {
		cfg.Planner.Scrape.Extproc = *extprocAdmin
	}
	if *admin != "" {
		cfg.Planner.Admin = *admin
		// The file's address passed validation; the flag's must meet the
		// same rule (no token, beyond loopback: refused unless allowed).
		auth := cfg.Planner.AdminAuth
		if !confaddr.IsLoopback(*admin) && !auth.Configured() && !auth.AllowUnauthenticated {
			fmt.Fprintf(stderr, "kvgate planner: --admin %q is not a loopback address and planner.admin_auth has no token: set planner.admin_auth.token_file or token_env, or planner.admin_auth.allow_unauthenticated: true\n", *admin)
			return 2
		}
	}
	if *interval < 0 || *steps < 0 {
		fmt.Fprintln(stderr, "kvgate planner: --interval and --steps must be >= 0")
		return 2
	}
	log, err := cli.NewProcessLogger(stderr, cli.LogFormat(*logFmt, cfg.Log.Format))
	if err != nil {
		fmt.Fprintf(stderr, "kvgate planner: --log-format: %v\n", err)
		return 2
	}
	workers, err := cfg.Workers()
	if err != nil {
		fmt.Fprintf(stderr, "kvgate planner: %v\n", err)
		return 2
	}
	loop, err := plannersidecar.New(cfg.Planner, workers, plannersidecar.Options{Advisory: *advisory, Interval: *interval, Journal: *journalPath, Profile: *profilePath, Log: log})
	if err != nil {
		fmt.Fprintf(stderr, "kvgate planner: %v\n", err)
		return 2
	}
	if loop.Journal != nil {
		defer loop.Journal.Close()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", cfg.Planner.Admin)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate planner: admin: %v\n", err)
		return 1
	}
	if err := servePlanner(ctx, loop, plannerAdmin(cfg, loop, log), ln, *steps, log); err != nil {
		fmt.Fprintf(stderr, "kvgate planner: %v\n", err)
		return 1
	}
	return 0
}

// plannerAdmin is the planner's admin handler behind planner.admin_auth
// (the bearer-token check every kvgate admin listener shares).
func plannerAdmin(cfg config.Config, loop *plannersidecar.Loop, log *slog.Logger) http.Handler {
	return adminhttp.WithAdminAuth(loop.AdminHandler(), "planner.admin", cfg.Planner.Admin, cfg.Planner.AdminAuth, log)
}

// servePlanner runs the loop (steps decisions, or until ctx ends) with the
// admin endpoints up on ln (closed when it returns).
func servePlanner(ctx context.Context, loop *plannersidecar.Loop, admin http.Handler, ln net.Listener, steps int, log *slog.Logger) error {
	srv := &http.Server{Handler: admin, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	log.Info("planner: started", "admin", ln.Addr().String(), "advisory", loop.Advisory, "interval", loop.Interval.String())
	if steps == 0 {
		return loop.Run(ctx)
	}
	for i := range steps {
		if _, err := loop.Step(ctx); err != nil {
			return err
		}
		if i == steps-1 {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(loop.Interval):
		}
	}
	return nil
}

func runPlannerProfile(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate planner profile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	engine := fs.String("engine", "", "engine base URL, e.g. http://127.0.0.1:8000 (vLLM, SGLang or kvgate enginesim)")
	out := fs.String("out", "", "write the profile here (JSON)")
	model := fs.String("model", "", "served model name (default: the first of /v1/models)")
	inputs := fs.String("inputs", "256,1024,4096", "prefill input lengths (tokens)")
	conc := fs.String("concurrency", "1,2,4,8", "prefill concurrencies")
	contexts := fs.String("contexts", "512,2048", "decode context lengths (tokens)")
	batches := fs.String("batches", "1,8,32", "decode batch sizes")
	requests := fs.Int("requests", 16, "prefill requests per point")
	outTokens := fs.Int("output-tokens", 64, "tokens each decode request generates")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on one request")
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	if *engine == "" || *out == "" {
		fmt.Fprintln(stderr, "kvgate planner profile: --engine and --out are required")
		return 2
	}
	o := profiler.Options{Engine: *engine, Model: *model, Requests: *requests, OutputTokens: *outTokens, Timeout: *timeout, Progress: stdout}
	for _, f := range []struct {
		name string
		s    string
		dst  *[]int
	}{{"inputs", *inputs, &o.InputLengths}, {"concurrency", *conc, &o.Concurrency}, {"contexts", *contexts, &o.ContextLengths}, {"batches", *batches, &o.Batches}} {
		v, err := plannerIntList(f.s)
		if err != nil {
			fmt.Fprintf(stderr, "kvgate planner profile: --%s: %v\n", f.name, err)
			return 2
		}
		*f.dst = v
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	p, err := profiler.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate planner %v\n", err)
		var oe *profiler.OptionsError
		if errors.As(err, &oe) {
			return 2
		}
		return 1
	}
	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate planner profile: %v\n", err)
		return 1
	}
	if err := errors.Join(p.Write(f), f.Close()); err != nil {
		fmt.Fprintf(stderr, "kvgate planner profile: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s (%d prefill and %d decode points)\n", *out, len(p.Prefill), len(p.Decode))
	return 0
}

func plannerIntList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func runPlannerExplain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate planner explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("journal", "", "the planner's JSONL journal")
	at := fs.String("at", "", "explain the last decision at or before this time (RFC 3339; default: the last decision)")
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	if *path == "" {
		fmt.Fprintln(stderr, "kvgate planner explain: --journal is required")
		return 2
	}
	var t time.Time
	if *at != "" {
		var err error
		if t, err = time.Parse(time.RFC3339Nano, *at); err != nil {
			fmt.Fprintf(stderr, "kvgate planner explain: --at %q: want RFC 3339, e.g. 2026-01-01T12:00:00Z\n", *at)
			return 2
		}
	}
	entries, err := journal.ReadFile(*path)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate planner explain: %v\n", err)
		return 2
	}
	e, ok := journal.At(entries, t)
	if !ok {
		fmt.Fprintf(stderr, "kvgate planner explain: no decision at or before %s in %s (%d entries)\n", *at, *path, len(entries))
		return 1
	}
	journal.Explain(stdout, e)
	return 0
}
