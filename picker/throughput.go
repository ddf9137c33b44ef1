package picker

import (
	"fmt"
	"math"
)

// ThroughputEstimator tracks one worker's prefill rate (tokens per second)
// from observed (tokens, seconds) pairs. It keeps exponentially weighted
// averages of tokens and of seconds and reports their ratio: a ratio of
// averages weighs a long prefill by its length, where an average of ratios
// would let many tiny requests (dominated by fixed overhead) drag the rate
// down.
//
// A good sample is (queued prefill tokens at routing + this request's
// uncached tokens, time to first token): that is the quantity the kvgate
// policy divides by the rate.
//
// It is a plain value with no lock; the caller serialises access.
type ThroughputEstimator struct {
	alpha   float64
	prior   float64
	tokens  float64
	seconds float64
	samples int64
}

// Bounds on one observation, to drop garbage (clock jumps, zero-length
// prompts) instead of letting it poison the average.
const (
	maxObservedTokens  = 1 << 30
	maxObservedSeconds = 3600
	maxRate            = 1e9 // tokens/s; far beyond any accelerator
)

// DefaultThroughputAlpha weighs a new sample at 1/5: the estimate follows a
// change of batch mix within about ten requests.
const DefaultThroughputAlpha = 0.2

// NewThroughputEstimator returns an estimator that reports prior (tokens/s;
// 0 = unknown) until the first observation. alpha in (0, 1] is the weight
// of each new sample.
func NewThroughputEstimator(alpha, prior float64) (ThroughputEstimator, error) {
	if !finiteIn(alpha, math.SmallestNonzeroFloat64, 1) {
		return ThroughputEstimator{}, fmt.Errorf("throughput estimator: alpha %v outside (0, 1]", alpha)
	}
	if !finiteIn(prior, 0, maxRate) {
		return ThroughputEstimator{}, fmt.Errorf("throughput estimator: prior %v outside [0, %g]", prior, float64(maxRate))
	}
	return ThroughputEstimator{alpha: alpha, prior: prior}, nil
}

// Observe adds one sample: tokens prefilled in seconds. Invalid samples are
// rejected with an error and leave the estimate unchanged.
func (e *ThroughputEstimator) Observe(tokens int64, seconds float64) error {
	if tokens < 1 || tokens > maxObservedTokens {
		return fmt.Errorf("throughput sample: %d tokens outside [1, %d]", tokens, maxObservedTokens)
	}
	if !finiteIn(seconds, math.SmallestNonzeroFloat64, maxObservedSeconds) {
		return fmt.Errorf("throughput sample: %v seconds outside (0, %d]", seconds, maxObservedSeconds)
	}
	if r := float64(tokens) / seconds; r > maxRate {
		return fmt.Errorf("throughput sample: %d tokens in %vs is %g tokens/s, above %g", tokens, seconds, r, float64(maxRate))
	}
	a := e.alpha
	if a == 0 { // zero value: usable with the default weight
		a = DefaultThroughputAlpha
		e.alpha = a
	}
	if e.samples == 0 {
		e.tokens, e.seconds = float64(tokens), seconds
	} else {
		e.tokens += a * (float64(tokens) - e.tokens)
		e.seconds += a * (seconds - e.seconds)
	}
	e.samples++
	return nil
}

// Rate is the current estimate in tokens per second (the prior before any
// sample; 0 means unknown, which the picker replaces by its default).
func (e *ThroughputEstimator) Rate() float64 {
	if e.samples == 0 {
		return e.prior
	}
	return e.tokens / e.seconds
}

// Samples is how many observations were accepted.
func (e *ThroughputEstimator) Samples() int64 { return e.samples }
