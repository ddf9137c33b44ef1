package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kvgate/kvgate/lab/plannersim"
)

func init() { registerBench("planner", benchPlanner) }

// Bench loads for the planner section. The Azure conversation trace is
// compressed mildly (2× faster) and multiplied 8× (86 req/s on average
// over 30 simulated minutes: a fleet of several replicas, where sizing
// matters, rather than the trace's own 5 req/s that one replica serves).
const (
	benchAzureTimeScale = 2
	benchAzureRateScale = 8
	// benchAzureWarmUp is the unscored lead, in the trace's own time: the
	// dynamic policies start from a cold 1P/1D fleet that the trace's
	// first minutes flood, and the requests queued in a saturated engine
	// take minutes to clear (8 simulated minutes; a planner in production
	// starts on a running fleet).
	benchAzureWarmUp = 16 * time.Minute
)

// benchPlanner compares the planner, the threshold policy and static
// fleets on a diurnal-like sine, the Azure trace and (as a stress row)
// a fast sine, with the cheapest static fleet reaching 99 % SLA
// attainment as the GPU-hour baseline, then backtests the forecasters on
// the Azure trace's per-interval request rate.
func benchPlanner(ctx context.Context, w io.Writer, _ time.Duration) error {
	fmt.Fprintln(w, "## Planner: SLA-driven sizing in simulated time")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Each replica is lab/enginesim's engine (vLLM-like scheduler, Dynamo mocker step times) in virtual time; prefill and decode pools (disaggregated), least-loaded routing, 120 s provisioning delay, a decision every 30 s, SLA TTFT ≤ 2 s and mean ITL ≤ 50 ms per request, 1 GPU per replica. GPU-hours bill ready, provisioning and draining replicas over the scored span. `× cheapest` is GPU-hours over those of the cheapest static fleet reaching 99 % attainment, found by search (every fleet tried is listed). The warm-up (simulated, not scored or billed) lets dynamic policies start from their own steady state rather than a cold 1P/1D fleet.")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "The planner is `plan.SLA` with a profile measured from the same timing model (`plannersim.ProfileFromTimingModel`) and the simulator's defaults (`plannersim.NewPlanner`): %s forecaster, its trend damped with a %v time constant; horizon = provisioning delay + interval (150 s: a replica asked for now serves from then until the next decision could add more); it provisions for the forecast plus %g × its recent mean absolute error at that horizon (the upper end of the forecast, not its mean); a scale-down never goes below what the current level, the forecast or the highest rate of the last 150 s needs (capacity shed now cannot be back sooner); waiting requests add the capacity to serve them within 120 s; scale up when the planned load needs more than %.0f %% and down when less than %.0f %% of its modelled SLA capacity, after 3 decisions in a row. Where the rate's own history shows a period (`forecast.Seasonal`: autocorrelation ≥ 0.8 at a lag with two whole periods in the history, after the autocorrelation has gone negative), the rate is forecast from the last periods (the level now plus the change over the same stretch a period ago) once those forecasts have been closer at the horizon than holt's. The threshold policy is a Kubernetes HPA (GPU utilisation 70 %%, queue 10/replica, KV 70 %%; 10 %% tolerance, 300 s scale-down stabilization). Aim (issue #7): ≥ 99 %% attainment at ≤ 0.8× the cheapest static fleet's GPU-hours, and fewer GPU-hours than the threshold policy at equal attainment.\n",
		plannersim.DefaultPlannerForecaster, plannersim.DefaultForecastParams.TrendDamping, plannersim.DefaultErrorHeadroom, 100*plannersim.DefaultPlannerUp, 100*plannersim.DefaultPlannerDown)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Why these loads: a planner is for load that moves on the scale of its reaction time or slower — daily cycles, trends, the minute-scale swings of a real trace. With a 120 s provisioning delay and 30 s decisions, a fifth of a 10-minute period passes before new capacity serves, so a 10-minute sine (the previous main row; Dynamo's own example uses a 150 s period with no provisioning delay at all) measures how a fleet fails under load it cannot follow; it stays below as a stress row. The main rows are a 60-minute sine (a diurnal swing compressed 24×, 6→60 req/s, ISL 3000 / OSL 150) and the Azure 2023 conversation trace played 2× faster with 8× its rate. Generated shapes (`plannersim.GeneratedShape`, seed 1) add bursts on a steady base, a week of diurnal cycles compressed (15-minute days, a lighter weekend) and a code-assistant mix (long prompts, ~25-token answers); the held-out rows (other seeds and parameters of each kind, and of the sine and the trace) were never used to choose a rule or a default.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Each table has a `planner-oracle` row: the same planner with exact forecasts read from the load (`plannersim.NewOraclePlanner`: every interval's rate and mean lengths a horizon ahead, so no forecast error and no error headroom). The gap between planner and oracle is what forecasting costs; what the oracle itself misses belongs to the provisioning delay, the 30 s decisions (a burst inside an interval is seen as its mean), the sizing model (pools sized to 100 % of the profile's throughput at the SLA) and the scale-down gates.")
	azure, err := plannersim.LoadAzure(defaultAzureTrace, 0)
	if err != nil {
		return err
	}
	rateLoad := azure // the backtest uses the trace's own timeline
	rateLoad.Requests = append([]plannersim.Request(nil), azure.Requests...)
	azure.WarmUp = benchAzureWarmUp
	if err := azure.Scale(benchAzureTimeScale, benchAzureRateScale, 1); err != nil {
		return err
	}
	diurnal, err := plannersim.DefaultSine.Load()
	if err != nil {
		return err
	}
	stress, err := plannersim.StressSine.Load()
	if err != nil {
		return err
	}
	// The stress sine again with two periods of warm-up: what the
	// planner's seasonal detection needs before it can forecast the turns.
	stressLong := plannersim.StressSine
	stressLong.Duration, stressLong.WarmUp = 40*time.Minute, 20*time.Minute
	stress2, err := stressLong.Load()
	if err != nil {
		return err
	}
	// Held out: parameters and seeds the planner's rules were never
	// tuned on.
	heldSine, err := plannersim.Sine{Duration: 60 * time.Minute, Period: 45 * time.Minute, MinRate: 10, MaxRate: 50, ISL: 2000, OSL: 300, Seed: 11, WarmUp: 45 * time.Minute / 6}.Load()
	if err != nil {
		return err
	}
	heldAzure, err := plannersim.LoadAzure(defaultAzureTrace, 0)
	if err != nil {
		return err
	}
	heldAzure.WarmUp = benchAzureWarmUp
	if err := heldAzure.Scale(3, 6, 5); err != nil {
		return err
	}
	type row struct {
		title, cmd string
		load       *plannersim.Load
		heldOut    bool
		aim        float64 // GPU-hours over the cheapest static ≥ 99 %
	}
	rows := []row{
		{"Sine, 60-minute period (main)", "kvgate-lab planner-simulate --shape sine", &diurnal, false, 0.8},
		{"Azure 2023 conversations", fmt.Sprintf("kvgate-lab planner-simulate --shape azure --time-scale %d --rate-scale %d --warm-up %v", benchAzureTimeScale, benchAzureRateScale, benchAzureWarmUp/benchAzureTimeScale), &azure, false, 0.8},
		{"Stress: sine, 10-minute period", "kvgate-lab planner-simulate --shape sine --sine-period 10m --sine-duration 30m --warm-up 10m", &stress, false, 1},
		{"Stress: sine, 10-minute period, two periods of warm-up", "kvgate-lab planner-simulate --shape sine --sine-period 10m --sine-duration 40m --warm-up 20m", &stress2, false, 1},
	}
	for _, name := range plannersim.GeneratedShapes {
		g, err := plannersim.GeneratedShape(name, 1)
		if err != nil {
			return err
		}
		l, err := g.Load()
		if err != nil {
			return err
		}
		rows = append(rows, row{"Generated: " + name, "kvgate-lab planner-simulate --shape " + name, &l, false, 0.8})
	}
	rows = append(rows,
		row{"Held out: sine, 45-minute period", "kvgate-lab planner-simulate --shape sine --sine-period 45m --sine-duration 60m --sine-min-rate 10 --sine-max-rate 50 --isl 2000 --osl 300 --seed 11", &heldSine, true, 0.8},
		row{"Held out: Azure 2023 conversations, 3× faster, 6× the rate, seed 5", fmt.Sprintf("kvgate-lab planner-simulate --shape azure --time-scale 3 --rate-scale 6 --seed 5 --warm-up %v", (benchAzureWarmUp / 3).Round(time.Second)), &heldAzure, true, 0.8},
	)
	for _, g := range plannersim.HeldOutShapes() {
		l, err := g.Load()
		if err != nil {
			return err
		}
		rows = append(rows, row{"Held out: " + g.Name, "kvgate-lab bench --only planner (plannersim.HeldOutShapes)", &l, true, 0.8})
	}
	type summary struct {
		row
		rep *plannersim.Report
	}
	var done []summary
	for _, c := range rows {
		start := time.Now()
		rep, err := plannersim.Compare(ctx, plannersim.Config{}, c.load, plannersim.CompareOptions{ForecastParams: plannersim.DefaultForecastParams, Oracle: true})
		if err != nil {
			return fmt.Errorf("%s: %w", c.title, err)
		}
		fmt.Fprintf(w, "\n### %s\n\n`%s` — %s: %d requests scored over %.0f simulated minutes after a %.0f-minute unscored warm-up (%.0f s to simulate %d fleets).\n\n",
			c.title, c.cmd, rep.Load, rep.Requests, (c.load.End() - c.load.WarmUp).Minutes(), c.load.WarmUp.Minutes(), time.Since(start).Seconds(), len(rep.Results))
		plannersim.WriteTable(w, rep)
		fmt.Fprintln(w)
		fmt.Fprintln(w, verdict(rep, c.aim))
		done = append(done, summary{c, rep})
	}
	fmt.Fprintln(w, "\n### Summary: GPU-hours over the cheapest static fleet reaching 99 %, same run")
	fmt.Fprintln(w, "\n| load | tuned on | planner attainment | planner × | oracle attainment | oracle × | threshold attainment | threshold × | cheapest static |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---|")
	for _, d := range done {
		tuned := "yes"
		if d.heldOut {
			tuned = "held out"
		}
		cells := []string{}
		for _, name := range []string{"planner", plannersim.OraclePolicy, "threshold"} {
			r := d.rep.Result(name)
			ratio := "–"
			if d.rep.Cheapest != nil {
				ratio = fmt.Sprintf("%.2f", r.GPUHours/d.rep.Cheapest.GPUHours)
			}
			cells = append(cells, fmt.Sprintf("%.2f %%", 100*r.SLAAttainment), ratio)
		}
		cheapest := "none ≥ 99 %"
		if d.rep.Cheapest != nil {
			cheapest = fmt.Sprintf("%s (%.2f GPU-h)", d.rep.Cheapest.Policy, d.rep.Cheapest.GPUHours)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", d.title, tuned, strings.Join(cells, " | "), cheapest)
	}

	fmt.Fprintln(w, "\n### Forecaster backtest: Azure 2023 conversation trace, request rate per 30 s interval")
	fmt.Fprintln(w, "\n`forecast.Backtest` over the trace's own timeline (one hour, 117 intervals), each forecaster fresh with default parameters; the naive `constant` forecast (the last interval's rate) is the baseline.")
	fmt.Fprintln(w, "\n| forecaster | horizon | MAE (req/s) | MAPE | MAE × constant |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	series := plannersim.RateSeries(&rateLoad, plannersim.DefaultInterval)
	res, err := plannersim.Backtest(series[:len(series)-1], []time.Duration{plannersim.DefaultInterval, 2 * plannersim.DefaultInterval})
	if err != nil {
		return err
	}
	base := map[time.Duration]float64{}
	for _, r := range res {
		if r.Forecaster == "constant" {
			base[r.Horizon] = r.MAE
		}
	}
	for _, r := range res {
		fmt.Fprintf(w, "| %s | %v (%d interval) | %.3f | %.1f %% | %.2f |\n", r.Forecaster, r.Horizon, int(r.Horizon/plannersim.DefaultInterval), r.MAE, 100*r.MAPE, r.MAE/base[r.Horizon])
	}
	return nil
}

// verdict states plainly whether the planner met the aim of its row:
// ≥ 99 % attainment at ≤ aim × the cheapest static fleet's GPU-hours.
func verdict(rep *plannersim.Report, aim float64) string {
	p, th := rep.Result("planner"), rep.Result("threshold")
	if rep.Cheapest == nil {
		return "No static fleet reached 99 %: no baseline."
	}
	ratio := p.GPUHours / rep.Cheapest.GPUHours
	s := fmt.Sprintf("Planner: %.2f %% attainment at %.2f× the GPU-hours of %s", 100*p.SLAAttainment, ratio, rep.Cheapest.Policy)
	if p.SLAAttainment >= plannersim.SLAGoal && ratio <= aim {
		s += " — meets the aim."
	} else {
		s += fmt.Sprintf(" — misses the aim (≥ 99 %% at ≤ %.2f×).", aim)
	}
	if o := rep.Result(plannersim.OraclePolicy); o != nil {
		s += fmt.Sprintf(" Oracle (exact forecasts): %.2f %% at %.2f×.", 100*o.SLAAttainment, o.GPUHours/rep.Cheapest.GPUHours)
	}
	s += fmt.Sprintf(" Threshold: %.2f %% at %.2f×.", 100*th.SLAAttainment, th.GPUHours/rep.Cheapest.GPUHours)
	return s
}
