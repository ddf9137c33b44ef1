package replay

import (
	"context"
	"fmt"
	"math"
	"time"
)

// An overload sweep answers "what does each policy still serve past
// capacity" (issue 26): it finds a reference policy's SLA capacity, then
// replays every policy at multiples of it with clients that abandon late
// requests (abandon.go), reporting goodput, attainment per band and
// tenant, fairness, shed and queue wait (goodput.go).
//
// Two choices keep the figures about steady overload rather than about
// the trace's end. Every replay covers the same span of arrivals
// (OverloadOptions.Span): the trace is cut where arrivals pass it, so a
// 3× replay has three times the requests of a 1× one and not the same
// requests squeezed into a third of the time (where a finite trace's
// overload lasts seconds and its drain dominates). And capacity is judged
// with the deadlines on, as the highest rate whose SLA attainment is at
// least 90 % (TTFT p90 within the SLA, counting abandoned and refused
// requests as misses).

// OverloadOptions configure Overload. Zero fields take the defaults noted.
type OverloadOptions struct {
	// Replay: fleet, seed, policies and the SLA; RateScale is swept and
	// AbandonAfter defaults to 1 here (clients give up at the SLA).
	Replay Options
	// Multiples of the capacity to replay at; default 1, 1.5, 2, 3.
	Multiples []float64
	// CapacityOf is the policy whose capacity the multiples are of;
	// default kvgate-flow. It must be among Replay.Policies.
	CapacityOf string
	// Span of arrivals each replay covers; default 30 s (fifteen times
	// the default SLA, so that most requests arrive to a backlog already
	// in steady state).
	Span time.Duration
	// Tolerance ends the capacity bisection once hi/lo ≤ 1+Tolerance;
	// default 0.1.
	Tolerance float64
	Progress  func(line string)
}

// TraceSource returns the requests arriving within span at rate × the
// workload's own arrival rate (timestamps unscaled: the replay divides
// them by the rate).
type TraceSource func(rate float64, span time.Duration) ([]TraceRequest, error)

// OverloadResult is an overload sweep's outcome; its JSON form is
// `kvgate-lab replay --overload … --json`.
type OverloadResult struct {
	Trace        string  `json:"trace"`
	Workers      int     `json:"workers"`
	TTFTSLAMs    float64 `json:"ttft_sla_ms"`
	AbandonAfter float64 `json:"abandon_after"`
	SpanS        float64 `json:"span_s"`
	CapacityOf   string  `json:"capacity_of"`
	Capacity     float64 `json:"capacity"` // rate multiple of the workload
	// Capacities is every policy's own SLA capacity, by the same
	// criterion; the rows are at multiples of CapacityOf's.
	Capacities map[string]float64 `json:"capacities"`
	Policies   []string           `json:"policies"`
	Rows       []OverloadRow      `json:"rows"`
}

// OverloadRow is every policy at one multiple of the capacity.
type OverloadRow struct {
	Multiple float64                  `json:"multiple"`
	Rate     float64                  `json:"rate"`
	Requests int                      `json:"requests"`
	Results  map[string]*PolicyResult `json:"results"`
}

// MeetsCapacitySLA is the capacity criterion: at least 90 % of requests
// within the TTFT SLA.
const MeetsCapacitySLA = 0.9

func (o *OverloadOptions) fill() error {
	if len(o.Multiples) == 0 {
		o.Multiples = []float64{1, 1.5, 2, 3}
	}
	if o.CapacityOf == "" {
		o.CapacityOf = PolicyKvgateFlow
	}
	if o.Span == 0 {
		o.Span = 30 * time.Second
	}
	if o.Tolerance == 0 {
		o.Tolerance = 0.1
	}
	if o.Replay.AbandonAfter == 0 {
		o.Replay.AbandonAfter = 1
	}
	for _, m := range o.Multiples {
		if !finiteIn(m, 0.01, 100) {
			return fmt.Errorf("overload: multiple %v outside [0.01, 100]", m)
		}
	}
	switch {
	case len(o.Multiples) > 16:
		return fmt.Errorf("overload: %d multiples, at most 16", len(o.Multiples))
	case o.Span < time.Second || o.Span > 24*time.Hour:
		return fmt.Errorf("overload: span %v outside [1s, 24h]", o.Span)
	case !finiteIn(o.Tolerance, 1e-3, 1):
		return fmt.Errorf("overload: tolerance %v outside [0.001, 1]", o.Tolerance)
	case o.Replay.RateScale != 0 && o.Replay.RateScale != 1:
		return fmt.Errorf("overload: rate scale %v is swept, leave it unset", o.Replay.RateScale)
	}
	if err := o.Replay.fill(); err != nil {
		return err
	}
	for _, p := range o.Replay.Policies {
		if p == o.CapacityOf {
			return nil
		}
	}
	return fmt.Errorf("overload: capacity policy %q is not among the policies %v", o.CapacityOf, o.Replay.Policies)
}

