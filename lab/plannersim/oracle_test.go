package plannersim

import (
	"math"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/profiletest"
	"github.com/kvgate/kvgate/planner-sidecar/perfmodel"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

func TestOracleForecastsTheLoadsOwnFuture(t *testing.T) {
	// 10 s intervals: [0, 10) has 1 request of 100/10 tokens, [10, 20)
	// none, [20, 30) 3 requests of 300/30 tokens on average.
	l := &Load{Name: "oracle", Requests: []Request{
		{Arrival: 5 * time.Second, InputTokens: 100, OutputTokens: 10},
		{Arrival: 21 * time.Second, InputTokens: 200, OutputTokens: 20},
		{Arrival: 22 * time.Second, InputTokens: 300, OutputTokens: 30},
		{Arrival: 29 * time.Second, InputTokens: 400, OutputTokens: 40},
	}}
	fc := oracleForecasts(l, 10*time.Second)
	rate, in, out := fc(plan.PoolPrefill, plan.SignalRequestRate), fc(plan.PoolPrefill, plan.SignalInputTokens), fc(plan.PoolPrefill, plan.SignalOutputTokens)
	if rate.Predict(0) != 0 {
		t.Fatal("predicts before any observation")
	}
	for _, f := range []interface{ Observe(time.Time, float64) }{rate, in, out} {
		f.Observe(Epoch.Add(10*time.Second), -1) // the observed value is ignored
	}
	cases := []struct {
		h                   time.Duration
		rate, input, output float64
	}{
		{0, 0.1, 100, 10},                // the interval just observed, [0, 10)
		{10 * time.Second, 0, 100, 10},   // [10, 20): no arrivals, the lengths carried
		{20 * time.Second, 0.3, 300, 30}, // [20, 30)
		{15 * time.Second, 0.3, 300, 30}, // 25 s falls in the interval observed at 30 s
		{time.Hour, 0.3, 300, 30},        // past the load: its last interval
	}
	for _, c := range cases {
		if got := [3]float64{rate.Predict(c.h), in.Predict(c.h), out.Predict(c.h)}; math.Abs(got[0]-c.rate) > 1e-9 || got[1] != c.input || got[2] != c.output {
			t.Errorf("horizon %v: %v, want %v %v %v", c.h, got, c.rate, c.input, c.output)
		}
	}
}

func TestOraclePlannerRunsUnderItsOwnName(t *testing.T) {
	l := steady(t, 6, 3*time.Minute, 1000, 100)
	model := profiletest.Model(perfmodel.Profile{
		Prefill: []perfmodel.PrefillPoint{{InputTokens: 1000, Concurrency: 1, TTFTSeconds: 0.1, TokensPerSecond: 10000}},
		Decode:  []perfmodel.DecodePoint{{ContextTokens: 1000, Batch: 8, ITLSeconds: 0.02, TokensPerSecond: 400}},
	})
	p, err := NewOraclePlanner(Config{}, model, l, plan.SLAConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != OraclePolicy {
		t.Fatalf("name %q", p.Name())
	}
	r := simulateOne(t, Config{}, l, p)
	// 6 req/s × 100 output tokens = 600 tokens/s at 400 per replica (1.5,
	// ±0.1 of Poisson noise per 30 s interval): the exact forecast asks for
	// 2 decode replicas from the first decision on, with no error headroom
	// (its forecasts have no error) to ask for a third. Past the load's
	// end the oracle sees it stop.
	for _, pt := range r.Timeline {
		if pt.T <= 2*time.Minute && pt.Serving[plan.PoolDecode] != 2 {
			t.Fatalf("decode replicas at %v: %d (%s)", pt.T, pt.Serving[plan.PoolDecode], pt.Decision)
		}
	}
}
