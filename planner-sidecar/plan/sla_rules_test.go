package plan

import (
	"math"
	"testing"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/forecast"
)

func TestWindowMaxSlides(t *testing.T) {
	w := windowMax{window: 60 * time.Second}
	steps := []struct {
		sec  int
		v    float64
		want float64
	}{
		{0, 5, 5},
		{20, 3, 5},  // 5 still inside
		{40, 4, 5},  // 5 still inside
		{60, 1, 4},  // 5 (at 0 s) is 60 s old: out; 4 (40 s) is the largest left
		{100, 2, 2}, // 4 (40 s) out; 1 and 2 are left
		{110, 9, 9},
	}
	for _, st := range steps {
		if got := w.add(t0.Add(time.Duration(st.sec)*time.Second), st.v); got != st.want {
			t.Fatalf("at %d s: max %v, want %v", st.sec, got, st.want)
		}
	}
	if len(w.q) != 1 {
		t.Fatalf("deque keeps %d samples after a new maximum, want 1", len(w.q))
	}
}

func TestPeakMemoryCapsPlanBelowTheRecentHigh(t *testing.T) {
	// Constant forecaster, horizon = the 30 s interval, k = 2. Rates 20,
	// 40, 20: the forecasts made at 0 s (20) and 30 s (40) each missed by
	// 20, so at 60 s the MAE is 20 and the planned rate 20 + 2 × 20 = 60,
	// 60 × 1000 / 10000 = 6 replicas. With peak memory the most work seen
	// is 40 req/s (4 replicas' worth) and the level (20, 2 replicas) is
	// below its high (4): the plan is capped at 4. At 30 s the level is at
	// its high (a new high): no cap, 40 + 2 × 20 = 80 → 8 either way.
	run := func(memory time.Duration) []Decision {
		cfg := baseConfig(map[string]PoolLimits{PoolPrefill: {Max: 100}})
		cfg.Horizon = 30 * time.Second
		cfg.ErrorHeadroom = 2
		cfg.PeakMemory = memory
		s := NewSLA(cfg, flatModel(), constant)
		var out []Decision
		for i, rate := range []float64{20, 40, 20} {
			out = append(out, s.Decide(Observation{Time: t0.Add(time.Duration(i) * 30 * time.Second), Pools: map[string]PoolObservation{PoolPrefill: load(rate, 1000, 100, 0, 1)}}))
		}
		return out
	}
	need := func(d Decision) float64 { return d.Terms["prefill.need_replicas"] }
	off, on := run(0), run(time.Hour)
	for i, want := range []float64{2, 8, 6} {
		if math.Abs(need(off[i])-want) > 1e-9 {
			t.Fatalf("off, step %d: need %v, want %v (%s)", i, need(off[i]), want, off[i].Reason)
		}
	}
	for i, want := range []float64{2, 8, 4} {
		if math.Abs(need(on[i])-want) > 1e-9 {
			t.Fatalf("on, step %d: need %v, want %v (%s)", i, need(on[i]), want, on[i].Reason)
		}
	}
	if on[2].Terms["prefill.work_envelope_capped"] != 1 || on[1].Terms["prefill.work_envelope_capped"] != 0 || on[2].Terms["prefill.work_envelope_replicas"] != 4 {
		t.Fatalf("terms: capped %v then %v, envelope %v", on[1].Terms["prefill.work_envelope_capped"], on[2].Terms["prefill.work_envelope_capped"], on[2].Terms["prefill.work_envelope_replicas"])
	}
	cfg := baseConfig(map[string]PoolLimits{PoolPrefill: {Max: 100}})
	cfg.PeakMemory = 10 * time.Minute
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.PeakMemory = -time.Second
	if err := cfg.Validate(); err == nil {
		t.Fatal("negative peak memory accepted")
	}
}

func TestSeasonalForecastTakesOverOnARepeatingLoad(t *testing.T) {
	// A 10-minute cycle 5..55 req/s at 30 s decisions, holt (undamped) as
	// the forecaster, a 150 s horizon (a quarter period: holt carries the
	// slope past each turn). After two periods the history shows the
	// period; once its forecasts have come due and been closer, the plan
	// uses them. On a ramp no period appears and holt keeps planning.
	run := func(rate func(sec float64) float64) Decision {
		cfg := baseConfig(map[string]PoolLimits{PoolPrefill: {Max: 100}})
		cfg.Horizon = 150 * time.Second
		cfg.ErrorHeadroom = 2
		s := NewSLA(cfg, flatModel(), func() forecast.Forecaster { return forecast.NewHolt(0.5, 0.3, 0) })
		var d Decision
		for i := range 100 { // 50 minutes
			sec := float64(i * 30)
			d = s.Decide(Observation{Time: t0.Add(time.Duration(sec) * time.Second), Pools: map[string]PoolObservation{PoolPrefill: load(rate(sec), 1000, 100, 0, 1)}})
		}
		return d
	}
	wave := run(func(sec float64) float64 { return 30 + 25*math.Sin(2*math.Pi*sec/600) })
	if wave.Terms["prefill.seasonal_period_seconds"] != 600 || wave.Terms["prefill.seasonal_forecast_used"] != 1 {
		t.Fatalf("wave: period %v s, used %v", wave.Terms["prefill.seasonal_period_seconds"], wave.Terms["prefill.seasonal_forecast_used"])
	}
	// The last decision is at 49.5 min; 150 s on, the wave is at
	// 30 + 25 sin(2π · 3120/600) = 53.78 (near its peak, where the
	// seasonal forecast's three-sample means flatten it by up to 1). The
	// plan's error is the seasonal one, far below holt's.
	if got := wave.Terms["prefill.forecast_request_rate"]; math.Abs(got-53.78) > 1.2 {
		t.Fatalf("wave: forecast %v, want about 53.78", got)
	}
	if m, h := wave.Terms["prefill.forecast_mae_request_rate"], wave.Terms["prefill.forecaster_mae_request_rate"]; !(m < h/4) {
		t.Fatalf("wave: planned with error %v, holt's %v", m, h)
	}
	ramp := run(func(sec float64) float64 { return 5 + sec/60 })
	if ramp.Terms["prefill.seasonal_period_seconds"] != 0 || ramp.Terms["prefill.seasonal_forecast_used"] != 0 {
		t.Fatalf("ramp: period %v s, used %v", ramp.Terms["prefill.seasonal_period_seconds"], ramp.Terms["prefill.seasonal_forecast_used"])
	}
}
