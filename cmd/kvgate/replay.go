package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/kvgate/kvgate/e2e/replay"
)

func init() {
	register("replay", command{
		summary: "replay a Mooncake trace on simulated engines, comparing routing policies",
		run:     runReplay,
	})
}

func runReplay(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tracePath := fs.String("trace", "", "Mooncake JSONL trace (timestamp ms, input_length, output_length, hash_ids); default: the first 1000 requests of Mooncake's conversation trace, embedded in the binary")
	workers := fs.Int("workers", 8, "simulated engines in the fleet")
	blockSize := fs.Int("block-size", replay.TraceBlockSize, "engine KV block size in tokens")
	gpuBlocks := fs.Int("gpu-blocks", 0, "KV cache capacity per engine in blocks (0: 1 Mi tokens, the Dynamo mocker's 16384×64)")
	rateScale := fs.Float64("rate-scale", 1, "multiply the trace's arrival rate")
	compression := fs.Float64("time-compression", 1, "play the trace this many times faster on engines this many times faster")
	limit := fs.Int("limit", 0, "replay only the first N requests (0: all)")
	policies := fs.String("policies", strings.Join(replay.AllPolicies, ","), "comma-separated policies to compare")
	seed := fs.Uint64("seed", 1, "seed for random routing and tie-breaks")
	speedup := fs.Float64("speedup", 1, "engine speed-up (divides every step's duration)")
	plotDir := fs.String("plot", "", "write SVG charts (TTFT CDF, hit ratio over time) into this directory")
	asJSON := fs.Bool("json", false, "print exactly one JSON object instead of a table")
	gateway := fs.String("gateway", "", "replay live over HTTP through this gateway (e.g. http://127.0.0.1:8080: Envoy with kvgate extproc in front of real engines or kvgate enginesim), wall clock, instead of in-process; reported as the policy \"live\"")
	model := fs.String("model", "qwen3", "with --gateway: the served model name to request")
	maxTokens := fs.Int("max-tokens", 0, "with --gateway: cap each request's output tokens (0: the trace's)")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "kvgate replay: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *workers < 1 {
		fmt.Fprintf(stderr, "kvgate replay: --workers %d: want at least 1\n", *workers)
		return 2
	}
	if *limit < 0 {
		fmt.Fprintf(stderr, "kvgate replay: --limit %d is negative\n", *limit)
		return 2
	}
	opt := replay.Options{
		Workers: *workers, BlockSize: *blockSize, GPUBlocks: *gpuBlocks,
		RateScale: *rateScale, TimeCompression: *compression, SpeedUp: *speedup,
		Seed: *seed,
	}
	for _, p := range strings.Split(*policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			opt.Policies = append(opt.Policies, p)
		}
	}
	if err := opt.Validate(); err != nil {
		fmt.Fprintf(stderr, "kvgate replay: %v\n", err)
		return 2
	}
	if f, ok := stderr.(*os.File); ok && isTerminal(f) {
		opt.Progress = progressBar(f)
	}
	reqs, traceName, err := loadTrace(*tracePath, *limit)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate replay: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var res *replay.Result
	if *gateway != "" {
		res, err = liveResult(ctx, *gateway, traceName, reqs, liveOptions{model: *model, compression: *compression * *rateScale, maxTokens: *maxTokens})
	} else {
		res, err = replay.Run(ctx, traceName, reqs, opt)
	}
	if opt.Progress != nil {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil {
		fmt.Fprintf(stderr, "kvgate replay: %v\n", err)
		return 1
	}
	if *plotDir != "" {
		if err := replay.WritePlots(*plotDir, res); err != nil {
			fmt.Fprintf(stderr, "kvgate replay: %v\n", err)
			return 1
		}
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(res); err != nil {
			fmt.Fprintf(stderr, "kvgate replay: writing output: %v\n", err)
			return 1
		}
		return 0
	}
	if err := replay.WriteTable(stdout, res); err != nil {
		fmt.Fprintf(stderr, "kvgate replay: writing output: %v\n", err)
		return 1
	}
	return 0
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar redraws one line on a terminal: the policy and a 40-cell bar.
func progressBar(w io.Writer) func(policy string, routed, total int) {
	return func(policy string, routed, total int) {
		const cells = 40
		n := 0
		if total > 0 {
			n = routed * cells / total
		}
		fmt.Fprintf(w, "\r%-14s [%s%s] %d/%d", policy, strings.Repeat("#", n), strings.Repeat(".", cells-n), routed, total)
	}
}

// liveResult replays through a gateway and reports it in replay's schema,
// with the one policy the gateway runs named "live"; workers is the number
// of workers kvgate reported choosing.
func liveResult(ctx context.Context, gateway, trace string, reqs []replay.TraceRequest, o liveOptions) (*replay.Result, error) {
	pr, results, err := liveReplay(ctx, strings.TrimSuffix(gateway, "/"), reqs, o)
	if err != nil {
		return nil, err
	}
	workers := map[string]bool{}
	for _, r := range results {
		if r.err != nil {
			return nil, fmt.Errorf("request through %s failed: %w", gateway, r.err)
		}
		if r.chosen != "" {
			workers[r.chosen] = true
		}
	}
	return &replay.Result{
		Trace: trace, Workers: len(workers), Requests: len(reqs),
		IdealHitRatio: replay.IdealHitRatio(reqs, replay.TraceBlockSize),
		Policies:      map[string]*replay.PolicyResult{"live": pr}, Order: []string{"live"},
	}, nil
}
