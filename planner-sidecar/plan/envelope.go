package plan

import (
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/forecast"
)

// windowMax is the maximum of a signal over a sliding time window, kept as
// a monotonic deque (each sample is pushed and popped once), so a window of
// a day at 30 s decisions costs a few thousand samples at most, not a scan
// per decision.
type windowMax struct {
	window time.Duration
	q      []forecast.Sample // decreasing in V, increasing in T
}

// maxWindowSamples bounds the deque whatever the window and interval: the
// oldest entry (the current maximum) is dropped first beyond it.
const maxWindowSamples = 1 << 14

// add records v at t and returns the maximum over (t − window, t].
func (w *windowMax) add(t time.Time, v float64) float64 {
	for len(w.q) > 0 && w.q[len(w.q)-1].V <= v {
		w.q = w.q[:len(w.q)-1]
	}
	w.q = append(w.q, forecast.Sample{T: t, V: v})
	drop := max(len(w.q)-maxWindowSamples, 0)
	for drop < len(w.q)-1 && t.Sub(w.q[drop].T) >= w.window {
		drop++
	}
	w.q = w.q[drop:]
	return w.q[0].V
}