// Overload runs an overload sweep on the requests src yields.
func Overload(ctx context.Context, name string, src TraceSource, o OverloadOptions) (*OverloadResult, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	res := &OverloadResult{Trace: name, Workers: o.Replay.Workers, TTFTSLAMs: msOf(o.Replay.GoodputSLA),
		AbandonAfter: o.Replay.AbandonAfter, SpanS: o.Span.Seconds(), CapacityOf: o.CapacityOf, Policies: o.Replay.Policies}
	replayAt := func(policy string, idx uint64, rate float64) (*PolicyResult, int, error) {
		reqs, err := src(rate, o.Span)
		if err != nil {
			return nil, 0, err
		}
		opt := o.Replay
		opt.RateScale = rate
		if err := checkFits(reqs, &opt); err != nil {
			return nil, 0, err
		}
		pr, err := runPolicy(ctx, policy, idx, reqs, &opt)
		if err != nil {
			return nil, 0, fmt.Errorf("overload at rate ×%v: %w", rate, err)
		}
		if o.Progress != nil {
			o.Progress(fmt.Sprintf("overload %s ×%.3g: %d requests, goodput %.2f req/s, attainment %.3f, abandoned %.3f (%.1fs)",
				policy, rate, len(reqs), pr.GoodputRPS, pr.SLAAttainment, pr.AbandonRate, pr.Elapsed.Seconds()))
		}
		return pr, len(reqs), nil
	}
	so := SweepOptions{MinRate: 1.0 / 64, MaxRate: 64, Tolerance: o.Tolerance}
	res.Capacities = map[string]float64{}
	for i, p := range o.Replay.Policies {
		seen := map[float64]*PolicyResult{}
		eval := func(rate float64) (SweepPoint, error) {
			rate = roundRate(rate)
			pr, ok := seen[rate]
			if !ok {
				var err error
				if pr, _, err = replayAt(p, uint64(i), rate); err != nil {
					return SweepPoint{}, err
				}
				seen[rate] = pr
			}
			return SweepPoint{Rate: rate, MeetsSLA: pr.SLAAttainment >= MeetsCapacitySLA}, nil
		}
		c, _, err := bisectCapacity(eval, &so)
		if err != nil {
			return nil, err
		}
		res.Capacities[p] = c
	}
	capacity := res.Capacities[o.CapacityOf]
	if capacity == 0 {
		return nil, fmt.Errorf("overload: %s misses the SLA even at ×%v", o.CapacityOf, so.MinRate)
	}
	res.Capacity = capacity
	for _, m := range o.Multiples {
		rate := roundRate(capacity * m)
		row := OverloadRow{Multiple: m, Rate: rate, Results: map[string]*PolicyResult{}}
		for i, p := range o.Replay.Policies {
			pr, n, err := replayAt(p, uint64(i), rate)
			if err != nil {
				return nil, err
			}
			row.Requests = n
			row.Results[p] = pr
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// CutSpan is the requests of reqs arriving within span at rate × the
// trace's own rate: a TraceSource over a fixed trace (which may end
// sooner).
func CutSpan(reqs []TraceRequest, rate float64, span time.Duration) []TraceRequest {
	limit := int64(math.Floor(rate * float64(span) / float64(time.Millisecond)))
	n := 0
	for n < len(reqs) && reqs[n].Timestamp-reqs[0].Timestamp <= limit {
		n++
	}
	return reqs[:n]
}
