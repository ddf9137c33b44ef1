package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/lab/replay"
	"github.com/kvgate/kvgate/lab/workload"
	"github.com/kvgate/kvgate/picker"
)

func init() {
	register("replay", cli.Command{
		Summary: "replay a Mooncake trace on simulated engines, comparing routing policies",
		Run:     runReplay,
	})
}

func runReplay(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate-lab replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tracePath := fs.String("trace", "", "Mooncake JSONL trace (timestamp ms, input_length, output_length, hash_ids), or an Azure LLM inference trace .csv (replayed with every prompt unique); default: the first 1000 requests of Mooncake's conversation trace, embedded in the binary")
	mix := fs.String("mix", "", "replay a generated workload instead of --trace: one of "+strings.Join(append(append([]string(nil), workload.TuningMixes...), append(workload.HeldOutMixes, workload.OverloadMixes...)...), ", ")+" (lab/workload; --limit requests, default 1500)")
	workers := fs.Int("workers", 8, "simulated engines in the fleet")
	blockSize := fs.Int("block-size", replay.TraceBlockSize, "engine KV block size in tokens")
	gpuBlocks := fs.Int("gpu-blocks", 0, "KV cache capacity per engine in blocks (0: 1 Mi tokens, the Dynamo mocker's 16384×64)")
	rateScale := fs.Float64("rate-scale", 1, "multiply the trace's arrival rate")
	hostBlocks := fs.Int("host-blocks", 0, "give each engine a node-local host KV tier of this many blocks (kvagent's store and policies, in process; 0: none)")
	hostGBps := fs.Float64("host-gbps", 0, "with --host-blocks: host-to-GPU copy bandwidth in GB/s (0: enginesim's default)")
	compression := fs.Float64("time-compression", 1, "play the trace this many times faster on engines this many times faster")
	limit := fs.Int("limit", 0, "replay only the first N requests (0: all)")
	policies := fs.String("policies", strings.Join(replay.AllPolicies, ","), "comma-separated policies to compare (also "+replay.PolicyKvgateFlow+": kvgate behind the extproc's flow-control queue, not in the default set)")
	seed := fs.Uint64("seed", 1, "seed for random routing and tie-breaks")
	speedup := fs.Float64("speedup", 1, "engine speed-up (divides every step's duration)")
	plotDir := fs.String("plot", "", "write SVG charts (TTFT CDF, hit ratio over time) into this directory")
	asJSON := fs.Bool("json", false, "print exactly one JSON object instead of a table")
	gateway := fs.String("gateway", "", "replay live over HTTP through this gateway (e.g. http://127.0.0.1:8080: Envoy with kvgate extproc in front of real engines or kvgate-lab enginesim), wall clock, instead of in-process; reported as the policy \"live\"")
	model := fs.String("model", "qwen3", "with --gateway: the served model name to request")
	maxTokens := fs.Int("max-tokens", 0, "with --gateway: cap each request's output tokens (0: the trace's)")
	sweep := fs.Bool("sweep", false, "find each policy's SLA capacity: the highest --rate-scale with TTFT p90 within --ttft-sla (and ITL p90 within --itl-sla), by bisection; prints figures at 1×, at capacity and at 4/3 of it")
	ttftSLA := fs.Duration("ttft-sla", 2*time.Second, "the TTFT SLA: with --sweep the TTFT p90 bound; in every replay the bound of goodput and SLA attainment")
	itlSLA := fs.Duration("itl-sla", 0, "with --sweep: the ITL p90 bound (0: none)")
	abandonAfter := fs.Float64("abandon-after", 0, "clients abandon a request without a first token this many × --ttft-sla after its arrival, cancelling it (a miss; lab/replay/abandon.go); 0: they wait for ever")
	overload := fs.String("overload", "", "overload sweep (issue 26): find --capacity-of's SLA capacity (≥ 90 % of requests within --ttft-sla, with clients abandoning at --abandon-after, default 1), then replay every policy at these comma-separated multiples of it (e.g. 1,1.5,2,3), each replay covering --overload-span of arrivals; prints a Markdown table")
	capacityOf := fs.String("capacity-of", replay.PolicyKvgateFlow, "with --overload: the policy whose capacity the multiples are of")
	overloadSpan := fs.Duration("overload-span", 30*time.Second, "with --overload: the span of arrivals each replay covers (a --mix is generated as long as needed)")
	flowSteer := fs.Bool("flow-steer", false, "kvgate-flow: leave saturated workers out of the pick while any worker has room")
	flowPrefill := fs.Int64("flow-max-queued-prefill", 0, "kvgate-flow: saturation bound on queued prefill tokens per worker (0: extproc's default)")
	flowInflight := fs.Int("flow-max-inflight", 0, "kvgate-flow: saturation bound on requests kvgate routed to a worker and not finished (0: extproc's default, off)")
	flowMaxWait := fs.Duration("flow-max-wait", 0, "kvgate-flow: how long a request may wait in the queue before a 429 (0: extproc's default)")
	flowWaiting := fs.Int("flow-max-engine-waiting", 0, "kvgate-flow: saturation bound on the engine's waiting requests (0: extproc's default)")
	flowDeadline := fs.String("flow-deadline-header", "", "kvgate-flow: the extproc's flow_control.deadline_header; with --abandon-after the clients send their patience there as a TTFT budget (\"\": extproc's default, x-slo-ttft-ms; none: they send none, every request waits up to max_wait)")
	flowShare := fs.Float64("flow-deadline-queue-share", 0, "kvgate-flow: share of a request's TTFT budget it may wait in the queue (0: extproc's default)")
	flowRequests := fs.Int("flow-max-requests", 0, "kvgate-flow: bound on the requests waiting in the queue (0: extproc's default)")
	flowPoolFraction := fs.Float64("flow-pool-fraction", 0, "kvgate-flow: share of the workers that must be saturated for requests to wait (0: extproc's default, 1 = every one)")
	flowPoolMean := fs.Float64("flow-pool-mean-score", 0, "kvgate-flow: mean worker score (engine waiting ÷ bound, KV usage ÷ bound) at which requests wait (0: extproc's default, 3; 1000: off)")
	tolerance := fs.Float64("sweep-tolerance", 0.05, "with --sweep: stop bisecting when the bracket's hi/lo is within 1+this")
	var terms termFlags
	fs.Var(&terms, "term", "switch one of the kvgate policies' picker terms (repeatable): NAME=off, NAME=on or NAME=WEIGHT, NAME one of "+
		strings.Join(replay.TermNames(), ", ")+" (picker/terms.go); prints each term's mean column after the table")
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "kvgate-lab replay: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *workers < 1 {
		fmt.Fprintf(stderr, "kvgate-lab replay: --workers %d: want at least 1\n", *workers)
		return 2
	}
	if *limit < 0 {
		fmt.Fprintf(stderr, "kvgate-lab replay: --limit %d is negative\n", *limit)
		return 2
	}
	opt := replay.Options{
		Workers: *workers, BlockSize: *blockSize, GPUBlocks: *gpuBlocks,
		RateScale: *rateScale, TimeCompression: *compression, SpeedUp: *speedup,
		Seed: *seed, HostBlocks: *hostBlocks, HostToGPUGBps: *hostGBps,
		GoodputSLA: *ttftSLA, AbandonAfter: *abandonAfter, FlowSteer: *flowSteer,
	}
	if *flowPrefill != 0 || *flowWaiting != 0 || *flowMaxWait != 0 || *flowInflight != 0 || *flowDeadline != "" || *flowShare != 0 || *flowRequests != 0 || *flowPoolFraction != 0 || *flowPoolMean != 0 {
		opt.Flow = &extprocconfig.FlowControl{MaxWait: yamlconf.Duration(*flowMaxWait), DeadlineHeader: *flowDeadline, DeadlineQueueShare: *flowShare, MaxRequests: *flowRequests,
			Saturation: extprocconfig.FlowSaturation{MaxQueuedPrefillTokens: *flowPrefill, MaxEngineWaiting: *flowWaiting, MaxInflight: *flowInflight, PoolFraction: *flowPoolFraction, PoolMeanScore: *flowPoolMean}}
	}
	for _, p := range strings.Split(*policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			opt.Policies = append(opt.Policies, p)
		}
	}
	if len(terms) > 0 {
		if *gateway != "" {
			fmt.Fprintln(stderr, "kvgate-lab replay: --term switches the in-process picker: drop --gateway (configure extproc.picker.terms instead)")
			return 2
		}
		cfg := picker.DefaultConfig()
		for _, t := range terms {
			if err := replay.SwitchTerm(&cfg, t); err != nil {
				fmt.Fprintf(stderr, "kvgate-lab replay: %v\n", err)
				return 2
			}
		}
		opt.Kvgate = &cfg
	}
	if err := opt.Validate(); err != nil {
		fmt.Fprintf(stderr, "kvgate-lab replay: %v\n", err)
		return 2
	}
	if f, ok := stderr.(*os.File); ok && isTerminal(f) {
		opt.Progress = progressBar(f)
	}
	reqs, traceName, err := loadReplayWorkload(*tracePath, *mix, *limit)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate-lab replay: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *overload != "" {
		if *sweep || *gateway != "" || *rateScale != 1 {
			fmt.Fprintln(stderr, "kvgate-lab replay: --overload replays in process and sweeps the rate: drop --sweep, --gateway and --rate-scale")
			return 2
		}
		mults, err := parseMultiples(*overload)
		if err != nil {
			fmt.Fprintf(stderr, "kvgate-lab replay: --overload: %v\n", err)
			return 2
		}
		opt.Progress = nil
		src := func(rate float64, span time.Duration) ([]replay.TraceRequest, error) {
			return replay.CutSpan(reqs, rate, span), nil
		}
		if *mix != "" {
			src = mixSource(*mix)
		}
		return runOverload(ctx, traceName, src, replay.OverloadOptions{Replay: opt, Multiples: mults, CapacityOf: *capacityOf, Span: *overloadSpan, Tolerance: 0.1}, *asJSON, stdout, stderr)
	}
	if *sweep {
		if *gateway != "" || *rateScale != 1 {
			fmt.Fprintln(stderr, "kvgate-lab replay: --sweep replays in process and sweeps the rate: drop --gateway and --rate-scale")
			return 2
		}
		opt.Progress = nil
		return runSweep(ctx, traceName, reqs, replay.SweepOptions{Replay: opt, TTFTSLA: *ttftSLA, ITLSLA: *itlSLA, Tolerance: *tolerance},
			*plotDir, *asJSON, stdout, stderr)
	}
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
		fmt.Fprintf(stderr, "kvgate-lab replay: %v\n", err)
		return 1
	}
	if *plotDir != "" {
		paths, err := replay.WritePlots(*plotDir, res)
		if err != nil {
			fmt.Fprintf(stderr, "kvgate-lab replay: %v\n", err)
			return 1
		}
		for _, p := range paths {
			fmt.Fprintf(stderr, "wrote %s\n", p)
		}
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(res); err != nil {
			fmt.Fprintf(stderr, "kvgate-lab replay: writing output: %v\n", err)
			return 1
		}
		return 0
	}
	if err := replay.WriteTable(stdout, res); err != nil {
		fmt.Fprintf(stderr, "kvgate-lab replay: writing output: %v\n", err)
		return 1
	}
	if len(terms) > 0 {
		fmt.Fprintf(stdout, "\nkvgate terms switched: %s\n", strings.Join(terms, " "))
		if err := replay.WriteTermMeans(stdout, res); err != nil {
			fmt.Fprintf(stderr, "kvgate-lab replay: writing output: %v\n", err)
			return 1
		}
	}
	return 0
}

