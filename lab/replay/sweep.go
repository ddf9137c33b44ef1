package replay

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// A capacity sweep answers "how much traffic does each policy serve within
// the SLA": for each policy, the highest arrival-rate multiple of the trace
// at which TTFT p90 (and, when set, ITL p90) stays within the SLA, found by
// bracketing and bisection on the rate multiple. Near capacity is where a
// KV-aware router earns its keep; at the trace's own rate a fleet is mostly
// idle and every policy looks alike.
//
// The trace is finite, so above capacity the queue it builds drains after
// the last arrival: figures beyond capacity depend on the trace's length,
// and a sweep states the requests it replayed.

// SweepOptions configure Sweep. Zero fields take the defaults noted.
type SweepOptions struct {
	Replay  Options       // fleet, seed and policies; RateScale is swept
	TTFTSLA time.Duration // TTFT p90 bound; default 2 s
	ITLSLA  time.Duration // ITL p90 bound; 0: none
	// MinRate and MaxRate bound the search; default 1/64 and 64.
	MinRate, MaxRate float64
	// Tolerance ends the bisection once hi/lo ≤ 1+Tolerance; default 0.05.
	Tolerance float64
	// Overload is the multiple of each policy's capacity reported as the
	// overload point; default 4/3.
	Overload float64
	// Progress, if set, is called after each replay with one line.
	Progress func(line string)
}

// SweepPoint is one replay of one policy at one rate multiple.
type SweepPoint struct {
	Rate          float64 `json:"rate"`
	HitRatio      float64 `json:"hit_ratio"`
	TTFTP90Ms     float64 `json:"ttft_p90_ms"`
	ITLP90Ms      float64 `json:"itl_p90_ms"`
	ThroughputRPS float64 `json:"throughput_rps"`
	MeetsSLA      bool    `json:"meets_sla"`
}

// PolicySweep is one policy's sweep. Capacity is the highest rate multiple
// found meeting the SLA (0 when even MinRate misses it; MaxRate when
// CapacityAtLeast, the search having hit its ceiling). Nominal, AtCapacity
// and Overloaded are the points at 1×, at Capacity and at Overload ×
// Capacity; Points holds every replay, by rate.
type PolicySweep struct {
	Policy          string     `json:"policy"`
	Capacity        float64    `json:"capacity"`
	CapacityAtLeast bool       `json:"capacity_at_least,omitempty"`
	Nominal         SweepPoint `json:"nominal"`
	AtCapacity      SweepPoint `json:"at_capacity"`
	Overloaded      SweepPoint `json:"overloaded"`
	// AtOverloadOf is this policy at a kvgate policy's overload rate
	// (SweepResult.OverloadRates), keyed by that policy, so that every
	// policy is compared at one load.
	AtOverloadOf map[string]SweepPoint `json:"at_overload_of,omitempty"`
	Points       []SweepPoint          `json:"points"`
	// NominalHostHitRatio is the part of Nominal's hit ratio loaded from
	// a host tier (Options.HostBlocks).
	NominalHostHitRatio float64 `json:"nominal_host_hit_ratio,omitempty"`
}

// SweepResult is a sweep's outcome; its JSON form is `kvgate-lab replay --sweep
// --json`.
type SweepResult struct {
	Trace             string        `json:"trace"`
	Workers           int           `json:"workers"`
	Requests          int           `json:"requests"`
	BlockSize         int           `json:"block_size"`
	GPUBlocks         int           `json:"gpu_blocks"`
	TTFTSLAMs         float64       `json:"ttft_sla_ms"`
	ITLSLAMs          float64       `json:"itl_sla_ms,omitempty"`
	Overload          float64       `json:"overload"`
	IdealHitRatio     float64       `json:"ideal_hit_ratio"`
	PooledLRUHitRatio float64       `json:"pooled_lru_hit_ratio"`
	Policies          []PolicySweep `json:"policies"`
	// OverloadRates are the kvgate policies' overload rates at which every
	// policy is also replayed.
	OverloadRates []SubjectRate `json:"overload_rates,omitempty"`
}

// Policy returns the named policy's sweep, or nil.
func (r *SweepResult) Policy(name string) *PolicySweep {
	for i := range r.Policies {
		if r.Policies[i].Policy == name {
			return &r.Policies[i]
		}
	}
	return nil
}

