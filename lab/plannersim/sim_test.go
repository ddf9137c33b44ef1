package plannersim

import (
	"context"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// steady is a constant-rate load (a sine with min = max).
func steady(t *testing.T, rate float64, d time.Duration, isl, osl int) *Load {
	t.Helper()
	l, err := Sine{Duration: d, Period: time.Minute, MinRate: rate, MaxRate: rate, ISL: isl, OSL: osl, Seed: 7}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Normalize(); err != nil {
		t.Fatal(err)
	}
	return &l
}

func simulateOne(t *testing.T, cfg Config, l *Load, p plan.Policy) *Result {
	t.Helper()
	r, err := Run(context.Background(), cfg, l, p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func disagg(p, d int) Static {
	return Static{Size: map[string]int{plan.PoolPrefill: p, plan.PoolDecode: d}}
}

// Run returns an error unless every request completes, so a result is
// itself the check; Little's law ties the sampled occupancy to the
// measured latencies on a steady load.
func TestEveryRequestCompletesAndLittlesLaw(t *testing.T) {
	for _, mode := range []Mode{Disaggregated, Aggregated} {
		l := steady(t, 8, 3*time.Minute, 1000, 100)
		var p plan.Policy = disagg(2, 1)
		if mode == Aggregated {
			p = Static{Size: map[string]int{plan.PoolAggregated: 2}}
		}
		r := simulateOne(t, Config{Mode: mode}, l, p)
		if r.Requests != len(l.Requests) {
			t.Fatalf("%s: %d requests reported, %d in the load", mode, r.Requests, len(l.Requests))
		}
		lambda := float64(len(l.Requests)) / l.End().Seconds()
		want := lambda * r.MeanLatencyMs / 1000
		if math.Abs(r.MeanInSystem-want) > 0.1*want {
			t.Errorf("%s: Little's law: mean in system %.2f, λW = %.2f/s × %.0f ms = %.2f", mode, r.MeanInSystem, lambda, r.MeanLatencyMs, want)
		}
		if r.SLAAttainment < 0.99 {
			t.Errorf("%s: a fleet at ~%.0f %% prefill load misses the SLA: %v", mode, 100*lambda*1000/48000, r)
		}
	}
}

func TestSmallFleetMissesBigFleetMeets(t *testing.T) {
	// 20 req/s × 3000 prompt tokens = 60k tokens/s: more than one replica
	// prefills (~48k/s, lab/enginesim's timing at 8192-token batches).
	l := steady(t, 20, 3*time.Minute, 3000, 100)
	small := simulateOne(t, Config{}, l, disagg(1, 1))
	big := simulateOne(t, Config{}, l, disagg(4, 2))
	if small.SLAAttainment > 0.5 || small.TTFTAttainment > 0.5 {
		t.Errorf("1p1d at 60k prompt tokens/s: %v, want most requests missing the TTFT target", small)
	}
	if big.SLAAttainment < 0.99 {
		t.Errorf("4p2d: %v, want >= 99 %% attainment", big)
	}
	// Static fleets bill exactly size × horizon.
	if want := 6 * l.End().Hours(); math.Abs(big.GPUHours-want) > 1e-9 {
		t.Errorf("4p2d GPU-hours %v, want 6 × %v h = %v", big.GPUHours, l.End().Hours(), want)
	}
	if big.ScaleEvents != 0 {
		t.Errorf("static fleet had %d scale events", big.ScaleEvents)
	}
}

// scripted asks for given sizes at given decision times.
type scripted struct {
	at   map[time.Duration]map[string]int
	seen []plan.Observation
}

func (s *scripted) Name() string { return "scripted" }
func (s *scripted) Decide(obs plan.Observation) plan.Decision {
	s.seen = append(s.seen, obs)
	return plan.Decision{Desired: s.at[obs.Time.Sub(Epoch)]}
}

func TestProvisioningDelayRespected(t *testing.T) {
	l := steady(t, 4, 6*time.Minute, 500, 50)
	pol := &scripted{at: map[time.Duration]map[string]int{30 * time.Second: {plan.PoolPrefill: 3, plan.PoolDecode: 1}}}
	cfg := Config{ProvisionDelay: 90 * time.Second}
	r := simulateOne(t, cfg, l, pol)
	for _, pt := range r.Timeline {
		wantReady := 1
		if pt.T >= 30*time.Second+90*time.Second {
			wantReady = 3
		}
		if pt.Ready[plan.PoolPrefill] != wantReady {
			t.Errorf("at %v: %d prefill replicas ready, want %d (asked at 30s, delay 90s)", pt.T, pt.Ready[plan.PoolPrefill], wantReady)
		}
		if pt.T >= 30*time.Second && pt.Serving[plan.PoolPrefill] != 3 {
			t.Errorf("at %v: %d serving, want 3", pt.T, pt.Serving[plan.PoolPrefill])
		}
	}
	// The observations the policy saw report the pending replicas.
	if got := pol.seen[2].Pools[plan.PoolPrefill]; got.Pending != 2 || got.Replicas != 1 {
		t.Errorf("observation at %v: %+v, want 1 ready and 2 pending", pol.seen[2].Time.Sub(Epoch), got)
	}
	// Billing starts when replicas are asked for: 1p1d for 30 s, then 3p1d.
	want := (2*30 + 4*(l.End().Seconds()-30)) / 3600
	if math.Abs(r.GPUHours-want) > 1e-9 {
		t.Errorf("GPU-hours %v, want %v", r.GPUHours, want)
	}
	if r.ScaleEvents != 1 {
		t.Errorf("%d scale events, want 1", r.ScaleEvents)
	}
}

func TestDrainingReplicasGetNothingNew(t *testing.T) {
	cfg := Config{}.withDefaults()
	f := newFleet(cfg, 0, time.Hour)
	p := f.pools[plan.PoolPrefill]
	for range 3 {
		if _, err := f.add(p, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	p.target = 3
	p.replicas[0].inflight, p.replicas[1].inflight, p.replicas[2].inflight = 5, 0, 7
	if err := f.scale(p, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The idle replica left at once; the one with fewer requests drains.
	if len(p.replicas) != 2 || p.replicas[0].state != draining || p.replicas[1].state != ready {
		t.Fatalf("after scaling 3→1: %d replicas, states %v %v", len(p.replicas), p.replicas[0].state, p.replicas[1].state)
	}
	for range 10 {
		if got := p.pick(); got != p.replicas[1] {
			t.Fatalf("router picked %s (state %v), want the only ready replica", got.name, got.state)
		}
	}
	// A scale-up takes the draining replica back before provisioning.
	if err := f.scale(p, 2, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if len(p.replicas) != 2 || p.count(ready) != 2 {
		t.Errorf("scale-up to 2: %d replicas, %d ready; want the draining one back", len(p.replicas), p.count(ready))
	}

	// In a whole run: a scale-down mid-load still completes every request
	// (Run checks) and bills the draining replicas until they leave.
	l := steady(t, 10, 4*time.Minute, 2000, 200)
	pol := &scripted{at: map[time.Duration]map[string]int{2 * time.Minute: {plan.PoolPrefill: 1, plan.PoolDecode: 1}}}
	r := simulateOne(t, Config{Initial: map[string]int{plan.PoolPrefill: 3, plan.PoolDecode: 2}}, l, pol)
	upper := (5*120 + 5*(l.End().Seconds()-120)) / 3600
	lower := (5*120 + 2*(l.End().Seconds()-120)) / 3600
	if r.GPUHours >= upper || r.GPUHours < lower {
		t.Errorf("GPU-hours %v, want in [%v, %v): draining replicas billed until idle, then gone", r.GPUHours, lower, upper)
	}
}

func TestDeterministic(t *testing.T) {
	l := steady(t, 6, 2*time.Minute, 1500, 80)
	th1, _ := NewThreshold(Threshold{})
	th2, _ := NewThreshold(Threshold{})
	a, b := simulateOne(t, Config{}, l, th1), simulateOne(t, Config{}, l, th2)
	a.Timeline, b.Timeline = nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two runs differ:\n%v\n%v", a, b)
	}
}

func TestPrefixCacheHitsFromHashIDs(t *testing.T) {
	// Two requests sharing 4 of 5 blocks, on one replica: the second's
	// prompt is mostly cached.
	l := &Load{Name: "shared", Horizon: 30 * time.Second, Requests: []Request{
		{Arrival: 0, InputTokens: 2500, OutputTokens: 2, HashIDs: []uint64{1, 2, 3, 4, 5}},
		{Arrival: 10 * time.Second, InputTokens: 2500, OutputTokens: 2, HashIDs: []uint64{1, 2, 3, 4, 6}},
	}}
	pol := &scripted{}
	simulateOne(t, Config{Interval: 20 * time.Second}, l, pol)
	got := pol.seen[0].Pools[plan.PoolPrefill].CacheHitRate
	if want := 2048.0 / 5000; math.Abs(got-want) > 1e-9 {
		t.Errorf("cache hit rate %v, want %v (4 blocks of 512 of the second prompt, over both)", got, want)
	}
}

func TestWarmUpIsNotScored(t *testing.T) {
	l := steady(t, 4, 4*time.Minute, 500, 20)
	l.WarmUp = time.Minute
	pol := &scripted{at: map[time.Duration]map[string]int{30 * time.Second: {plan.PoolPrefill: 2, plan.PoolDecode: 1}}}
	r := simulateOne(t, Config{ProvisionDelay: NoProvisionDelay}, l, pol)
	scored := 0
	for _, q := range l.Requests {
		if q.Arrival >= time.Minute {
			scored++
		}
	}
	if r.Requests != scored {
		t.Errorf("%d requests scored, want the %d arriving after the warm-up", r.Requests, scored)
	}
	// 3 replicas from 30 s on: billed from the warm-up's end only.
	if want := 3 * (l.End() - time.Minute).Hours(); math.Abs(r.GPUHours-want) > 1e-9 {
		t.Errorf("GPU-hours %v, want %v", r.GPUHours, want)
	}
	if r.ScaleEvents != 0 {
		t.Errorf("%d scale events counted, want 0 (the only one was in the warm-up)", r.ScaleEvents)
	}
}
