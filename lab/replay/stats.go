package replay

import (
	"math"
	"slices"
	"time"

	"github.com/kvgate/kvgate/picker"
)

// percentile is the nearest-rank p-th percentile (p in (0, 100]) of sorted
// values; 0 for none.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func (s *simulation) result() *PolicyResult {
	slices.Sort(s.ttft)
	slices.Sort(s.e2e)
	slices.Sort(s.itl)
	r := &PolicyResult{
		TTFTP50Ms: percentile(s.ttft, 50),
		TTFTP90Ms: percentile(s.ttft, 90),
		TTFTP99Ms: percentile(s.ttft, 99),
		ITLP50Ms:  percentile(s.itl, 50),
		ITLP90Ms:  percentile(s.itl, 90),
		E2EP90Ms:  percentile(s.e2e, 90),
		TTFTsMs:   s.ttft,
	}
	if s.promptTok > 0 {
		r.HitRatio = float64(s.cachedTok) / float64(s.promptTok)
	}
	if span := (s.lastEnd - s.firstArrival).Seconds(); span > 0 {
		r.ThroughputRPS = float64(s.completed) / span
	}
	total, most := 0, 0
	for _, n := range s.routed {
		total += n
		most = max(most, n)
	}
	if total > 0 {
		r.LoadImbalance = float64(most) / (float64(total) / float64(len(s.routed)))
	}
	if s.picks > 0 {
		r.TermMeans = make(map[string]float64, picker.NumTerms)
		for _, t := range picker.TermList() {
			r.TermMeans[t.Name] = s.termSum[t.ID] / float64(s.picks)
		}
	}
	for b := range s.bucketP {
		if s.bucketP[b] == 0 {
			continue
		}
		r.HitOverTime = append(r.HitOverTime, HitPoint{At: s.bucket * time.Duration(b), HitRatio: float64(s.bucketCached[b]) / float64(s.bucketP[b])})
	}
	return r
}
