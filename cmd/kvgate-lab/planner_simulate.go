package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/lab/plannersim"
	"github.com/kvgate/kvgate/lab/replay"
	"github.com/kvgate/kvgate/planner-sidecar/forecast"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// defaultAzureTrace is relative to the repository root; the Mooncake
// default is the slice embedded in the binary (demo_trace.go).
const defaultAzureTrace = "lab/plannersim/testdata/AzureLLMInferenceTrace_conv.csv"

func init() {
	register("planner-simulate", cli.Command{
		Summary: "the planner, a threshold policy and static fleets on the same load in simulated time (--shape sine|azure|mooncake|bursts|weekly|code)",
		Run:     runPlannerSimulate,
	})
}

// runPlannerSimulate is `kvgate-lab planner-simulate` (it was `kvgate
// planner simulate` before the workshop left the production binary): the
// planner, a threshold (HPA-style) policy and static
// fleets on the same load in simulated time.
func runPlannerSimulate(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate-lab planner-simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	shape := fs.String("shape", "sine", "load shape: azure (Azure LLM inference trace 2023 CSV), sine (Dynamo-style sinusoidal), mooncake (Mooncake JSONL trace), or a generated one: bursts, weekly, code (drawn from --seed)")
	trace := fs.String("trace", "", "trace file for --shape azure or mooncake (default: "+defaultAzureTrace+" from the repository root / the first 1000 requests of Mooncake's conversation trace, embedded)")
	limit := fs.Int("limit", 0, "use only the first N requests of the trace (0: all)")
	timeScale := fs.Float64("time-scale", 1, "play the load this many times faster (arrival times divided; the same requests in less time)")
	rateScale := fs.Float64("rate-scale", 1, "multiply the arrival rate on the same timeline (thinning below 1, copies above)")
	s := plannersim.DefaultSine
	fs.DurationVar(&s.Duration, "sine-duration", s.Duration, "sine: length of the load")
	fs.DurationVar(&s.Period, "sine-period", s.Period, "sine: period of the request rate")
	fs.Float64Var(&s.MinRate, "sine-min-rate", s.MinRate, "sine: lowest request rate (req/s)")
	fs.Float64Var(&s.MaxRate, "sine-max-rate", s.MaxRate, "sine: highest request rate (req/s)")
	fs.IntVar(&s.ISL, "isl", s.ISL, "sine: input tokens per request")
	fs.IntVar(&s.OSL, "osl", s.OSL, "sine: output tokens per request")
	mode := fs.String("mode", string(plannersim.Disaggregated), "fleet: disagg (prefill and decode pools) or agg (one pool)")
	ttft := fs.Duration("ttft", plannersim.DefaultTTFT, "SLA target for time to first token")
	itl := fs.Duration("itl", plannersim.DefaultITL, "SLA target for mean inter-token latency")
	delay := fs.Duration("provision-delay", plannersim.DefaultProvisionDelay, "from a scale-up to a ready replica")
	interval := fs.Duration("interval", plannersim.DefaultInterval, "between policy decisions (simulated)")
	gpus := fs.Int("gpus-per-replica", 1, "GPUs each replica bills")
	maxReplicas := fs.Int("max-replicas", plannersim.DefaultMaxReplicas, "largest size of a pool")
	forecaster := fs.String("forecaster", plannersim.DefaultPlannerForecaster, "the planner's forecaster: constant, ewma, holt or kalman")
	damping := fs.Duration("trend-damping", plannersim.DefaultForecastParams.TrendDamping, "holt's trend damping time constant (0: undamped)")
	upUtil := fs.Float64("up-utilization", 0, "the planner's scale-up utilisation (0: the simulator's default 0.9)")
	downUtil := fs.Float64("down-utilization", 0, "the planner's scale-down utilisation (0: the simulator's default 0.7)")
	horizon := fs.Duration("forecast-horizon", 0, "the planner's forecast horizon (0: provisioning delay + interval)")
	errHeadroom := fs.Float64("error-headroom", 0, "the planner sizes for forecast + k × its recent mean absolute forecast error; this is k (0: the simulator's default 1; negative: off)")
	peakHold := fs.Duration("peak-hold", 0, "the planner never scales below what the highest rate seen over this window needs (0: provisioning delay + interval; negative: off)")
	backlogDrain := fs.Duration("backlog-drain", 0, "the planner adds capacity to serve waiting requests within this time (0: the provisioning delay; negative: off)")
	peakMemory := fs.Duration("peak-memory", 0, "below its recent high, the planner plans for no more work than it saw over this window (0: off)")
	oracle := fs.Bool("oracle", false, "also run the planner with exact forecasts read from the load (planner-oracle), to split forecast error from the rest")
	warmUp := fs.Duration("warm-up", -1, "unscored lead of the load, in simulated time after scaling (default: a sixth of the period for sine, none for traces)")
	statics := fs.String("static", "", "static fleets to run, comma-separated: 4p2d (disagg) or 6 (agg); default: search for the cheapest one reaching 99 % SLA attainment")
	seed := fs.Uint64("seed", 1, "seed for the sine's arrivals and --rate-scale's sampling")
	asJSON := fs.Bool("json", false, `print exactly one JSON object {"policies":{"<name>":{"sla_attainment","gpu_hours","ttft_p90_ms","itl_p90_ms","scale_events"}}}`)
	plotDir := fs.String("plot", "", "write PNG charts (replicas, TTFT and ITL over time per policy) into this directory")
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kvgate-lab planner-simulate: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() != 0 {
		return bad("unexpected arguments %q", fs.Args())
	}
	if *limit < 0 {
		return bad("--limit %d is negative", *limit)
	}
	if math.IsNaN(*errHeadroom) || *errHeadroom > 10 {
		return bad("--error-headroom %v: want at most 10 (negative: off)", *errHeadroom)
	}
	if *peakMemory < 0 {
		return bad("--peak-memory %v is negative", *peakMemory)
	}
	if *damping < 0 {
		return bad("--trend-damping %v is negative", *damping)
	}
	m, err := plannersim.ParseMode(*mode)
	if err != nil {
		return bad("--mode: %v", err)
	}
	cfg := plannersim.Config{
		Mode: m, GPUsPerReplica: *gpus, ProvisionDelay: *delay, Interval: *interval,
		TTFT: *ttft, ITL: *itl, MaxReplicas: *maxReplicas,
	}
	if *delay == 0 {
		cfg.ProvisionDelay = plannersim.NoProvisionDelay
	} else if *delay < 0 {
		return bad("--provision-delay %v is negative", *delay)
	}
	if err := cfg.Validate(); err != nil {
		return bad("%v", err)
	}
	var load plannersim.Load
	switch *shape {
	case "sine":
		if *trace != "" {
			return bad("--trace is for --shape azure or mooncake")
		}
		s.Seed = *seed
		s.WarmUp = 0 // set on the load below
		if *warmUp < 0 && s.Duration > s.Period/6 {
			// The first sixth of a period (the rate rising from its
			// minimum), whatever the flags made it: DefaultSine's 10 min.
			s.WarmUp = s.Period / 6
		}
		load, err = s.Load()
	case "azure":
		load, err = plannersim.LoadAzure(orDefault(*trace, defaultAzureTrace), *limit)
	case "mooncake":
		if *trace != "" {
			load, err = plannersim.LoadMooncake(*trace, *limit)
			break
		}
		var reqs []replay.TraceRequest
		var name string
		if reqs, name, err = loadTrace("", *limit); err == nil {
			load = plannersim.FromMooncake(name, reqs)
		}
	case "bursts", "weekly", "code":
		var g plannersim.Shape
		if g, err = plannersim.GeneratedShape(*shape, *seed); err == nil {
			load, err = g.Load()
		}
	default:
		return bad("--shape %q: want azure, sine, mooncake, bursts, weekly or code", *shape)
	}
	if err != nil {
		return bad("%v", err)
	}
	if *timeScale != 1 || *rateScale != 1 {
		if err := load.Scale(*timeScale, *rateScale, *seed); err != nil {
			return bad("%v", err)
		}
	}
	if *warmUp >= 0 {
		load.WarmUp = *warmUp
	}
	if err := load.Validate(); err != nil {
		return bad("%v", err)
	}
	opt := plannersim.CompareOptions{Forecaster: *forecaster, ForecastParams: forecast.Params{TrendDamping: *damping}}
	opt.Planner.UpUtilization, opt.Planner.DownUtilization, opt.Planner.Horizon = *upUtil, *downUtil, *horizon
	opt.Planner.ErrorHeadroom, opt.Planner.PeakHold, opt.Planner.BacklogDrain = *errHeadroom, *peakHold, *backlogDrain
	opt.Planner.PeakMemory, opt.Oracle = *peakMemory, *oracle
	if *statics != "" {
		if opt.Statics, err = parseStatics(*statics, m); err != nil {
			return bad("--static: %v", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Compare runs every policy before it returns (a minute or more on
	// the default sine); say so on stderr, which --json leaves clean.
	static := "the cheapest static fleet reaching 99 % SLA attainment (searched)"
	if *statics != "" {
		static = "static fleets " + *statics
	}
	fmt.Fprintf(stderr, "kvgate-lab planner-simulate: simulating %d requests of %s under the planner, a threshold policy and %s; a minute or more…\n",
		len(load.Requests), load.Name, static)
	began := time.Now()
	// One line per fleet as its simulation finishes (Compare runs them in
	// parallel and returns only when all are done).
	done := 0
	opt.OnResult = func(r *plannersim.Result) {
		done++
		fmt.Fprintf(stderr, "kvgate-lab planner-simulate: [%d] %s: SLA attainment %.2f %%, %.2f GPU-hours, TTFT p90 %.0f ms, ITL p90 %.1f ms (%s)\n",
			done, r.Policy, 100*r.SLAAttainment, r.GPUHours, r.TTFTP90Ms, r.ITLP90Ms, time.Since(began).Round(100*time.Millisecond))
	}
	rep, err := plannersim.Compare(ctx, cfg, &load, opt)
	if err != nil {
		fmt.Fprintf(stderr, "kvgate-lab planner-simulate: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "kvgate-lab planner-simulate: %d simulations done in %s\n", len(rep.Results), time.Since(began).Round(100*time.Millisecond))
	if *plotDir != "" {
		began := time.Now()
		if err := plannersim.WritePlots(*plotDir, rep); err != nil {
			fmt.Fprintf(stderr, "kvgate-lab planner-simulate: %v\n", err)
			return 1
		}
		if err := cli.ReportWritten(stderr, *plotDir, began); err != nil {
			fmt.Fprintf(stderr, "kvgate-lab planner-simulate: %v\n", err)
			return 1
		}
	}
	if *asJSON {
		if err := rep.WriteJSON(stdout); err != nil {
			fmt.Fprintf(stderr, "kvgate-lab planner-simulate: %v\n", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stdout, "load: %s, %d requests; fleet %s, provisioning %v, decisions every %v; SLA TTFT ≤ %v, ITL ≤ %v\n\n",
		load.Name, rep.Requests, m, *delay, *interval, *ttft, *itl)
	plannersim.WriteTable(stdout, rep)
	return 0
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// maxStatics bounds --static.
const maxStatics = 64

// parseStatics reads "4p2d,5p2d" (disaggregated) or "4,6" (aggregated).
func parseStatics(s string, m plannersim.Mode) ([]map[string]int, error) {
	var out []map[string]int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if len(out) == maxStatics {
			return nil, fmt.Errorf("more than %d fleets", maxStatics)
		}
		if m == plannersim.Aggregated {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 || n > 1024 {
				return nil, fmt.Errorf("%q: want a replica count in [1, 1024]", f)
			}
			out = append(out, map[string]int{plan.PoolAggregated: n})
			continue
		}
		ps, ds, ok := strings.Cut(strings.TrimSuffix(f, "d"), "p")
		p, perr := strconv.Atoi(ps)
		d, derr := strconv.Atoi(ds)
		if !ok || !strings.HasSuffix(f, "d") || perr != nil || derr != nil || p < 1 || d < 1 || p > 1024 || d > 1024 {
			return nil, fmt.Errorf("%q: want <prefill>p<decode>d, like 4p2d, each in [1, 1024]", f)
		}
		out = append(out, map[string]int{plan.PoolPrefill: p, plan.PoolDecode: d})
	}
	if len(out) == 0 {
		return nil, errors.New("no fleet listed")
	}
	return out, nil
}
