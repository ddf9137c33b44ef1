package forecast

import "time"

// Kalman is a constant-velocity Kalman filter on (level, trend): the trend
// follows a random walk driven by white acceleration noise (the standard
// continuous white-noise model, Q = q·[[Δ³/3, Δ²/2], [Δ²/2, Δ]]). Only the
// ratio q/r shapes the gain, so r is 1 and the one parameter is the ratio,
// which makes the filter independent of the signal's scale.
type Kalman struct {
	q            float64
	level, trend float64
	p            [2][2]float64 // state covariance
	last         time.Time
	n            int
}

// NewKalman builds a filter with process/measurement noise ratio q (per second).
func NewKalman(q float64) *Kalman { return &Kalman{q: q} }

// initialVariance is large against r = 1 so the first samples dominate.
const initialVariance = 1e6

func (k *Kalman) Observe(t time.Time, v float64) {
	if k.n == 0 {
		k.level, k.trend = v, 0
		k.p = [2][2]float64{{1, 0}, {0, initialVariance}}
		k.last, k.n = t, 1
		return
	}
	dt := t.Sub(k.last).Seconds()
	if dt < 0 {
		dt = 0
	}
	// Predict: x = F x, P = F P Fᵀ + Q with F = [[1, dt], [0, 1]].
	k.level += k.trend * dt
	p := k.p
	p00 := p[0][0] + dt*(p[1][0]+p[0][1]) + dt*dt*p[1][1] + k.q*dt*dt*dt/3
	p01 := p[0][1] + dt*p[1][1] + k.q*dt*dt/2
	p10 := p[1][0] + dt*p[1][1] + k.q*dt*dt/2
	p11 := p[1][1] + k.q*dt
	// Update with measurement v of the level (H = [1, 0], r = 1).
	s := p00 + 1
	k0, k1 := p00/s, p10/s
	y := v - k.level
	k.level += k0 * y
	k.trend += k1 * y
	k.p = [2][2]float64{
		{(1 - k0) * p00, (1 - k0) * p01},
		{p10 - k1*p00, p11 - k1*p01},
	}
	k.last = t
	k.n++
}

func (k *Kalman) Predict(horizon time.Duration) float64 {
	return k.level + k.trend*horizon.Seconds()
}
