package enginesim

import (
	"math"
	"time"
)

// The step-time model of NVIDIA Dynamo's mocker (older lib/mocker perf
// model; shared/notes/wire-formats.md §7), fitted on an H100-class engine.

// PrefillMs is the time in milliseconds to prefill tokens new tokens in
// one batch: 4.209989e-07·T² + 1.518344e-02·T + 16.50142. Zero tokens cost
// nothing (the step has no prefill part).
func PrefillMs(tokens int) float64 {
	if tokens <= 0 {
		return 0
	}
	t := float64(tokens)
	return 4.209989e-07*t*t + 1.518344e-02*t + 16.50142
}

// DecodeMs is the time in milliseconds of one decode step when a fraction
// p in [0, 1] of the KV cache is active: max(1, −25.74·p² + 54.01·p + 5.74).
// p is clamped to [0, 1].
func DecodeMs(p float64) float64 {
	if math.IsNaN(p) || p < 0 {
		p = 0
	}
	p = min(p, 1)
	return max(1, -25.74*p*p+54.01*p+5.74)
}

// StepDuration is the duration of one engine step that prefills
// prefillTokens tokens and, when decoding is true, advances the decoding
// sequences by one token each, with the KV cache a fraction p active.
//
// Mixed steps: the mocker's model has no term for a batch that both
// prefills and decodes, so the two parts are added: prefill(T) when T > 0
// plus decode(p) when any sequence decodes. Summing errs on the slow side
// (a real mixed batch overlaps the two), which keeps a router from looking
// better than it is by piling decodes onto a prefilling worker.
//
// speedUp (> 0) divides the whole step, as the mocker's speedup_ratio does.
func StepDuration(prefillTokens int, decoding bool, p, speedUp float64) time.Duration {
	ms := PrefillMs(prefillTokens)
	if decoding {
		ms += DecodeMs(p)
	}
	if ms == 0 {
		// A step that computes nothing still costs the decode floor, so
		// that virtual time always moves forward.
		ms = 1
	}
	return time.Duration(math.Round(ms / speedUp * float64(time.Millisecond)))
}
