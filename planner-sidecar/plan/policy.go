// Package plan is the planner's decision core: it takes what was observed
// of each pool and returns how many replicas each pool should have, with the
// terms that led there. Pure: no clocks, no I/O — the control loop, the
// simulator and the tests all drive it the same way.
package plan

import "time"

// Pool names the planner sizes. An aggregated fleet (workers doing both
// prefill and decode) is a single pool named PoolAggregated.
const (
	PoolPrefill    = "prefill"
	PoolDecode     = "decode"
	PoolAggregated = "aggregated"
)

// PoolObservation is what was seen of one pool over one interval.
type PoolObservation struct {
	Replicas int // ready, not draining
	Draining int
	Pending  int // requested but not ready yet (provisioning)

	RequestRate      float64 // requests per second arriving at the pool
	MeanInputTokens  float64
	MeanOutputTokens float64
	CacheHitRate     float64 // fraction of prompt tokens served from cache

	TTFTP90 time.Duration
	ITLP90  time.Duration
	// QueueDepth is requests waiting (summed over replicas); KVUsage is the
	// mean fraction of KV cache in use.
	QueueDepth float64
	KVUsage    float64
	// Idle lists draining replicas that have no requests left (safe to remove).
	Idle []string
	// Attainment is the fraction of the interval's first tokens and
	// inter-token gaps that met the targets, when the source measured it
	// (nil otherwise). Informational: reported as a metric, not a policy input.
	Attainment *Attainment `json:",omitempty"`
	// Ready names the ready, non-draining replicas (endpoints "ip:port" or
	// pod names), so that a scale-down can say which to drain. Empty when
	// the source cannot name them; the SLA policy then scales without
	// draining and says so.
	Ready []string
}

// Attainment is a fraction in [0, 1] per latency target; -1 = not measured.
type Attainment struct {
	TTFT, ITL float64
}

// Observation is one interval's input to a Policy.
type Observation struct {
	Time  time.Time
	Pools map[string]PoolObservation
}

// Decision is a Policy's output for one interval.
type Decision struct {
	Time time.Time
	// Desired is, per pool, how many replicas the pool's scale target
	// should have now: the serving ones plus those still draining (a
	// draining replica is removed only when it is listed in Remove).
	Desired map[string]int
	// Active is, per pool, how many replicas will serve once draining
	// completes (Desired minus replicas draining after this decision).
	Active map[string]int
	// Action is, per pool, "up", "down" or "hold".
	Action map[string]string
	// Drain lists, per pool, replicas to mark draining before removal;
	// Remove lists drained, idle replicas to remove now.
	Drain  map[string][]string
	Remove map[string][]string
	// Reason explains the decision in one line; Terms holds the numbers
	// behind it (forecast, model terms) for the journal.
	Reason string
	Terms  map[string]float64
}

// Policy decides pool sizes. The planner, the threshold (HPA-style)
// policy and static fleets all implement it, so the simulator compares
// them on equal terms.
type Policy interface {
	Name() string
	Decide(obs Observation) Decision
}
