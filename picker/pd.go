package picker

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// PDConfig parameterises CheckedPD.Decide (PDConfig.Check). Start from DefaultPDConfig.
type PDConfig struct {
	// Picker scores all three picks (aggregated, prefill, decode); its
	// MaxInflight / MaxQueuedPrefillTokens are replaced by the prefill
	// bounds below for the prefill pick.
	Picker Config

	// MinUncachedTokens: below this many prompt tokens left to compute on
	// the best aggregated worker, prefill there (llm-d's prefix-based P/D
	// decider uses the same non-cached-token threshold).
	MinUncachedTokens int
	// A prefill worker at or above either bound is saturated; when all are,
	// the request stays aggregated rather than queue behind them.
	MaxPrefillInflight     int
	MaxPrefillQueuedTokens int64

	// KVBytesPerToken is the model's KV size per token: 2 (K and V) × layers
	// × KV heads × head dim × bytes per element. Llama-3-8B in bf16:
	// 2×32×8×128×2 = 131072.
	KVBytesPerToken int64
	// TransferBytesPerSec is the effective prefill→decode KV bandwidth.
	TransferBytesPerSec float64
	// PrefillTokensPerSec stands in for workers without a measured rate.
	PrefillTokensPerSec float64
}

// DefaultPDConfig is conservative: it splits only long, uncached prompts.
func DefaultPDConfig() PDConfig {
	return PDConfig{
		Picker:                 DefaultConfig(),
		MinUncachedTokens:      1024,
		MaxPrefillInflight:     8,
		MaxPrefillQueuedTokens: 64 << 10,
		KVBytesPerToken:        131072,
		TransferBytesPerSec:    10e9, // ~80 Gb/s, well under one 200 Gb/s RDMA NIC
		PrefillTokensPerSec:    20000,
	}
}

// Validate reports the first invalid field of c.
func (c PDConfig) Validate() error {
	if err := c.Picker.Validate(); err != nil {
		return fmt.Errorf("P/D config: %w", err)
	}
	switch {
	case c.MinUncachedTokens < 0 || c.MinUncachedTokens > MaxPromptTokens:
		return fmt.Errorf("P/D config: min uncached tokens %d outside [0, %d]", c.MinUncachedTokens, MaxPromptTokens)
	case c.MaxPrefillInflight < 1:
		return fmt.Errorf("P/D config: max prefill in-flight %d below 1", c.MaxPrefillInflight)
	case c.MaxPrefillQueuedTokens < 1:
		return fmt.Errorf("P/D config: max prefill queued tokens %d below 1", c.MaxPrefillQueuedTokens)
	case c.KVBytesPerToken < 1 || c.KVBytesPerToken > 1<<30:
		return fmt.Errorf("P/D config: KV bytes per token %d outside [1, 2^30]", c.KVBytesPerToken)
	case !finiteIn(c.TransferBytesPerSec, 1, 1e15):
		return fmt.Errorf("P/D config: transfer bytes/s %v outside [1, 1e15]", c.TransferBytesPerSec)
	case !finiteIn(c.PrefillTokensPerSec, 1, 1e9):
		return fmt.Errorf("P/D config: prefill tokens/s %v outside [1, 1e9]", c.PrefillTokensPerSec)
	}
	return nil
}

// PDDecision says where the request goes.
type PDDecision struct {
	Disaggregate bool
	// Prefill is the prefill pick when Disaggregate, else Primary is -1.
	// Its indices refer to the prefill candidates.
	Prefill Decision
	// Decode is the decode pick when Disaggregate, else the aggregated pick.
	// Its indices refer to the decode candidates.
	Decode Decision
	Reason string

	// The estimates behind the decision (zero where not reached).
	UncachedTokens  int     // prompt tokens the aggregated worker would compute
	TransferSeconds float64 // KV transfer prefill → decode
	GainSeconds     float64 // aggregated TTFT − prefill-worker TTFT
}

// CheckedPD is a PDConfig that Validate accepted, with its three picks'
// configurations checked once (see Checked). The zero CheckedPD refuses
// to decide.
type CheckedPD struct {
	cfg PDConfig
	// picker scores the aggregated and decode picks; prefill the prefill
	// pick, under the prefill bounds.
	picker, prefill Checked
}

