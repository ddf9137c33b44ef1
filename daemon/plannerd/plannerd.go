// Package plannerd is the `kvgate planner` process in the daemon shell:
// its flags (advisory mode, interval, journal, profile, engines to
// scrape, a bounded number of steps) and the decision loop it starts.
package plannerd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/daemon"
	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/planner-sidecar"
)

// Spec is `kvgate planner`; the binary adds its tools (profile, explain)
// as Subcommands.
var Spec = daemon.Spec{
	Name:       "planner",
	Summary:    "size prefill/decode pools to TTFT/ITL targets (--config FILE [--advisory]); profile, explain",
	ConfigHelp: "configuration file (YAML); the planner: section and engines:",
	Usage: "usage: kvgate planner --config FILE [--advisory] [--interval 10s] [--journal FILE]\n" +
		"       kvgate planner profile --engine URL --out profile.json\n" +
		"       kvgate planner explain --journal FILE [--at TIME]\n" +
		"       (simulated fleets in simulated time: kvgate-lab planner-simulate)",
	Flags: flags,
}

// flagValues are the planner's own flags.
type flagValues struct {
	advisory                *bool
	interval                *time.Duration
	journal, profile        *string
	engines, extproc, admin *string
	steps                   *int
	extraEngines            []config.Engine // --engines, parsed
}

func flags(fs *flag.FlagSet) daemon.Parts {
	f := &flagValues{
		advisory: fs.Bool("advisory", false, "decide, journal and export metrics, but change nothing"),
		interval: fs.Duration("interval", 0, "time between decisions (default planner.interval)"),
		journal:  fs.String("journal", "", "append decisions to this JSONL file (default planner.journal)"),
		profile:  fs.String("profile", "", "performance profile written by 'kvgate planner profile' (default planner.profile)"),
		engines:  fs.String("engines", "", "comma-separated engine host:port list to scrape (role both), besides engines:"),
		extproc:  fs.String("extproc", "", "kvgate extproc admin host:port to scrape (default planner.scrape.extproc)"),
		admin:    fs.String("admin", "", "serve /metrics and /healthz here (default planner.admin)"),
		steps:    fs.Int("steps", 0, "stop after this many decisions (0 = run until interrupted)"),
	}
	return daemon.Parts{Override: f.override, Start: f.start}
}

// override lays the flags over the planner: section. The --engines are
// kept aside for start: they name no model, which engines: requires.
func (f *flagValues) override(cfg *config.Config) error {
	if *f.engines != "" {
		for _, ep := range strings.Split(*f.engines, ",") {
			ep = strings.TrimSpace(ep)
			if _, _, err := net.SplitHostPort(ep); err != nil {
				return fmt.Errorf("--engines: %q: want host:port", ep)
			}
			f.extraEngines = append(f.extraEngines, config.Engine{Endpoint: ep, Role: "both", DPRanks: 1})
		}
	}
	if *f.extproc != "" {
		cfg.Planner.Scrape.Extproc = *f.extproc
	}
	if *f.admin != "" {
		cfg.Planner.Admin = *f.admin
		// The file's address passed validation; the flag's must meet the
		// same rule (no token, beyond loopback: refused unless allowed).
		auth := cfg.Planner.AdminAuth
		if !confaddr.IsLoopback(*f.admin) && !auth.Configured() && !auth.AllowUnauthenticated {
			return fmt.Errorf("--admin %q is not a loopback address and planner.admin_auth has no token: set planner.admin_auth.token_file or token_env, or planner.admin_auth.allow_unauthenticated: true", *f.admin)
		}
	}
	if *f.interval < 0 || *f.steps < 0 {
		return errors.New("--interval and --steps must be >= 0")
	}
	return nil
}

// start builds the loop (profile, collector, actuator, journal; what they
// refuse is the input's fault: exit 2).
func (f *flagValues) start(_ context.Context, cfg config.Config, env daemon.Env) (*daemon.Process, error) {
	fleet := cfg
	fleet.Engines = append(slices.Clone(cfg.Engines), f.extraEngines...)
	workers, err := fleet.Workers()
	if err != nil {
		return nil, daemon.BadInput(err)
	}
	loop, err := plannersidecar.New(cfg.Planner, workers, plannersidecar.Options{Advisory: *f.advisory, Interval: *f.interval, Journal: *f.journal, Profile: *f.profile, Log: env.Log})
	if err != nil {
		return nil, daemon.BadInput(err)
	}
	return process(cfg, loop, *f.steps, env), nil
}

// process runs loop (steps decisions, or until ctx ends) with its admin
// endpoints on planner.admin; it closes the loop's journal when done.
func process(cfg config.Config, loop *plannersidecar.Loop, steps int, env daemon.Env) *daemon.Process {
	p := &daemon.Process{
		Admin: daemon.Admin{
			Key: "planner.admin", Addr: cfg.Planner.Admin, Auth: cfg.Planner.AdminAuth,
			// 200 once a decision was made within three intervals.
			Healthy: func() error { return loop.Healthy(time.Now()) },
			Routes:  loop.AdminHandler(), // /metrics
		},
		Started: func(_ context.Context, admin net.Addr) {
			env.Log.Info("planner: started", "admin", admin.String(), "advisory", loop.Advisory, "interval", loop.Interval.String())
			env.Announce("admin on http://%s", admin)
		},
		Run: func(ctx context.Context) error { return runSteps(ctx, loop, steps) },
	}
	if loop.Journal != nil {
		p.OnClose(func() { loop.Journal.Close() })
	}
	return p
}

// runSteps makes steps decisions an interval apart, or with steps 0 runs
// the loop until ctx ends.
func runSteps(ctx context.Context, loop *plannersidecar.Loop, steps int) error {
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
