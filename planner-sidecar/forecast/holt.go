package forecast

import (
	"math"
	"time"
)

// Holt is double exponential smoothing (level and trend), with the trend
// kept per second so irregular intervals extrapolate correctly: on a noise
// free line its forecast converges to the line.
//
// With a damping time τ > 0 it is Gardner and McKenzie's damped trend in
// continuous time: the trend decays as e^{−t/τ}, so a forecast h ahead
// adds trend × τ(1 − e^{−h/τ}) instead of trend × h. A ramp is followed
// for about τ and then assumed to level off — loads turn (a diurnal peak,
// a burst ending), and an undamped trend read at a turn overshoots by the
// full horizon.
type Holt struct {
	alpha, beta  float64
	damping      float64 // τ in seconds; 0 = undamped
	level, trend float64 // trend in units per second
	last         time.Time
	n            int
}

// NewHolt smooths the level with alpha and the trend with beta, and damps
// the trend with time constant tau (tau <= 0: undamped).
func NewHolt(alpha, beta float64, tau time.Duration) *Holt {
	return &Holt{alpha: alpha, beta: beta, damping: max(tau.Seconds(), 0)}
}

// reach is how far, in trend-seconds, the trend carries over h seconds.
func (h *Holt) reach(sec float64) float64 {
	if h.damping <= 0 {
		return sec
	}
	return h.damping * (1 - math.Exp(-sec/h.damping))
}

func (h *Holt) Observe(t time.Time, v float64) {
	switch h.n {
	case 0:
		h.level = v
	case 1:
		// The first trend is the first difference: starting it at zero
		// would make every ramp's forecast lag for many intervals.
		if dt := t.Sub(h.last).Seconds(); dt > 0 {
			h.trend = (v - h.level) / dt
		}
		h.level = v
	default:
		dt := t.Sub(h.last).Seconds()
		prev := h.level
		h.level = h.alpha*v + (1-h.alpha)*(h.level+h.trend*h.reach(dt))
		if dt > 0 {
			decayed := h.trend
			if h.damping > 0 {
				decayed *= math.Exp(-dt / h.damping)
			}
			h.trend = h.beta*(h.level-prev)/dt + (1-h.beta)*decayed
		}
	}
	h.last = t
	h.n++
}

func (h *Holt) Predict(horizon time.Duration) float64 {
	return h.level + h.trend*h.reach(horizon.Seconds())
}
