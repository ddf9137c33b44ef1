// Package forecast predicts the next value of a load signal (request rate,
// mean input or output length) from its past, so that the planner sizes
// pools for the load that will arrive once new replicas are ready rather
// than for the load that has already passed. Forecasters take irregular
// sample times: the control loop's intervals drift, the simulator's do not.
package forecast

import (
	"fmt"
	"time"
)

// Forecaster is one signal's predictor. Observe must be called with
// non-decreasing times; samples at the same time as the previous one
// replace nothing and are folded in as a zero-length step.
type Forecaster interface {
	Observe(t time.Time, v float64)
	// Predict is the expected value horizon after the last observation
	// (0 before any observation).
	Predict(horizon time.Duration) float64
}

// Kinds a Forecaster can be built by name (config planner.forecaster.kind).
var Kinds = []string{"constant", "ewma", "holt", "kalman"}

// Params tunes the forecasters; zero fields take defaults.
type Params struct {
	// Alpha is the level smoothing weight of ewma and holt, in (0, 1].
	Alpha float64 `json:"alpha,omitempty"`
	// Beta is holt's trend smoothing weight, in (0, 1].
	Beta float64 `json:"beta,omitempty"`
	// NoiseRatio is kalman's process-noise to measurement-noise ratio per
	// second: larger follows changes faster, smaller smooths more.
	NoiseRatio float64 `json:"noise_ratio,omitempty"`
	// TrendDamping is holt's trend damping time constant: the trend is
	// assumed to fade as e^{−t/TrendDamping}. Zero: undamped.
	TrendDamping time.Duration `json:"trend_damping,omitempty"`
}

// DefaultParams are what New uses for zero fields.
var DefaultParams = Params{Alpha: 0.5, Beta: 0.3, NoiseRatio: 0.01}

func (p Params) withDefaults() Params {
	if p.Alpha == 0 {
		p.Alpha = DefaultParams.Alpha
	}
	if p.Beta == 0 {
		p.Beta = DefaultParams.Beta
	}
	if p.NoiseRatio == 0 {
		p.NoiseRatio = DefaultParams.NoiseRatio
	}
	return p
}

// New builds a forecaster by kind.
func New(kind string, p Params) (Forecaster, error) {
	p = p.withDefaults()
	if p.Alpha <= 0 || p.Alpha > 1 || p.Beta <= 0 || p.Beta > 1 || p.NoiseRatio <= 0 {
		return nil, fmt.Errorf("forecast: alpha and beta must be in (0, 1], noise_ratio > 0")
	}
	if p.TrendDamping < 0 {
		return nil, fmt.Errorf("forecast: trend_damping %v is negative", p.TrendDamping)
	}
	switch kind {
	case "constant":
		return &Constant{}, nil
	case "ewma":
		return NewEWMA(p.Alpha), nil
	case "holt":
		return NewHolt(p.Alpha, p.Beta, p.TrendDamping), nil
	case "kalman":
		return NewKalman(p.NoiseRatio), nil
	}
	return nil, fmt.Errorf("forecast: unknown kind %q (want one of constant, ewma, holt, kalman)", kind)
}

// Constant predicts the last observed value (the naive forecast, and the
// baseline every other forecaster must beat).
type Constant struct{ last float64 }

func (c *Constant) Observe(_ time.Time, v float64) { c.last = v }
func (c *Constant) Predict(time.Duration) float64  { return c.last }