// termFlags collects repeated --term NAME=VALUE arguments.
type termFlags []string

func (f *termFlags) String() string { return strings.Join(*f, " ") }

func (f *termFlags) Set(v string) error {
	if len(*f) >= 64 {
		return errors.New("at most 64 --term switches")
	}
	*f = append(*f, v)
	return nil
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
		WallClock: true,
	}, nil
}

// runSweep runs a capacity sweep, printing one progress line per replay on
// stderr (a sweep is dozens of replays) and where each plot went.
func runSweep(ctx context.Context, trace string, reqs []replay.TraceRequest, o replay.SweepOptions, plotDir string, asJSON bool, stdout, stderr io.Writer) int {
	o.Progress = func(line string) { fmt.Fprintln(stderr, line) }
	res, err := replay.Sweep(ctx, trace, reqs, o)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate-lab replay: %v\n", err)
		if errors.Is(err, context.Canceled) {
			return 1
		}
		return 2
	}
	if plotDir != "" {
		paths, err := replay.WriteSweepPlots(plotDir, "", res)
		for _, p := range paths {
			fmt.Fprintf(stderr, "wrote %s\n", p)
		}
		if err != nil {
			fmt.Fprintf(stderr, "kvgate-lab replay: %v\n", err)
			return 1
		}
	}
	if asJSON {
		if err := json.NewEncoder(stdout).Encode(res); err != nil {
			fmt.Fprintf(stderr, "kvgate-lab replay: writing output: %v\n", err)
			return 1
		}
		return 0
	}
	if err := replay.WriteSweepTable(stdout, res); err != nil {
		fmt.Fprintf(stderr, "kvgate-lab replay: writing output: %v\n", err)
		return 1
	}
	return 0
}

