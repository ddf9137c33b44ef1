// Package perfmodel is the planner's performance model of one engine
// replica: how many prompt tokens per second it can prefill while keeping
// time-to-first-token under a target, and how many output tokens per second
// it can decode while keeping inter-token latency under a target. The
// numbers come from a profile measured by `kvgate planner profile` against a
// real or simulated engine; Correction scales the targets online by how far
// observed latencies drift from what the profile predicted.
package perfmodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// MaxProfileBytes bounds a profile file.
const MaxProfileBytes = 8 << 20

// maxPoints bounds the points of each kind in a profile.
const maxPoints = 100000

// Profile is what `kvgate planner profile` measures and writes as JSON.
type Profile struct {
	// Engine and Model describe what was profiled (informational).
	Engine string `json:"engine,omitempty"`
	Model  string `json:"model,omitempty"`
	// Prefill holds one point per (input length, concurrency) measured.
	Prefill []PrefillPoint `json:"prefill"`
	// Decode holds one point per (context length, batch) measured.
	Decode []DecodePoint `json:"decode"`
}

// PrefillPoint is one prefill measurement: Concurrency requests of
// InputTokens uncached prompt tokens kept in flight; TTFTSeconds is the
// measured time to first token (p90 or mean — the profiler writes p90) and
// TokensPerSecond the prompt tokens prefilled per second by the replica.
type PrefillPoint struct {
	InputTokens     int     `json:"input_tokens"`
	Concurrency     int     `json:"concurrency"`
	TTFTSeconds     float64 `json:"ttft_seconds"`
	TokensPerSecond float64 `json:"tokens_per_second"`
}

// DecodePoint is one decode measurement: Batch sequences decoding with a
// context of about ContextTokens each; ITLSeconds is the inter-token latency
// and TokensPerSecond the output tokens produced per second by the replica.
type DecodePoint struct {
	ContextTokens   int     `json:"context_tokens"`
	Batch           int     `json:"batch"`
	ITLSeconds      float64 `json:"itl_seconds"`
	TokensPerSecond float64 `json:"tokens_per_second"`
}

// ReadProfile decodes a profile (strictly: unknown fields are errors).
func ReadProfile(r io.Reader) (Profile, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxProfileBytes+1))
	if err != nil {
		return Profile{}, fmt.Errorf("profile: %w", err)
	}
	if len(data) > MaxProfileBytes {
		return Profile{}, fmt.Errorf("profile: larger than %d bytes", MaxProfileBytes)
	}
	var p Profile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("profile: %w", err)
	}
	if err := p.Validate(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

// LoadProfile reads a profile file.
func LoadProfile(path string) (Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return Profile{}, fmt.Errorf("profile: %w", err)
	}
	defer f.Close()
	p, err := ReadProfile(f)
	if err != nil {
		return Profile{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Validate reports the first unusable point, naming it.
func (p Profile) Validate() error {
	if len(p.Prefill) == 0 {
		return errors.New("profile: prefill: at least one point is required")
	}
	if len(p.Decode) == 0 {
		return errors.New("profile: decode: at least one point is required")
	}
	if len(p.Prefill) > maxPoints || len(p.Decode) > maxPoints {
		return fmt.Errorf("profile: more than %d points", maxPoints)
	}
	for i, q := range p.Prefill {
		if q.InputTokens <= 0 || q.Concurrency <= 0 || !positive(q.TTFTSeconds) || !positive(q.TokensPerSecond) {
			return fmt.Errorf("profile: prefill[%d]: input_tokens, concurrency, ttft_seconds and tokens_per_second must be > 0 and finite", i)
		}
	}
	for i, q := range p.Decode {
		if q.ContextTokens <= 0 || q.Batch <= 0 || !positive(q.ITLSeconds) || !positive(q.TokensPerSecond) {
			return fmt.Errorf("profile: decode[%d]: context_tokens, batch, itl_seconds and tokens_per_second must be > 0 and finite", i)
		}
	}
	return nil
}

// Write encodes the profile as indented JSON.
func (p Profile) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}

func positive(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }
