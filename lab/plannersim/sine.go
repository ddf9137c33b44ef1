package plannersim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Sine describes a sinusoidal load like Dynamo's planner benchmark
// (benchmarks/sin_load_generator/sin_synth.py): the request rate is
// (min+max)/2 + (max−min)/2 · sin(2π t/period − π/2), starting at the
// minimum; arrivals are Poisson at that rate (drawn per 1 s slot, as the
// generator's process interval); every request has the same ISL and OSL.
type Sine struct {
	Duration         time.Duration
	Period           time.Duration
	MinRate, MaxRate float64 // requests per second
	ISL, OSL         int
	Seed             uint64
	// WarmUp is the load's unscored lead (Load.WarmUp), part of Duration.
	WarmUp time.Duration
}

// DefaultSine is the bench's main sine: prefill-heavy requests (Dynamo's
// example ISL 3000 / OSL 150) swinging 6→60 req/s over a 60-minute period
// — a diurnal swing compressed 24×, slow against the 120 s provisioning
// delay as real daily load is — for 70 minutes, the first 10 (a sixth of
// the period, the rate rising from its minimum) an unscored warm-up, so
// one whole period is scored.
var DefaultSine = Sine{Duration: 70 * time.Minute, Period: time.Hour, MinRate: 6, MaxRate: 60, ISL: 3000, OSL: 150, Seed: 1, WarmUp: 10 * time.Minute}

// StressSine is the same swing over a 10-minute period, three periods,
// the first a warm-up. A fifth of a period passes between a scale-up and
// its replica serving (120 s provisioning + a 30 s decision interval), so
// no reactive or forecasting planner can follow it: a stress row, not
// the benchmark's aim.
var StressSine = Sine{Duration: 30 * time.Minute, Period: 10 * time.Minute, MinRate: 6, MaxRate: 60, ISL: 3000, OSL: 150, Seed: 1, WarmUp: 10 * time.Minute}

// Rate is the request rate at t.
func (s Sine) Rate(t time.Duration) float64 {
	mid, amp := (s.MinRate+s.MaxRate)/2, (s.MaxRate-s.MinRate)/2
	return mid + amp*math.Sin(2*math.Pi*t.Seconds()/s.Period.Seconds()-math.Pi/2)
}

// Validate reports the first bad field.
func (s Sine) Validate() error {
	switch {
	case s.Duration <= 0 || s.Duration > 7*24*time.Hour:
		return fmt.Errorf("sine: duration %v outside (0, 168h]", s.Duration)
	case s.Period < time.Second:
		return fmt.Errorf("sine: period %v: want at least 1s", s.Period)
	case math.IsNaN(s.MinRate) || s.MinRate < 0:
		return fmt.Errorf("sine: min rate %v: want >= 0", s.MinRate)
	case math.IsNaN(s.MaxRate) || s.MaxRate < s.MinRate || s.MaxRate > 1e4:
		return fmt.Errorf("sine: max rate %v: want in [min rate %v, 1e4]", s.MaxRate, s.MinRate)
	case s.WarmUp < 0 || s.WarmUp >= s.Duration:
		return fmt.Errorf("sine: warm-up %v outside [0, duration %v)", s.WarmUp, s.Duration)
	case s.ISL < 1 || s.ISL > MaxInputTokens:
		return fmt.Errorf("sine: ISL %d outside [1, %d]", s.ISL, MaxInputTokens)
	case s.OSL < 1 || s.OSL > MaxOutputTokens:
		return fmt.Errorf("sine: OSL %d outside [1, %d]", s.OSL, MaxOutputTokens)
	}
	if n := (s.MinRate + s.MaxRate) / 2 * s.Duration.Seconds(); n > MaxRequests/2 {
		return fmt.Errorf("sine: about %.0f requests, more than %d", n, MaxRequests/2)
	}
	return nil
}

// Load draws the arrivals.
func (s Sine) Load() (Load, error) {
	if err := s.Validate(); err != nil {
		return Load{}, err
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x73696e65))
	l := Load{Name: fmt.Sprintf("sine %g–%g req/s, period %v, ISL %d, OSL %d", s.MinRate, s.MaxRate, s.Period, s.ISL, s.OSL), Horizon: s.Duration, WarmUp: s.WarmUp}
	for slot := time.Duration(0); slot < s.Duration; slot += time.Second {
		width := min(time.Second, s.Duration-slot)
		n := poisson(rng, s.Rate(slot+width/2)*width.Seconds())
		at := make([]time.Duration, n)
		for i := range at {
			at[i] = slot + time.Duration(rng.Int64N(int64(width)))
		}
		slices.Sort(at)
		for _, a := range at {
			l.Requests = append(l.Requests, Request{Arrival: a, InputTokens: s.ISL, OutputTokens: s.OSL})
		}
	}
	if len(l.Requests) == 0 {
		return Load{}, fmt.Errorf("sine: no arrival in %v at rates %g–%g req/s", s.Duration, s.MinRate, s.MaxRate)
	}
	return l, nil
}

// poisson draws a Poisson variate: Knuth's product method for small means,
// a rounded normal approximation above 30 (the rates here are far from the
// tail where that matters).
func poisson(rng *rand.Rand, mean float64) int {
	if mean <= 0 {
		return 0
	}
	if mean > 30 {
		return max(0, int(math.Round(mean+math.Sqrt(mean)*rng.NormFloat64())))
	}
	limit, p, k := math.Exp(-mean), 1.0, 0
	for {
		p *= rng.Float64()
		if p <= limit {
			return k
		}
		k++
	}
}
