package flowcontrol

import (
	"math"
	"testing"

	"github.com/kvgate/kvgate/picker"
)

// engine is a candidate whose engine reports waiting requests and KV usage.
func engine(waiting int, kv float64) picker.Candidate {
	return picker.Candidate{Load: picker.Load{HaveEngine: true, Waiting: waiting, KVUsage: kv}}
}

// The worker score is GIE's utilization detector's endpoint score (max of
// queue ÷ threshold and KV ÷ threshold; 1 without metrics), and the pool
// has no room once their mean over the usable workers reaches
// PoolMeanScore, even while some worker is below every bound.
func TestPoolMeanScoreHoldsWhileSomeWorkerHasRoom(t *testing.T) {
	s := Saturation{MaxEngineWaiting: 2, MaxKVUsage: 0.8, PoolMeanScore: 3}
	for _, c := range []struct {
		l    picker.Load
		want float64
	}{
		{picker.Load{HaveEngine: true, Waiting: 6, KVUsage: 0.4}, 3},
		{picker.Load{HaveEngine: true, Waiting: 1, KVUsage: 0.8}, 1},
		{picker.Load{HaveEngine: true}, 0},
		{picker.Load{}, 1}, // no fresh engine metrics
	} {
		if got := s.WorkerScore(c.l); got != c.want {
			t.Errorf("WorkerScore(%+v) = %g, want %g", c.l, got, c.want)
		}
	}
	idle := engine(0, 0.1)
	deep := engine(10, 0.5) // score 5
	// (5 + 5 + 0) / 3 = 3.33: no room though one worker is idle.
	if !s.PoolSaturated([]picker.Candidate{deep, deep, idle}, false) {
		t.Error("mean score 3.33 with one idle worker: reported room")
	}
	// (5 + 0 + 0) / 3 = 1.67: room.
	if s.PoolSaturated([]picker.Candidate{deep, idle, idle}, false) {
		t.Error("mean score 1.67: reported no room")
	}
	// Unusable workers are left out of the mean: an ejected idle worker
	// does not dilute it.
	ejected := idle
	ejected.Worker.Ejected = true
	if !s.PoolSaturated([]picker.Candidate{deep, deep, idle, ejected, ejected}, false) {
		t.Error("ejected workers counted in the mean")
	}
	// Off (0): only the every-worker rule applies.
	off := s
	off.PoolMeanScore = 0
	if off.PoolSaturated([]picker.Candidate{deep, deep, idle}, false) {
		t.Error("pool mean score 0 still judged by the mean")
	}
	// The every-worker rule still applies under the mean: every worker
	// at its bound (score 1 each) is no room.
	if !s.PoolSaturated([]picker.Candidate{engine(2, 0), engine(2, 0)}, false) {
		t.Error("every worker saturated, mean below the score: reported room")
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		if (Saturation{PoolMeanScore: bad}).Validate() == nil {
			t.Errorf("pool mean score %g accepted", bad)
		}
	}
}
