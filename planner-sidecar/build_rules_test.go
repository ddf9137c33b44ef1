package plannersidecar

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/lab/plannersim"
	"github.com/kvgate/kvgate/planner-sidecar/forecast"
	"github.com/kvgate/kvgate/planner-sidecar/perfmodel"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
	"github.com/kvgate/kvgate/planner-sidecar/plannerconfig"
)

// plannerFrom parses a planner section (one aggregated pool, the test
// profile) and builds the loop.
func plannerFrom(t *testing.T, section string) *Loop {
	t.Helper()
	l, err := newFrom(t, "  pools: [{name: aggregated, min: 1, max: 8}]\n"+section)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newFrom parses a planner section (with the test profile) and builds the
// loop.
func newFrom(t *testing.T, section string) (*Loop, error) {
	t.Helper()
	cfg, err := config.Parse(strings.NewReader("planner:\n  profile: " + writeProfile(t) + "\n" + section))
	if err != nil {
		t.Fatal(err)
	}
	workers, err := cfg.Workers()
	if err != nil {
		t.Fatal(err)
	}
	return New(cfg.Planner, workers, Options{})
}

func slaConfig(t *testing.T, l *Loop) plan.SLAConfig {
	t.Helper()
	sla, ok := l.Policy.(*plan.SLA)
	if !ok {
		t.Fatalf("policy %T, want *plan.SLA", l.Policy)
	}
	return sla.Config()
}

// The production planner's tuned rules default to the simulator's own:
// plannersim.NewPlanner on its default fleet (120 s provisioning, 30 s
// interval) is the oracle.
func TestTunedRulesDefaultToTheSimulators(t *testing.T) {
	model, err := perfmodel.New(mustProfile(t))
	if err != nil {
		t.Fatal(err)
	}
	sim, err := plannersim.NewPlanner(plannersim.Config{}, model, plannersim.DefaultPlannerForecaster, plannersim.DefaultForecastParams, plan.SLAConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := sim.(*plan.SLA).Config()
	got := slaConfig(t, plannerFrom(t, ""))
	if got.ErrorHeadroom != want.ErrorHeadroom || got.PeakHold != want.PeakHold || got.BacklogDrain != want.BacklogDrain {
		t.Fatalf("defaults: k %v, peak hold %v, backlog drain %v; the simulator runs k %v, %v, %v",
			got.ErrorHeadroom, got.PeakHold, got.BacklogDrain, want.ErrorHeadroom, want.PeakHold, want.BacklogDrain)
	}
	if plan.DefaultTrendDamping != plannersim.DefaultForecastParams.TrendDamping {
		t.Fatalf("trend damping default %v, the simulator's %v", plan.DefaultTrendDamping, plannersim.DefaultForecastParams.TrendDamping)
	}
	// A section built in code (no defaults applied) gets the same.
	section := plannerconfig.Config{
		Interval: yamlconf.Duration(10 * time.Second), Targets: plannerconfig.Targets{TTFT: yamlconf.Duration(time.Second), ITL: yamlconf.Duration(50 * time.Millisecond)},
		Pools: []plannerconfig.Pool{{Name: "aggregated", Min: 1, Max: 8}}, Forecaster: plannerconfig.Forecaster{Kind: "holt"},
		Profile: writeProfile(t),
	}
	l, err := New(section, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c := slaConfig(t, l); c.ErrorHeadroom != want.ErrorHeadroom || c.PeakHold != want.PeakHold || c.BacklogDrain != want.BacklogDrain {
		t.Fatalf("unparsed config: %+v", c)
	}
}

func TestTunedRulesFromConfig(t *testing.T) {
	c := slaConfig(t, plannerFrom(t, "  error_headroom: 1.25\n  peak_hold: 5m\n  backlog_drain: 40s\n"))
	if c.ErrorHeadroom != 1.25 || c.PeakHold != 5*time.Minute || c.BacklogDrain != 40*time.Second {
		t.Fatalf("set: %+v", c)
	}
	c = slaConfig(t, plannerFrom(t, "  error_headroom: 0\n  peak_hold: 0s\n  backlog_drain: 0s\n"))
	if c.ErrorHeadroom != 0 || c.PeakHold != 0 || c.BacklogDrain != 0 {
		t.Fatalf("off: %+v", c)
	}
}

// The rules act on decisions as configured: with a queue and no arrivals,
// only backlog_drain asks for capacity, k × the forecast's error is the
// headroom, and the rate peak is held for peak_hold.
func TestTunedRulesShowInDecisions(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	obs := func(i int, rate, queue float64) plan.Observation {
		return plan.Observation{Time: t0.Add(time.Duration(i) * 10 * time.Second), Pools: map[string]plan.PoolObservation{
			"aggregated": {Replicas: 1, RequestRate: rate, MeanInputTokens: 100, MeanOutputTokens: 50, QueueDepth: queue},
		}}
	}
	on := plannerFrom(t, "  backlog_drain: 20s\n  peak_hold: 30s\n  error_headroom: 3\n  forecaster: {kind: constant}\n")
	off := plannerFrom(t, "  backlog_drain: 0s\n  peak_hold: 0s\n  error_headroom: 0\n  forecaster: {kind: constant}\n")
	// Interval 10 s, horizon = interval: each forecast comes due at the
	// next decision. Rates 4, 8, 0 then a queue of 40 with no arrivals.
	var dOn, dOff plan.Decision
	for i, r := range []float64{4, 8, 0, 0} {
		q := 0.0
		if i == 3 {
			q = 40
		}
		dOn, dOff = on.Policy.Decide(obs(i, r, q)), off.Policy.Decide(obs(i, r, q))
	}
	// The constant forecaster predicted 4, 8, 0 for rates 8, 0, 0: errors
	// 4, 8, 0, their EWMA (α 0.3) 4 → 5.2 → 3.64; × k 3.
	wantMAE := 0.3*0 + 0.7*(0.3*8+0.7*4)
	if got := dOn.Terms["aggregated.forecast_mae_request_rate"]; math.Abs(got-wantMAE) > 1e-9 {
		t.Fatalf("forecast MAE %v, want %v", got, wantMAE)
	}
	if got := dOn.Terms["aggregated.error_headroom_request_rate"]; math.Abs(got-3*wantMAE) > 1e-9 {
		t.Errorf("headroom %v, want 3 × %v", got, wantMAE)
	}
	if got := dOff.Terms["aggregated.error_headroom_request_rate"]; got != 0 {
		t.Errorf("headroom with error_headroom 0: %v", got)
	}
	// Decisions at 0, 10, 20, 30 s: the last 30 s saw the peak of 8 req/s.
	if got := dOn.Terms["aggregated.peak_request_rate"]; got != 8 {
		t.Errorf("peak %v, want 8 (held 30 s)", got)
	}
	if got := dOff.Terms["aggregated.peak_request_rate"]; got != 0 {
		t.Errorf("peak with peak_hold 0: %v", got)
	}
	// 40 queued to serve within 20 s is 2 req/s of work: an aggregated
	// replica's prefill and decode shares of it, at the per-replica
	// throughputs the decision itself reports.
	term := func(k string) float64 { return dOn.Terms["aggregated."+k] }
	wantBacklog := 2*term("forecast_input_tokens")*(1-term("expected_hit_rate"))/term("prefill_tokens_per_second_per_replica") +
		2*term("forecast_output_tokens")/term("decode_tokens_per_second_per_replica")
	if b := term("backlog_need_replicas"); wantBacklog <= 0 || math.Abs(b-wantBacklog) > 1e-9 {
		t.Errorf("backlog need %v with 40 queued and backlog_drain 20s, want %v", b, wantBacklog)
	}
	if b := dOff.Terms["aggregated.backlog_need_replicas"]; b != 0 {
		t.Errorf("backlog need with backlog_drain 0: %v", b)
	}
}

// trend_damping reaches holt: the rate forecast in a decision's terms is
// what forecast.NewHolt (damped, or with tau 0 undamped) predicts on the same
// series at the horizon.
func TestTrendDampingReachesTheForecaster(t *testing.T) {
	t0 := time.Unix(2_000_000, 0)
	horizon := 2 * time.Minute
	run := func(section string, oracle forecast.Forecaster) (got, want float64) {
		l := plannerFrom(t, "  horizon: 2m\n"+section)
		var d plan.Decision
		for i := range 12 {
			at := t0.Add(time.Duration(i) * 10 * time.Second)
			rate := 2 + 0.5*float64(i) // a ramp
			d = l.Policy.Decide(plan.Observation{Time: at, Pools: map[string]plan.PoolObservation{
				"aggregated": {Replicas: 1, RequestRate: rate, MeanInputTokens: 100, MeanOutputTokens: 50},
			}})
			oracle.Observe(at, rate)
		}
		return d.Terms["aggregated.forecast_request_rate"], oracle.Predict(horizon)
	}
	a, b := forecast.DefaultParams.Alpha, forecast.DefaultParams.Beta
	damped, wantDamped := run("", forecast.NewHolt(a, b, plan.DefaultTrendDamping))
	if math.Abs(damped-wantDamped) > 1e-9 {
		t.Fatalf("default: forecast %v, damped holt (10m) predicts %v", damped, wantDamped)
	}
	set, wantSet := run("  forecaster: {kind: holt, trend_damping: 1m}\n", forecast.NewHolt(a, b, time.Minute))
	if math.Abs(set-wantSet) > 1e-9 {
		t.Fatalf("trend_damping 1m: forecast %v, damped holt predicts %v", set, wantSet)
	}
	undamped, wantUndamped := run("  forecaster: {kind: holt, trend_damping: 0s}\n", forecast.NewHolt(a, b, 0))
	if math.Abs(undamped-wantUndamped) > 1e-9 {
		t.Fatalf("trend_damping 0: forecast %v, holt predicts %v", undamped, wantUndamped)
	}
	// On a ramp, damping carries less of the trend: the three differ in order.
	if !(set < damped && damped < undamped) {
		t.Fatalf("forecasts 1m %v, 10m %v, undamped %v: want increasing", set, damped, undamped)
	}
}

// planner.scrape.token_file reaches the scraper: an extproc admin listener
// requiring the token refuses the planner without it and serves it with
// it; the file is re-read each round; an unreadable file stops New.
func TestScrapeTokenFromConfig(t *testing.T) {
	var mu sync.Mutex // the engine and extproc targets are scraped at once
	want := "scrape-token-from-config-01"
	var gotAuth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		gotAuth = append(gotAuth, r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") != "Bearer "+want {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 5\n")
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	pools := "  pools: [{name: aggregated, min: 1, max: 8, endpoints: [\"" + addr + "\"]}]\n"
	tokenFile := filepath.Join(t.TempDir(), "token")

	collect := func(l *Loop) []error {
		_, errs := l.Collector.Collect(context.Background(), time.Now(), nil)
		return errs
	}
	// No token configured: 401 from both targets (engine and extproc).
	l, err := newFrom(t, pools+"  scrape: {extproc: \""+addr+"\"}\n")
	if err != nil {
		t.Fatal(err)
	}
	if errs := collect(l); len(errs) != 2 || !strings.Contains(errs[0].Error(), "401") {
		t.Fatalf("without token: %v", errs)
	}
	// token_file set but unreadable: New fails naming the key.
	withToken := pools + "  scrape: {extproc: \"" + addr + "\", token_file: " + tokenFile + "}\n"
	if _, err := newFrom(t, withToken); err == nil || !strings.Contains(err.Error(), "planner.scrape.token_file: ") {
		t.Fatalf("unreadable token file: %v", err)
	}
	os.WriteFile(tokenFile, []byte(want+"\n"), 0o600)
	l, err = newFrom(t, withToken)
	if err != nil {
		t.Fatal(err)
	}
	if errs := collect(l); len(errs) != 0 {
		t.Fatalf("with token: %v", errs)
	}
	// Rotated on the target and in the file: the next round sends the new one.
	mu.Lock()
	want = "rotated-scrape-token-0123"
	mu.Unlock()
	if errs := collect(l); len(errs) != 2 {
		t.Fatalf("stale token accepted: %v", errs)
	}
	os.WriteFile(tokenFile, []byte(want), 0o600)
	if errs := collect(l); len(errs) != 0 {
		t.Fatalf("rotated token: %v", errs)
	}
	mu.Lock()
	defer mu.Unlock()
	if last := gotAuth[len(gotAuth)-1]; last != "Bearer "+want {
		t.Fatalf("sent %q", last)
	}
}

func mustProfile(t *testing.T) perfmodel.Profile {
	t.Helper()
	p, err := perfmodel.LoadProfile(writeProfile(t))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
