package picker

import (
	"math/bits"
	"slices"
)

// fleetView summarises the eligible candidates for the kvgate policy's
// fleet-relative terms.
//
// Unmeasured workers take the median of the measured ones, and the
// configured default applies only when none is measured. A fresh fleet
// otherwise compares a measured worker against the default: extproc
// measures a rate from time to first byte (extproc/ticket.go), which
// includes queueing and the engine's fixed step cost, so a measured worker
// looks several times slower than DefaultPrefillTokensPerSec, and the
// second request of a shared prefix left the worker that cached it for an
// unmeasured one. Compared with its peers' measurements, a worker is judged
// by the same yardstick.
type fleetView struct {
	fallback float64 // rate of an unmeasured worker
	mean     float64 // mean rate over the eligible candidates
	uniform  bool    // every eligible candidate has the same rate
}

// newFleetView takes the measured rates (reordered in place).
func newFleetView(measured []float64, defaultRate float64) fleetView {
	f := fleetView{fallback: defaultRate, uniform: true}
	if n := len(measured); n > 0 {
		// The two middle values by selection, not a sort: a sort of the
		// rates was a fifth of a 64-worker kvgate pick. The values, and so
		// the median, are the sort's exactly.
		hi := selectNth(measured, n/2)
		f.fallback = hi
		if n%2 == 0 {
			// Everything left of n/2 is ≤ hi after selectNth: the lower
			// middle value is their maximum.
			f.fallback = (slices.Max(measured[:n/2]) + hi) / 2
		}
	}
	return f
}

// selectNth reorders v so that v[k] holds the value a sort would put
// there, with nothing greater before it and nothing smaller after it, and
// returns v[k]. Quickselect with a median-of-three pivot: linear on
// average; a run that keeps splitting badly (more rounds than twice the
// bits of len(v)) sorts what is left instead, so it is never quadratic.
// v holds no NaN (measuredRate).
func selectNth(v []float64, k int) float64 {
	lo, hi := 0, len(v)-1
	for rounds := 2 * bits.Len(uint(len(v))); lo < hi; rounds-- {
		if rounds == 0 {
			slices.Sort(v[lo : hi+1])
			break
		}
		// Median of three to v[hi] as the pivot (Lomuto partition).
		mid := lo + (hi-lo)/2
		if v[mid] < v[lo] {
			v[mid], v[lo] = v[lo], v[mid]
		}
		if v[hi] < v[lo] {
			v[hi], v[lo] = v[lo], v[hi]
		}
		if v[mid] < v[hi] {
			v[mid], v[hi] = v[hi], v[mid]
		}
		pivot, store := v[hi], lo
		for i := lo; i < hi; i++ {
			if v[i] < pivot {
				v[i], v[store] = v[store], v[i]
				store++
			}
		}
		v[store], v[hi] = v[hi], v[store]
		switch {
		case k < store:
			hi = store - 1
		case k > store:
			lo = store + 1
		default:
			return v[k]
		}
	}
	return v[k]
}

func (f *fleetView) rateOf(l *Load) float64 { return prefillTokensPerSec(l, f.fallback) }

// meanOver sets mean and uniform from the eligible candidates' rates (a
// rate not measured counts as the fallback), summed in candidate order.
// Only the throughput-aware prefill term reads them.
func (f *fleetView) meanOver(cands []Candidate, terms []Terms, eligible int) {
	first := -1.0
	for i := range cands {
		if !terms[i].Eligible {
			continue
		}
		rate := f.rateOf(&cands[i].Load)
		f.mean += rate
		if first < 0 {
			first = rate
		} else if rate != first {
			f.uniform = false
		}
	}
	f.mean /= float64(eligible)
}