// loadReplayWorkload is the requests to replay and their name: a generated
// mix, an Azure CSV (no prompt content: every block distinct) or a
// Mooncake trace.
func loadReplayWorkload(tracePath, mix string, limit int) ([]replay.TraceRequest, string, error) {
	switch {
	case mix != "":
		if limit == 0 {
			limit = 1500
		}
		m, err := workload.Named(mix, limit)
		if err != nil {
			return nil, "", err
		}
		reqs, err := workload.Generate(m)
		return reqs, "mix " + mix, err
	case strings.HasSuffix(tracePath, ".csv"):
		f, err := os.Open(tracePath)
		if err != nil {
			return nil, "", fmt.Errorf("trace: %w", err)
		}
		defer f.Close()
		reqs, err := workload.FromAzure(f, tracePath, limit)
		return reqs, tracePath, err
	}
	return loadTrace(tracePath, limit)
}

// parseMultiples reads --overload's comma-separated multiples.
func parseMultiples(v string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(v, ",") {
		m, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, fmt.Errorf("multiple %q: %w", f, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// mixSource generates a named mix as long as a replay needs: requests
// arriving within span at rate × the mix's rate. A mix's first n requests
// do not depend on how many follow, so a longer trace extends a shorter.
func mixSource(name string) replay.TraceSource {
	var have []replay.TraceRequest
	return func(rate float64, span time.Duration) ([]replay.TraceRequest, error) {
		m, err := workload.Named(name, 1)
		if err != nil {
			return nil, err
		}
		// Enough for the span with room for Poisson noise; bursts may need
		// more, so the trace doubles until it covers the span.
		n := int(math.Ceil(m.Rate*rate*span.Seconds()*1.3)) + 200
		for {
			if n > workload.MaxRequests {
				return nil, fmt.Errorf("mix %s at ×%v over %v needs more than %d requests", name, rate, span, workload.MaxRequests)
			}
			if len(have) < n {
				if m, err = workload.Named(name, n); err != nil {
					return nil, err
				}
				if have, err = workload.Generate(m); err != nil {
					return nil, err
				}
			}
			if cut := replay.CutSpan(have, rate, span); len(cut) < len(have) {
				return cut, nil
			}
			n = 2 * len(have)
		}
	}
}

// runOverload runs an overload sweep, printing one progress line per
// replay on stderr.
func runOverload(ctx context.Context, trace string, src replay.TraceSource, o replay.OverloadOptions, asJSON bool, stdout, stderr io.Writer) int {
	o.Progress = func(line string) { fmt.Fprintln(stderr, line) }
	res, err := replay.Overload(ctx, trace, src, o)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate-lab replay: %v\n", err)
		if errors.Is(err, context.Canceled) {
			return 1
		}
		return 2
	}
	if asJSON {
		err = json.NewEncoder(stdout).Encode(res)
	} else {
		err = replay.WriteOverloadTable(stdout, res)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kvgate-lab replay: writing output: %v\n", err)
		return 1
	}
	return 0
}
