// Command render draws the kvgate Grafana dashboards' panels from a real
// demo's metrics into PNGs (docs/dashboards/*.png), so that a newcomer sees
// what each board shows. It runs `kvgate-lab demo` (what `make run` starts:
// simulated vLLM engines, the extproc with its in-memory index, a gateway
// and a Mooncake trace replay), scrapes the extproc's and every engine's
// /metrics every second while the replay runs, then evaluates each panel's
// own PromQL with Prometheus' query engine over those samples and plots
// the series with gonum/plot.
//
//	go run ./deploy/dashboards/render --kvgate-lab bin/kvgate-lab --out docs/dashboards
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/prometheus/promql"

	"github.com/kvgate/kvgate/deploy/inventory"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kvgate := fs.String("kvgate-lab", "bin/kvgate-lab", "the kvgate-lab binary (make build), whose demo the boards show")
	dir := fs.String("dashboards", "deploy/dashboards", "folder of Grafana dashboard JSON files")
	out := fs.String("out", "docs/dashboards", "folder the PNGs are written to")
	requests := fs.Int("requests", 600, "trace requests the demo replays (1..100000)")
	span := fs.Duration("duration", 60*time.Second, "how long the replay's arrivals are spread over (10s..10m)")
	scrapeEvery := fs.Duration("scrape-interval", time.Second, "scrape interval (100ms..10s)")
	demoLog := fs.String("demo-log", "", "file for the demo's output (default: discarded)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *requests < 1 || *requests > 100000 || *span < 10*time.Second || *span > 10*time.Minute || *scrapeEvery < 100*time.Millisecond || *scrapeEvery > 10*time.Second {
		fmt.Fprintln(stderr, "render: --requests 1..100000, --duration 10s..10m, --scrape-interval 100ms..10s")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := render(ctx, stdout, options{*kvgate, *dir, *out, *requests, *span, *scrapeEvery, *demoLog}); err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 1
	}
	return 0
}

type options struct {
	kvgate, dir, out string
	requests         int
	span, every      time.Duration
	demoLog          string
}

func render(ctx context.Context, stdout io.Writer, o options) error {
	dashboards, err := loadDashboards(o.dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	log := io.Discard
	if o.demoLog != "" {
		f, err := os.Create(o.demoLog)
		if err != nil {
			return err
		}
		defer f.Close()
		log = f
	}
	// The demo replays for about o.span, plus start-up and a summary; it
	// must not run away.
	dctx, cancel := context.WithTimeout(ctx, o.span+5*time.Minute)
	defer cancel()
	demo, err := startDemo(dctx, o.kvgate, o.requests, o.span, log)
	if err != nil {
		return err
	}
	defer func() { demo.cmd.Process.Kill(); <-demo.done }()
	fmt.Fprintf(stdout, "render: demo running (extproc admin %s); scraping every %s while it replays %d requests over %s\n", demo.admin, o.every, o.requests, o.span)

	st := newMemStore()
	start := time.Now()
	scrapes, engines, err := scrapeUntilDone(dctx, st, demo, o.every)
	if err != nil {
		return err
	}
	end := time.Now()
	if demo.err != nil {
		return fmt.Errorf("kvgate-lab demo failed: %v (see --demo-log)", demo.err)
	}
	fmt.Fprintf(stdout, "render: %d scrapes of the extproc and %d engines over %s\n", scrapes, engines, end.Sub(start).Round(time.Second))

	eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * o.every})
	w := window{start: start, end: end, step: o.every, rateInterval: max(4*o.every, 10*time.Second)}
	for _, db := range dashboards {
		path := filepath.Join(o.out, db.name+".png")
		n, withData, err := renderDashboard(ctx, eng, st, db.d, w, path)
		if err != nil {
			return fmt.Errorf("%s: %w", db.name, err)
		}
		if withData == 0 {
			// The demo runs no kvagent or planner: a picture of empty
			// panels would show nothing, so none is written.
			if err := os.Remove(path); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "render: %s: none of its %d panels has data in the demo; no picture\n", db.name, n)
			continue
		}
		fmt.Fprintf(stdout, "render: %s: %d panels, %d with data\n", path, n, withData)
	}
	return nil
}

// scrapeUntilDone scrapes the extproc and the engines it routes to every
// interval until the demo exits.
func scrapeUntilDone(ctx context.Context, st *memStore, demo *demoProcess, every time.Duration) (scrapes, engines int, err error) {
	ext := target{url: "http://" + demo.admin + "/metrics", job: "kvgate-extproc", instance: demo.admin, namespace: "kvgate-demo"}
	tick := time.NewTicker(every)
	defer tick.Stop()
	failures := 0
	for {
		now := time.Now()
		fams, err := scrapeOnce(ctx, st, ext, now)
		switch {
		case err == nil:
			scrapes++
			eps := engineTargets(fams)
			engines = max(engines, len(eps))
			for _, ep := range eps {
				tg := target{url: "http://" + ep + "/metrics", job: "vllm", instance: ep, namespace: "kvgate-demo"}
				if _, err := scrapeOnce(ctx, st, tg, now); err != nil {
					failures++
				}
			}
		default:
			failures++
		}
		select {
		case <-demo.done:
			if scrapes < 5 {
				return scrapes, engines, fmt.Errorf("only %d successful scrapes before the demo exited (%d failures)", scrapes, failures)
			}
			return scrapes, engines, nil
		case <-ctx.Done():
			return scrapes, engines, ctx.Err()
		case <-tick.C:
		}
	}
}

type namedDashboard struct {
	name string
	d    *inventory.Dashboard
}

func loadDashboards(dir string) ([]namedDashboard, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("no dashboards in " + dir)
	}
	var out []namedDashboard
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		d, err := inventory.ReadDashboard(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, namedDashboard{name: strings.TrimPrefix(strings.TrimSuffix(filepath.Base(path), ".json"), "kvgate-"), d: d})
	}
	return out, nil
}
