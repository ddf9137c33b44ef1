package plannersim

import (
	"fmt"
	"math"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// Threshold is a Kubernetes HorizontalPodAutoscaler over two engine
// metrics per pool, with the HPA's algorithm
// (kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale):
//
//   - per metric, the usage ratio is value / target, value being the mean
//     over ready replicas; within Tolerance (10 %) of 1 the metric asks for
//     no change, else for ceil(ratio × ready replicas) (replicas still
//     provisioning count as 0, the HPA's rule for unready pods);
//   - with several metrics, the largest count wins;
//   - scale-up: at most max(2 × current, current + 4) per decision (the
//     default 100 % / 4 pods per 15 s policy, our decisions being 30 s apart);
//   - scale-down: the largest recommendation of the last DownStabilization
//     (300 s) is used, so a short dip does not shed replicas.
//
// The metrics are GPU utilisation (DCGM, the classic HPA resource target),
// vllm:num_requests_waiting (mean queue depth per replica) and
// vllm:kv_cache_usage_perc, the usual ones for LLM engines. Queue depth
// alone only moves once a replica is saturated, and with a 120 s
// provisioning delay the HPA then overshoots by far; utilisation moves
// before saturation.
type Threshold struct {
	UtilizationTarget float64       // busy fraction; default 0.7
	QueueTarget       float64       // waiting requests per replica; default 10
	KVTarget          float64       // KV cache usage fraction; default 0.7
	Tolerance         float64       // default 0.1
	DownStabilization time.Duration // default 300 s

	history map[string][]recommendation
	busy    map[string]float64
}

type recommendation struct {
	t time.Time
	n int
}

var _ plan.Policy = (*Threshold)(nil)

// NewThreshold returns an HPA-style policy; zero fields take the defaults.
func NewThreshold(t Threshold) (*Threshold, error) {
	if t.UtilizationTarget == 0 {
		t.UtilizationTarget = 0.7
	}
	if t.QueueTarget == 0 {
		t.QueueTarget = 10
	}
	if t.KVTarget == 0 {
		t.KVTarget = 0.7
	}
	if t.Tolerance == 0 {
		t.Tolerance = 0.1
	}
	if t.DownStabilization == 0 {
		t.DownStabilization = 300 * time.Second
	}
	switch {
	case !(t.UtilizationTarget > 0) || t.UtilizationTarget > 1:
		return nil, fmt.Errorf("threshold: utilisation target %v: want in (0, 1]", t.UtilizationTarget)
	case !(t.QueueTarget > 0) || math.IsInf(t.QueueTarget, 0):
		return nil, fmt.Errorf("threshold: queue target %v: want > 0", t.QueueTarget)
	case !(t.KVTarget > 0) || t.KVTarget > 1:
		return nil, fmt.Errorf("threshold: KV target %v: want in (0, 1]", t.KVTarget)
	case t.Tolerance < 0 || t.Tolerance >= 1:
		return nil, fmt.Errorf("threshold: tolerance %v: want in [0, 1)", t.Tolerance)
	case t.DownStabilization < 0:
		return nil, fmt.Errorf("threshold: stabilization window %v is negative", t.DownStabilization)
	}
	t.history = map[string][]recommendation{}
	t.busy = map[string]float64{}
	return &t, nil
}

// ObserveUtilization records a pool's GPU utilisation for the next Decide.
func (t *Threshold) ObserveUtilization(pool string, busy float64) { t.busy[pool] = busy }

// Name is "threshold".
func (t *Threshold) Name() string { return "threshold" }

// Decide applies the HPA algorithm to each pool.
func (t *Threshold) Decide(obs plan.Observation) plan.Decision {
	d := plan.Decision{Time: obs.Time, Desired: map[string]int{}, Action: map[string]string{}, Terms: map[string]float64{}}
	for name, po := range obs.Pools {
		current := po.Replicas + po.Pending
		want := current
		if po.Replicas > 0 {
			// Per metric, the usage ratio value/target; inside the
			// tolerance the metric proposes no change.
			propose := func(ratio float64) int {
				if math.Abs(ratio-1) <= t.Tolerance {
					return current
				}
				return int(math.Ceil(ratio * float64(po.Replicas)))
			}
			byQueue := propose(po.QueueDepth / float64(po.Replicas) / t.QueueTarget)
			byKV := propose(po.KVUsage / t.KVTarget)
			// Utilisation only where it measures load: a decode replica
			// steps whenever it holds any sequence, so it reads ~100 %
			// busy at any load and would pin the pool at its maximum.
			byUtil := 0
			if name != plan.PoolDecode {
				byUtil = propose(t.busy[name] / t.UtilizationTarget)
			}
			want = max(byQueue, byKV, byUtil, 1)
			d.Terms[name+".by_queue"], d.Terms[name+".by_kv"], d.Terms[name+".by_utilization"] = float64(byQueue), float64(byKV), float64(byUtil)
		}
		if want > current {
			want = min(want, max(2*current, current+4))
		}
		// Scale-down stabilization: the highest recommendation in the window.
		h := append(t.history[name], recommendation{obs.Time, want})
		for len(h) > 0 && obs.Time.Sub(h[0].t) > t.DownStabilization {
			h = h[1:]
		}
		t.history[name] = h
		if want < current {
			for _, r := range h {
				want = max(want, r.n)
			}
			want = min(want, current)
		}
		d.Desired[name] = want
		switch {
		case want > current:
			d.Action[name] = "up"
		case want < current:
			d.Action[name] = "down"
		default:
			d.Action[name] = "hold"
		}
	}
	clear(t.busy)
	d.Reason = fmt.Sprintf("HPA: utilisation target %g, queue target %g/replica, KV target %g, tolerance %g, down stabilization %v", t.UtilizationTarget, t.QueueTarget, t.KVTarget, t.Tolerance, t.DownStabilization)
	return d
}
