package forecast

import "time"

// EWMA is exponential smoothing of the level, with no trend: on a ramp of
// slope b sampled every Δ it lags the line by b·Δ·(1−α)/α.
type EWMA struct {
	alpha float64
	level float64
	seen  bool
}

// NewEWMA smooths with weight alpha on each new sample.
func NewEWMA(alpha float64) *EWMA { return &EWMA{alpha: alpha} }

func (e *EWMA) Observe(_ time.Time, v float64) {
	if !e.seen {
		e.level, e.seen = v, true
		return
	}
	e.level = e.alpha*v + (1-e.alpha)*e.level
}

func (e *EWMA) Predict(time.Duration) float64 { return e.level }
