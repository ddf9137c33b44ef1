package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/simulate"
)

func init() { registerBench("planner", benchPlanner) }

// Bench loads for the planner section. The Azure conversation trace is
// played 4× faster with 4× its rate (86 req/s over 15 simulated minutes),
// enough that pools hold several replicas and sizing matters, while the
// section stays within its time budget.
const (
	benchAzureTimeScale = 4
	benchAzureRateScale = 4
	// benchAzureWarmUp is the unscored lead, in the trace's own time: the
	// trace's first minutes ramp up from its start.
	benchAzureWarmUp = 8 * time.Minute
)

// benchPlanner compares the planner, the threshold policy and static
// fleets on the sine and Azure loads, with the cheapest static fleet
// reaching 99 % SLA attainment as the GPU-hour baseline, then backtests
// the forecasters on the Azure trace's per-interval request rate.
func benchPlanner(ctx context.Context, w io.Writer, _ time.Duration) error {
	fmt.Fprintln(w, "## Planner: SLA-driven sizing in simulated time")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Each replica is e2e/enginesim's engine (vLLM-like scheduler, Dynamo mocker step times) in virtual time; prefill and decode pools (disaggregated), least-loaded routing, 120 s provisioning delay, a decision every 30 s, SLA TTFT ≤ 2 s and mean ITL ≤ 50 ms per request, 1 GPU per replica. GPU-hours bill ready, provisioning and draining replicas over the load's span. `× cheapest` is GPU-hours over those of the cheapest static fleet reaching 99 % attainment, found by search (every fleet tried is listed). The warm-up (simulated, not scored or billed) lets dynamic policies start from their own steady state rather than a cold 1P/1D fleet. The planner is `plan.SLA` with the constant (last value) forecaster, scaling up at 50 % and down at 40 % of its modelled SLA capacity, forecast horizon 240 s (the best worst case over both loads of a nine-setting grid: forecasters constant, ewma, holt, kalman; utilisations 0.9/0.7 to 0.5/0.4; horizons 150 to 240 s; see `simulate.DefaultPlannerForecaster`), with a profile measured from the same timing model (`simulate.ProfileFromTimingModel`); the threshold policy is an HPA (GPU utilisation 70 %, queue 10/replica, KV 70 %; 10 % tolerance, 300 s scale-down stabilization). Aim (issue #7): ≥ 99 % attainment at ≤ 0.8× the cheapest static fleet's GPU-hours, and fewer GPU-hours than the threshold policy at equal attainment.")
	sine := simulate.DefaultSine
	sineLoad, err := sine.Load()
	if err != nil {
		return err
	}
	azure, err := simulate.LoadAzure(defaultAzureTrace, 0)
	if err != nil {
		return err
	}
	rateLoad := azure // the backtest uses the trace's own timeline
	rateLoad.Requests = append([]simulate.Request(nil), azure.Requests...)
	azure.WarmUp = benchAzureWarmUp
	if err := azure.Scale(benchAzureTimeScale, benchAzureRateScale, 1); err != nil {
		return err
	}
	for _, c := range []struct {
		title, cmd string
		load       *simulate.Load
	}{
		{"sine", "kvgate planner simulate --shape sine", &sineLoad},
		{"Azure 2023 conversations", fmt.Sprintf("kvgate planner simulate --shape azure --time-scale %d --rate-scale %d --warm-up %v", benchAzureTimeScale, benchAzureRateScale, benchAzureWarmUp/benchAzureTimeScale), &azure},
	} {
		start := time.Now()
		rep, err := simulate.Compare(ctx, simulate.Config{}, c.load, simulate.CompareOptions{})
		if err != nil {
			return fmt.Errorf("%s: %w", c.title, err)
		}
		fmt.Fprintf(w, "\n### %s\n\n`%s` — %s: %d requests scored over %.0f simulated minutes after a %.0f-minute unscored warm-up (%.0f s to simulate %d fleets).\n\n",
			c.title, c.cmd, rep.Load, rep.Requests, (c.load.End() - c.load.WarmUp).Minutes(), c.load.WarmUp.Minutes(), time.Since(start).Seconds(), len(rep.Results))
		simulate.WriteTable(w, rep)
		fmt.Fprintln(w)
		fmt.Fprintln(w, verdict(rep))
	}

	fmt.Fprintln(w, "\n### Forecaster backtest: Azure 2023 conversation trace, request rate per 30 s interval")
	fmt.Fprintln(w, "\n`forecast.Backtest` over the trace's own timeline (one hour, 117 intervals), each forecaster fresh with default parameters; the naive `constant` forecast (the last interval's rate) is the baseline.")
	fmt.Fprintln(w, "\n| forecaster | horizon | MAE (req/s) | MAPE | MAE × constant |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	series := simulate.RateSeries(&rateLoad, simulate.DefaultInterval)
	res, err := simulate.Backtest(series[:len(series)-1], []time.Duration{simulate.DefaultInterval, 2 * simulate.DefaultInterval})
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
		fmt.Fprintf(w, "| %s | %v (%d interval) | %.3f | %.1f %% | %.2f |\n", r.Forecaster, r.Horizon, int(r.Horizon/simulate.DefaultInterval), r.MAE, 100*r.MAPE, r.MAE/base[r.Horizon])
	}
	return nil
}

// verdict states plainly whether the planner met the aim.
func verdict(rep *simulate.Report) string {
	p, th := rep.Result("planner"), rep.Result("threshold")
	if rep.Cheapest == nil {
		return "No static fleet reached 99 %: no baseline."
	}
	ratio := p.GPUHours / rep.Cheapest.GPUHours
	aim := p.SLAAttainment >= simulate.SLAGoal && ratio <= 0.8
	s := fmt.Sprintf("Planner: %.2f %% attainment at %.2f× the GPU-hours of %s", 100*p.SLAAttainment, ratio, rep.Cheapest.Policy)
	if aim {
		s += " — meets the aim."
	} else {
		s += " — misses the aim (≥ 99 % at ≤ 0.80×)."
	}
	s += fmt.Sprintf(" Threshold: %.2f %% at %.2f×.", 100*th.SLAAttainment, th.GPUHours/rep.Cheapest.GPUHours)
	return s
}
