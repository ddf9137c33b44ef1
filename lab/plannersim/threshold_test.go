package plannersim

import (
	"testing"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

func TestThresholdHPA(t *testing.T) {
	th, err := NewThreshold(Threshold{})
	if err != nil {
		t.Fatal(err)
	}
	at := func(s int) time.Time { return Epoch.Add(time.Duration(s) * time.Second) }
	decide := func(s int, util float64, po plan.PoolObservation) int {
		th.ObserveUtilization(plan.PoolPrefill, util)
		return th.Decide(plan.Observation{Time: at(s), Pools: map[string]plan.PoolObservation{plan.PoolPrefill: po}}).Desired[plan.PoolPrefill]
	}
	// 4 replicas at 0.75 busy vs target 0.7: ratio 1.07, inside the 10 % tolerance.
	if got := decide(0, 0.75, plan.PoolObservation{Replicas: 4}); got != 4 {
		t.Errorf("within tolerance: %d, want 4", got)
	}
	// At 1.0 busy: ceil(4 × 1.0 / 0.7) = 6.
	if got := decide(30, 1, plan.PoolObservation{Replicas: 4}); got != 6 {
		t.Errorf("utilisation 1.0: %d, want 6", got)
	}
	// A queue of 100 (target 10/replica) asks for 10; the step is capped
	// at max(2 × 6, 6 + 4) = 12, so 10 is allowed.
	if got := decide(60, 0.5, plan.PoolObservation{Replicas: 6, QueueDepth: 100}); got != 10 {
		t.Errorf("queue 100: %d, want 10", got)
	}
	// Load gone: the 300 s window keeps the highest recommendation (10).
	if got := decide(90, 0, plan.PoolObservation{Replicas: 10}); got != 10 {
		t.Errorf("30 s after the peak: %d, want 10 (stabilization)", got)
	}
	if got := decide(400, 0, plan.PoolObservation{Replicas: 10}); got != 1 {
		t.Errorf("after the window: %d, want 1", got)
	}
	for _, bad := range []Threshold{{QueueTarget: -1}, {KVTarget: 2}, {Tolerance: 1}, {UtilizationTarget: 1.5}} {
		if _, err := NewThreshold(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
