package picker

import (
	"errors"
	"fmt"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// Role is what a worker is deployed to do; the type and its one parser
// live in the leaf kvfleet so that config, discovery and the picker share
// them (issue 18).
type Role = kvfleet.Role

const (
	RoleBoth    = kvfleet.RoleBoth    // serves whole requests, or either half of a split one
	RolePrefill = kvfleet.RolePrefill // prefill only (llm-d / Dynamo prefill pool)
	RoleDecode  = kvfleet.RoleDecode  // decode; also serves whole requests when not split
)

// Stage is the part of a request that the chosen worker will run.
type Stage uint8

const (
	// StageAggregated: prefill and decode on the same worker.
	StageAggregated Stage = iota
	// StagePrefill: the prefill half of a disaggregated request.
	StagePrefill
	// StageDecode: the decode half; the KV arrives from the prefill worker.
	StageDecode
)

func (s Stage) String() string {
	switch s {
	case StageAggregated:
		return "aggregated"
	case StagePrefill:
		return "prefill"
	case StageDecode:
		return "decode"
	}
	return fmt.Sprintf("stage%d", uint8(s))
}

// serves reports whether a worker with role r may run stage s. In llm-d and
// Dynamo a decode worker runs the whole request itself when the router
// decides not to disaggregate, so decode workers serve aggregated requests;
// prefill-only workers never do.
func serves(r Role, s Stage) bool {
	switch s {
	case StageAggregated, StageDecode:
		return r == RoleBoth || r == RoleDecode
	case StagePrefill:
		return r == RoleBoth || r == RolePrefill
	}
	return false
}

// Worker is one engine instance as the picker sees it.
type Worker struct {
	ID       kvfleet.WorkerID
	Endpoint string // ip:port the proxy sends the request to
	Role     Role
	Draining bool
	// Unhealthy workers are excluded; the caller decides what unhealthy means
	// (failed readiness, stale metrics, ...).
	Unhealthy bool
	// Warming: the worker is slow-starting after a recovery and the
	// caller's weighted draw left it out of this one pick (Envoy
	// slow_start_config: a recovering host gets a ramping share of traffic
	// rather than all of it at once for being idle).
	Warming bool
	// Ejected: passive outlier detection took the worker out (it failed
	// its recent requests); it gets no traffic, not even as a fallback,
	// until the ejection ends.
	Ejected bool
}

// WorkerFrom is the picker's view of w, the one place the fleet's worker
// shape becomes the picker's: health flags (Unhealthy, Warming, Ejected)
// start clear and are set by the caller per request.
func WorkerFrom(w kvfleet.Worker) Worker {
	return Worker{ID: w.ID, Endpoint: w.ID.Endpoint, Role: w.Role, Draining: w.Draining}
}

// Load is a worker's current load. The first three fields come from kvgate's
// own accounting (extproc/loadview); the rest are optional signals.
type Load struct {
	InflightRequests int
	PrefillTokens    int64 // prompt tokens routed here but not yet prefilled
	DecodeBlocks     int64 // KV blocks held by requests routed here (predicted)

	// PrefillTokensPerSec is this worker's measured prefill rate (see
	// ThroughputEstimator); 0 = unknown. Used by the kvgate policy and CheckedPD.Decide.
	PrefillTokensPerSec float64
	// KVCapacityBlocks is the worker's device KV capacity in blocks
	// (vLLM `vllm:cache_config_info{num_gpu_blocks}`); 0 = unknown.
	KVCapacityBlocks int64

	// Engine-reported signals (vLLM `vllm:num_requests_waiting`,
	// `vllm:num_requests_running`, `vllm:kv_cache_usage_perc`), valid only
	// when HaveEngine. They include traffic routed by other routers.
	HaveEngine bool
	Waiting    int
	Running    int
	KVUsage    float64 // fraction in [0, 1]
}

// Request is the size of the request being routed.
type Request struct {
	Stage                Stage
	PromptTokens         int
	BlockSize            int // tokens per KV block; must equal the engines'
	Blocks               int // full blocks of the prompt (the hashed chain's length)
	ExpectedOutputTokens int // predicted output length; 0 = unknown
}

// Bounds on a Request, far above any real model, so that arithmetic on them
// stays exact in float64 and cannot overflow.
const (
	MaxPromptTokens = 1 << 26
	MaxBlockSize    = 1 << 16
	MaxOutputTokens = 1 << 26
)

// Validate reports what is wrong with r, if anything.
func (r Request) Validate() error {
	switch {
	case r.Stage > StageDecode:
		return fmt.Errorf("request: unknown stage %d", r.Stage)
	case r.BlockSize < 1 || r.BlockSize > MaxBlockSize:
		return fmt.Errorf("request: block size %d outside [1, %d]", r.BlockSize, MaxBlockSize)
	case r.PromptTokens < 0 || r.PromptTokens > MaxPromptTokens:
		return fmt.Errorf("request: prompt tokens %d outside [0, %d]", r.PromptTokens, MaxPromptTokens)
	case r.Blocks < 0 || r.Blocks > r.PromptTokens/r.BlockSize:
		return fmt.Errorf("request: %d blocks but %d prompt tokens hold only %d full blocks of %d",
			r.Blocks, r.PromptTokens, r.PromptTokens/r.BlockSize, r.BlockSize)
	case r.ExpectedOutputTokens < 0 || r.ExpectedOutputTokens > MaxOutputTokens:
		return fmt.Errorf("request: expected output tokens %d outside [0, %d]", r.ExpectedOutputTokens, MaxOutputTokens)
	}
	return nil
}

// Candidate is one worker offered to the picker.
type Candidate struct {
	Worker Worker
	Depths kvfleet.Depths // matched prefix depth per tier, from the index
	Load   Load
}

// Terms is the cost breakdown of one candidate, for the decision record
// and for tests. All block quantities are in KV blocks of the request's
// size.
type Terms struct {
	Eligible bool
	Reason   string // why not eligible; empty when eligible

	// Inputs the terms share (not summed into Cost themselves).
	Credit        float64 // tier-weighted overlap blocks
	PrefillBlocks float64 // queued + this prompt, before credit (Dynamo raw_prefill_blocks)
	TTFTSeconds   float64 // predicted time to first token (kvgate policy; 0 under dynamo)

	// Parts holds each listed term's column (terms.go), weight applied;
	// a term switched off, or not part of the policy, leaves 0.
	Parts [NumTerms]float64
	// Cost is the sum of Parts in the list's order; lower is better.
	Cost float64
}

// Decision is the picker's answer. Indices refer to the candidates slice.
type Decision struct {
	Primary   int   // -1 when no candidate was chosen
	Fallbacks []int // next best eligible candidates, distinct, best first
	Terms     []Terms
	// Panic: fewer than Config.HealthyPanicThreshold percent of the
	// candidates able to serve the stage were healthy, so unhealthy,
	// ejected and slow-starting ones were eligible too. Healthy and Hosts
	// are the counts the threshold was applied to.
	Panic          bool
	Healthy, Hosts int

	rates []float64 // scratch: the eligible workers' measured prefill rates
}

// ErrNoEligible is returned when every candidate is excluded.
var ErrNoEligible = errors.New("picker: no eligible worker")
