package perfmodel

import (
	"math"
	"time"
)

// Correction tracks how far observed latencies are from the profile's
// prediction, as Dynamo's planner does (observed/expected TTFT and ITL):
// an EWMA of the ratio, clamped so one bad interval (a cold start, a
// scrape gap) cannot swing sizing without bound. The planner divides its
// latency targets by the factors: a fleet running 20 % slower than
// profiled is sized as if the target were 20 % tighter.
type Correction struct {
	TTFT float64 `json:"ttft"`
	ITL  float64 `json:"itl"`
	// Alpha is the EWMA weight of a new ratio; Min and Max clamp the factors.
	Alpha float64 `json:"alpha"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
}

// NewCorrection starts with both factors at 1.
func NewCorrection(alpha, lo, hi float64) Correction {
	return Correction{TTFT: 1, ITL: 1, Alpha: alpha, Min: lo, Max: hi}
}

// Observe folds one interval's observed and expected latencies in; zero
// (unmeasured) values leave the factor unchanged.
func (c *Correction) Observe(observedTTFT, expectedTTFT, observedITL, expectedITL time.Duration) {
	c.TTFT = c.fold(c.TTFT, observedTTFT, expectedTTFT)
	c.ITL = c.fold(c.ITL, observedITL, expectedITL)
}

func (c *Correction) fold(f float64, obs, exp time.Duration) float64 {
	if obs <= 0 || exp <= 0 {
		return f
	}
	r := float64(obs) / float64(exp)
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return f
	}
	f = (1-c.Alpha)*f + c.Alpha*r
	return min(max(f, c.Min), c.Max)
}

// Target is a latency target tightened (or loosened) by a factor.
func Target(target time.Duration, factor float64) time.Duration {
	if factor <= 0 {
		return target
	}
	return time.Duration(float64(target) / factor)
}
