package collect

import (
	"math"
	"sort"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// bucket is one cumulative histogram bucket: count of observations ≤ le.
type bucket struct {
	le    float64
	count float64
}

// quantile is Prometheus's histogram_quantile over cumulative buckets
// (promql/quantile.go): linear interpolation inside the bucket where the
// rank falls, the lowest bucket interpolated from 0 when its bound is
// positive, and the +Inf bucket answered with the highest finite bound.
// NaN when there are no observations.
func quantile(q float64, bs []bucket) float64 {
	if len(bs) == 0 {
		return math.NaN()
	}
	bs = append([]bucket(nil), bs...)
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if !math.IsInf(bs[len(bs)-1].le, 1) {
		return math.NaN()
	}
	// Counts of a difference of two scrapes may dip from jitter; keep them
	// monotonic as Prometheus does.
	for i := 1; i < len(bs); i++ {
		bs[i].count = max(bs[i].count, bs[i-1].count)
	}
	total := bs[len(bs)-1].count
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	i := sort.Search(len(bs)-1, func(i int) bool { return bs[i].count >= rank })
	if i == len(bs)-1 {
		if len(bs) < 2 {
			return math.NaN()
		}
		return bs[len(bs)-2].le
	}
	if i == 0 && bs[0].le <= 0 {
		return bs[0].le
	}
	lo, loCount := 0.0, 0.0
	if i > 0 {
		lo, loCount = bs[i-1].le, bs[i-1].count
	}
	hi, hiCount := bs[i].le, bs[i].count
	if hiCount == loCount {
		return hi
	}
	return lo + (hi-lo)*(rank-loCount)/(hiCount-loCount)
}

// fractionBelow is the share of observations ≤ x, interpolated linearly
// inside the bucket that contains x (the inverse of quantile). NaN when
// there are no observations.
func fractionBelow(x float64, bs []bucket) float64 {
	if len(bs) == 0 {
		return math.NaN()
	}
	bs = append([]bucket(nil), bs...)
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	for i := 1; i < len(bs); i++ {
		bs[i].count = max(bs[i].count, bs[i-1].count)
	}
	total := bs[len(bs)-1].count
	if total <= 0 || !math.IsInf(bs[len(bs)-1].le, 1) {
		return math.NaN()
	}
	lo, loCount := 0.0, 0.0
	for _, b := range bs {
		if x < b.le {
			if math.IsInf(b.le, 1) {
				// Past the highest finite bound: only what is known below it.
				return loCount / total
			}
			if b.le <= lo {
				return loCount / total
			}
			return (loCount + (b.count-loCount)*(x-lo)/(b.le-lo)) / total
		}
		lo, loCount = b.le, b.count
	}
	return 1
}

// attainment builds the observation's attainment from interval buckets.
func attainment(ttft, itl []bucket, ttftTarget, itlTarget float64) *plan.Attainment {
	if ttftTarget <= 0 && itlTarget <= 0 {
		return nil
	}
	a := &plan.Attainment{TTFT: -1, ITL: -1}
	if v := fractionBelow(ttftTarget, ttft); ttftTarget > 0 && !math.IsNaN(v) {
		a.TTFT = v
	}
	if v := fractionBelow(itlTarget, itl); itlTarget > 0 && !math.IsNaN(v) {
		a.ITL = v
	}
	if a.TTFT < 0 && a.ITL < 0 {
		return nil
	}
	return a
}

// p90 is the 90th percentile for the planner: when it falls inside the
// lowest bucket, interpolating from 0 invents a value (vLLM's lowest ITL
// bucket is 10 ms, so sub-10 ms gaps would read as 9 ms), so it is
// reported unmeasured (NaN) — the policy then skips its latency
// correction rather than act on a number the histogram cannot give.
func p90(bs []bucket) float64 {
	v := quantile(0.9, bs)
	lowest := math.Inf(1)
	for _, b := range bs {
		lowest = min(lowest, b.le)
	}
	if v < lowest {
		return math.NaN()
	}
	return v
}
