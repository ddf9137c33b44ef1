package picker

import "slices"

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
		slices.Sort(measured)
		f.fallback = measured[n/2]
		if n%2 == 0 {
			f.fallback = (measured[n/2-1] + measured[n/2]) / 2
		}
	}
	return f
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
