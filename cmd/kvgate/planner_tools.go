package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/planner-sidecar/journal"
	"github.com/kvgate/kvgate/planner-sidecar/profiler"
)

// The planner's tools, under its name: `kvgate planner profile` measures
// an engine, `kvgate planner explain` prints a journaled decision.

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