func (o *SweepOptions) fill() error {
	if o.TTFTSLA == 0 {
		o.TTFTSLA = 2 * time.Second
	}
	if o.MinRate == 0 {
		o.MinRate = 1.0 / 64
	}
	if o.MaxRate == 0 {
		o.MaxRate = 64
	}
	if o.Tolerance == 0 {
		o.Tolerance = 0.05
	}
	if o.Overload == 0 {
		o.Overload = 4.0 / 3
	}
	switch {
	case o.TTFTSLA < time.Millisecond || o.TTFTSLA > time.Hour:
		return fmt.Errorf("sweep: TTFT SLA %v outside [1ms, 1h]", o.TTFTSLA)
	case o.ITLSLA < 0 || o.ITLSLA > time.Hour:
		return fmt.Errorf("sweep: ITL SLA %v outside [0, 1h]", o.ITLSLA)
	case !finiteIn(o.MinRate, 1e-3, 1e4) || !finiteIn(o.MaxRate, 1e-3, 1e4) || o.MinRate > 1 || o.MaxRate < 1:
		return fmt.Errorf("sweep: rate bounds [%v, %v]: want 0.001 ≤ min ≤ 1 ≤ max ≤ 10000", o.MinRate, o.MaxRate)
	case !finiteIn(o.Tolerance, 1e-3, 1):
		return fmt.Errorf("sweep: tolerance %v outside [0.001, 1]", o.Tolerance)
	case !finiteIn(o.Overload, 1, 10):
		return fmt.Errorf("sweep: overload multiple %v outside [1, 10]", o.Overload)
	case o.Replay.RateScale != 0 && o.Replay.RateScale != 1:
		return fmt.Errorf("sweep: rate scale %v is swept, leave it unset", o.Replay.RateScale)
	}
	return o.Replay.fill()
}

func finiteIn(v, lo, hi float64) bool { return !math.IsNaN(v) && v >= lo && v <= hi }

// Sweep finds each policy's SLA capacity on reqs. Replays of one policy at
// one rate are run once and reused.
func Sweep(ctx context.Context, name string, reqs []TraceRequest, o SweepOptions) (*SweepResult, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	opt := o.Replay
	if err := checkFits(reqs, &opt); err != nil {
		return nil, err
	}
	res := &SweepResult{
		Trace: name, Workers: opt.Workers, Requests: len(reqs), BlockSize: opt.BlockSize, GPUBlocks: opt.GPUBlocks,
		TTFTSLAMs: msOf(o.TTFTSLA), ITLSLAMs: msOf(o.ITLSLA), Overload: o.Overload,
		IdealHitRatio:     IdealHitRatio(reqs, opt.BlockSize),
		PooledLRUHitRatio: PooledLRUHitRatio(reqs, opt.BlockSize, opt.Workers*opt.GPUBlocks),
	}
	for i, p := range opt.Policies {
		ps, err := sweepPolicy(ctx, p, uint64(i), reqs, opt, &o)
		if err != nil {
			return nil, err
		}
		res.Policies = append(res.Policies, ps)
	}
	// Every policy is also replayed at each kvgate policy's overload rate,
	// so that they are compared at one load.
	for _, subj := range []string{PolicyKvgate, PolicyKvgateEventsOnly} {
		ref := res.Policy(subj)
		if ref == nil || ref.Capacity == 0 {
			continue
		}
		rate := ref.Overloaded.Rate
		res.OverloadRates = append(res.OverloadRates, SubjectRate{Policy: subj, Rate: rate})
		for i := range res.Policies {
			p := &res.Policies[i]
			if p.AtOverloadOf == nil {
				p.AtOverloadOf = map[string]SweepPoint{}
			}
			if pt, ok := pointAt(p.Points, rate); ok {
				p.AtOverloadOf[subj] = pt
				continue
			}
			o2 := opt
			o2.RateScale = rate
			pr, err := runPolicy(ctx, p.Policy, uint64(i), reqs, &o2)
			if err != nil {
				return nil, fmt.Errorf("sweep at %s's overload rate ×%v: %w", subj, rate, err)
			}
			pt := newSweepPoint(rate, pr, &o)
			p.AtOverloadOf[subj] = pt
			p.Points = append(p.Points, pt)
			slices.SortFunc(p.Points, func(a, b SweepPoint) int { return cmp.Compare(a.Rate, b.Rate) })
		}
	}
	return res, nil
}

// SubjectRate is a kvgate policy's overload rate, at which every policy is
// replayed (PolicySweep.AtOverloadOf).
type SubjectRate struct {
	Policy string  `json:"policy"`
	Rate   float64 `json:"rate"`
}

func pointAt(pts []SweepPoint, rate float64) (SweepPoint, bool) {
	for _, pt := range pts {
		if pt.Rate == rate {
			return pt, true
		}
	}
	return SweepPoint{}, false
}

