package forecast

import "time"

// Holt is double exponential smoothing (level and trend), with the trend
// kept per second so irregular intervals extrapolate correctly: on a noise
// free line its forecast converges to the line.
type Holt struct {
	alpha, beta  float64
	level, trend float64 // trend in units per second
	last         time.Time
	n            int
}

// NewHolt smooths the level with alpha and the trend with beta.
func NewHolt(alpha, beta float64) *Holt { return &Holt{alpha: alpha, beta: beta} }

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
		h.level = h.alpha*v + (1-h.alpha)*(h.level+h.trend*dt)
		if dt > 0 {
			h.trend = h.beta*(h.level-prev)/dt + (1-h.beta)*h.trend
		}
	}
	h.last = t
	h.n++
}

func (h *Holt) Predict(horizon time.Duration) float64 {
	return h.level + h.trend*horizon.Seconds()
}
