package picker

import "github.com/kvgate/kvgate/kv/kvfleet"

// The "dynamo" policy is the default cost of NVIDIA Dynamo's KV router,
// ai-dynamo/dynamo lib/kv-router/src/scheduling/selector/default.rs
// (DefaultWorkerScorer::worker_logit; older releases: lib/llm/src/kv_router/
// scheduler.rs, "Formula for worker"):
//
//	overlap_credit   = 1·device + 0.75·host + 0.25·disk overlap blocks
//	raw_prefill      = (active_prefill_tokens + isl) / block_size
//	logit            = prefill_load_scale · max(0, raw_prefill − overlap_credit)
//	                 + decode_blocks + decode_active_request_weight · active_requests
//
// where decode_blocks = the worker's active blocks + this request's blocks
// (WorkerLoadProjection::potential_decode_blocks). Dynamo deduplicates the
// request's blocks against sequences already active on the worker; kvgate
// does not track per-sequence blocks, so it adds the full prompt blocks,
// which is the same for every candidate and does not change the order.
// Decode-pool routing (a disaggregated request's decode half) tracks no
// prefill tokens and forces the overlap credit to 0, leaving decode blocks
// plus the request term.
//
// The three summands are the listed terms prefill, decode and requests
// (terms.go, term_*.go); this file keeps the inputs they share.

// tierCredit splits cumulative depths into per-tier overlap (a block counts
// on the fastest tier holding it) and weights them. Depths are clamped to
// [0, blocks] and made non-decreasing, so a malformed index answer can only
// lower the credit, never make it exceed the prompt.
func tierCredit(d *kvfleet.Depths, blocks int, w *[kvfleet.NumTiers]float64) (credit, device float64) {
	prev := 0
	for t := range kvfleet.NumTiers {
		v := min(max(d[t], prev), blocks)
		overlap := float64(v - prev)
		if t == kvfleet.TierDevice {
			device = overlap
		}
		credit += w[t] * overlap
		prev = v
	}
	return credit, device
}

// rawPrefillBlocks is Dynamo's raw_prefill_blocks: the worker's queued
// prefill plus this whole prompt, in blocks.
func rawPrefillBlocks(req *Request, l *Load) float64 {
	return (nonNeg(l.PrefillTokens) + float64(req.PromptTokens)) / float64(req.BlockSize)
}