func newSweepPoint(rate float64, pr *PolicyResult, o *SweepOptions) SweepPoint {
	pt := SweepPoint{Rate: rate, HitRatio: pr.HitRatio, TTFTP90Ms: pr.TTFTP90Ms, ITLP90Ms: pr.ITLP90Ms, ThroughputRPS: pr.ThroughputRPS}
	pt.MeetsSLA = pt.TTFTP90Ms <= msOf(o.TTFTSLA) && (o.ITLSLA == 0 || pt.ITLP90Ms <= msOf(o.ITLSLA))
	return pt
}

func sweepPolicy(ctx context.Context, policy string, idx uint64, reqs []TraceRequest, base Options, o *SweepOptions) (PolicySweep, error) {
	seen := map[float64]SweepPoint{}
	var nominalHost float64
	eval := func(rate float64) (SweepPoint, error) {
		rate = roundRate(rate)
		if pt, ok := seen[rate]; ok {
			return pt, nil
		}
		opt := base
		opt.RateScale = rate
		pr, err := runPolicy(ctx, policy, idx, reqs, &opt)
		if err != nil {
			return SweepPoint{}, fmt.Errorf("sweep at rate ×%v: %w", rate, err)
		}
		pt := newSweepPoint(rate, pr, o)
		seen[rate] = pt
		if rate == 1 {
			nominalHost = pr.HostHitRatio
		}
		if o.Progress != nil {
			verdict := "misses"
			if pt.MeetsSLA {
				verdict = "meets"
			}
			o.Progress(fmt.Sprintf("sweep %s ×%.3g: TTFT p90 %.0f ms, hit %.3f, %.2f req/s (%s SLA; %.1fs)",
				policy, rate, pt.TTFTP90Ms, pt.HitRatio, pt.ThroughputRPS, verdict, pr.Elapsed.Seconds()))
		}
		return pt, nil
	}
	ps := PolicySweep{Policy: policy}
	capacity, atLeast, err := bisectCapacity(eval, o)
	if err != nil {
		return ps, err
	}
	ps.Capacity, ps.CapacityAtLeast = capacity, atLeast
	if ps.Nominal, err = eval(1); err != nil {
		return ps, err
	}
	ps.NominalHostHitRatio = nominalHost
	if capacity > 0 {
		if ps.AtCapacity, err = eval(capacity); err != nil {
			return ps, err
		}
		if ps.Overloaded, err = eval(min(capacity*o.Overload, 1e4)); err != nil {
			return ps, err
		}
	}
	for _, pt := range seen {
		ps.Points = append(ps.Points, pt)
	}
	slices.SortFunc(ps.Points, func(a, b SweepPoint) int { return cmp.Compare(a.Rate, b.Rate) })
	return ps, nil
}

// bisectCapacity brackets the capacity by doubling or halving from 1×, then
// bisects geometrically until hi/lo ≤ 1+Tolerance; it returns lo, the
// highest rate seen meeting the SLA. TTFT grows with load in a queueing
// system, so the search assumes meeting the SLA is monotone in the rate;
// where noise breaks that, the answer is a rate that did meet it.
func bisectCapacity(eval func(float64) (SweepPoint, error), o *SweepOptions) (float64, bool, error) {
	pt, err := eval(1)
	if err != nil {
		return 0, false, err
	}
	lo, hi := 0.0, 0.0 // lo meets, hi misses; 0 = not found yet
	if pt.MeetsSLA {
		lo = 1
		for r := 2.0; ; r *= 2 {
			r = min(r, o.MaxRate)
			if pt, err = eval(r); err != nil {
				return 0, false, err
			}
			if !pt.MeetsSLA {
				hi = r
				break
			}
			lo = r
			if r >= o.MaxRate {
				return lo, true, nil
			}
		}
	} else {
		hi = 1
		for r := 0.5; ; r /= 2 {
			r = max(r, o.MinRate)
			if pt, err = eval(r); err != nil {
				return 0, false, err
			}
			if pt.MeetsSLA {
				lo = r
				break
			}
			hi = r
			if r <= o.MinRate {
				return 0, false, nil
			}
		}
	}
	for hi/lo > 1+o.Tolerance {
		mid := math.Sqrt(lo * hi)
		if pt, err = eval(mid); err != nil {
			return 0, false, err
		}
		if pt.MeetsSLA {
			lo = roundRate(mid)
		} else {
			hi = roundRate(mid)
		}
	}
	return lo, false, nil
}

// roundRate keeps four significant digits, so that a rate reached twice
// by different arithmetic is one cached replay and prints cleanly.
func roundRate(r float64) float64 {
	if r <= 0 {
		return r
	}
	p := math.Pow(10, 3-math.Floor(math.Log10(r)))
	return math.Round(r*p) / p
}