// Check validates c once for many decisions.
func (c PDConfig) Check() (CheckedPD, error) {
	if err := c.Validate(); err != nil {
		return CheckedPD{}, err
	}
	agg, err := c.Picker.Check()
	if err != nil {
		return CheckedPD{}, fmt.Errorf("P/D config: %w", err)
	}
	pc := c.Picker
	pc.MaxInflight, pc.MaxQueuedPrefillTokens = c.MaxPrefillInflight, c.MaxPrefillQueuedTokens
	pre, err := pc.Check()
	if err != nil {
		return CheckedPD{}, fmt.Errorf("P/D config: prefill bounds: %w", err)
	}
	return CheckedPD{cfg: c, picker: agg, prefill: pre}, nil
}

// Decide decides whether to split req into a remote prefill and a local
// decode. It splits only when it pays:
//
//  1. the best aggregated (decode-pool) worker would still compute at least
//     MinUncachedTokens of the prompt;
//  2. some prefill worker is under both load bounds;
//  3. moving the KV (tokens the decode worker lacks × KVBytesPerToken ÷
//     TransferBytesPerSec) takes less time than the TTFT it saves: the
//     aggregated worker's queued prefill plus this prompt's uncached part at
//     its rate, minus the same on the chosen prefill worker.
//
// Otherwise Decode holds the aggregated pick. The error is ErrNoEligible
// (wrapped) when no decode worker can take the request. The configuration
// was validated once, by PDConfig.Check.
func (k *CheckedPD) Decide(req Request, prefill, decode []Candidate, rnd *rand.Rand) (PDDecision, error) {
	out := PDDecision{Prefill: Decision{Primary: -1}}
	if !k.picker.ok {
		return out, errUnchecked
	}
	cfg := &k.cfg
	bs := float64(req.BlockSize)

	req.Stage = StageAggregated
	agg, err := k.picker.Pick(req, decode, rnd)
	if err != nil {
		return out, fmt.Errorf("P/D: aggregated pick: %w", err)
	}
	out.Decode = agg
	aggTerms := &agg.Terms[agg.Primary]
	aggLoad := &decode[agg.Primary].Load
	uncachedAgg := max(0, float64(req.PromptTokens)-aggTerms.Credit*bs)
	out.UncachedTokens = int(math.Ceil(uncachedAgg))
	if out.UncachedTokens < cfg.MinUncachedTokens {
		out.Reason = fmt.Sprintf("aggregated: %d uncached prompt tokens below threshold %d", out.UncachedTokens, cfg.MinUncachedTokens)
		return out, nil
	}

	req.Stage = StagePrefill
	pre, err := k.prefill.Pick(req, prefill, rnd)
	if errors.Is(err, ErrNoEligible) {
		out.Reason = "aggregated: no prefill worker under its load bounds"
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("P/D: prefill pick: %w", err)
	}
	req.Stage = StageDecode
	dec, err := k.picker.Pick(req, decode, rnd)
	if err != nil {
		return out, fmt.Errorf("P/D: decode pick: %w", err)
	}

	preTerms := &pre.Terms[pre.Primary]
	preLoad := &prefill[pre.Primary].Load
	uncachedPre := max(0, float64(req.PromptTokens)-preTerms.Credit*bs)
	ttftAgg := (nonNeg(aggLoad.PrefillTokens) + uncachedAgg) / prefillTokensPerSec(aggLoad, cfg.PrefillTokensPerSec)
	ttftPre := (nonNeg(preLoad.PrefillTokens) + uncachedPre) / prefillTokensPerSec(preLoad, cfg.PrefillTokensPerSec)
	out.GainSeconds = ttftAgg - ttftPre

	// Blocks already on the decode worker's device need not move.
	d := &decode[dec.Primary].Depths
	onDevice := min(max(d[kvfleet.TierDevice], 0), req.Blocks)
	moved := float64(req.PromptTokens) - float64(onDevice)*bs
	out.TransferSeconds = moved * float64(cfg.KVBytesPerToken) / cfg.TransferBytesPerSec

	if out.TransferSeconds >= out.GainSeconds {
		out.Reason = fmt.Sprintf("aggregated: KV transfer %.3fs not below TTFT gain %.3fs", out.TransferSeconds, out.GainSeconds)
		return out, nil
	}
	out.Disaggregate = true
	out.Prefill, out.Decode = pre, dec
	out.Reason = fmt.Sprintf("disaggregated: KV transfer %.3fs below TTFT gain %.3fs", out.TransferSeconds, out.GainSeconds)
	return out, nil
}
