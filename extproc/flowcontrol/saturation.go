package flowcontrol

import (
	"fmt"

	"github.com/kvgate/kvgate/picker"
)

// Saturation says when a worker has no room for another request, from the
// signals the picker weighs (picker.Load). A worker is saturated when any
// bound that applies is reached; a zero bound is off. The engine-reported
// bounds apply only when the engine's metrics are scraped
// (Load.HaveEngine); kvgate's own accounting always applies.
type Saturation struct {
	// MaxQueuedPrefillTokens: prompt tokens kvgate routed to the worker
	// and not yet prefilled (Load.PrefillTokens). With the engine's
	// metrics it saturates the worker only while a request waits there
	// (queuedBehind): a worker prefilling one prompt longer than the
	// bound, with nothing queued behind it, has room for the next request,
	// which would otherwise wait for a prompt that is already being
	// served (a 20k-token conversation turn would saturate a worker on
	// its own).
	MaxQueuedPrefillTokens int64
	// MaxInflight: requests kvgate routed to the worker and not finished
	// (Load.InflightRequests).
	MaxInflight int
	// MaxEngineWaiting: the engine's own waiting queue
	// (vllm:num_requests_waiting; Load.Waiting). GIE's saturation detector
	// uses 5 (kubernetes-sigs/gateway-api-inference-extension at 9ca8b513,
	// pkg/epp/saturationdetector/config.go DefaultQueueDepthThreshold =
	// pkg/epp/common/config DefaultQueueThresholdCritical).
	MaxEngineWaiting int
	// MaxKVUsage: the engine's KV-cache usage fraction
	// (vllm:kv_cache_usage_perc; Load.KVUsage). GIE uses 0.8
	// (DefaultKVCacheUtilThreshold, same files).
	MaxKVUsage float64
	// PoolFraction is the share of a pool's usable workers that must be
	// saturated for the pool to have no room; 0 or 1 = every one. GIE's
	// utilization detector likewise judges the pool by an aggregate, the
	// mean of its pods' scores (gateway-api-inference-extension at
	// 8f87162a, pkg/epp/saturationdetector/framework/plugins/
	// utilizationdetector/detector.go). Below 1, requests wait while some
	// workers still have room: past saturation the picker sends most of
	// them to saturated prefix holders anyway, so holding them keeps the
	// waiting in kvgate's queue (issue 26), at the price of capacity in
	// bursts.
	PoolFraction float64
}

// Validate reports a bound out of range.
func (s Saturation) Validate() error {
	switch {
	case s.MaxQueuedPrefillTokens < 0, s.MaxInflight < 0, s.MaxEngineWaiting < 0:
		return fmt.Errorf("flowcontrol: saturation bounds must be >= 0 (0 = off)")
	case s.MaxKVUsage < 0 || s.MaxKVUsage > 1:
		return fmt.Errorf("flowcontrol: max KV usage %g outside [0, 1]", s.MaxKVUsage)
	case !(s.PoolFraction >= 0 && s.PoolFraction <= 1):
		return fmt.Errorf("flowcontrol: pool fraction %g outside [0, 1]", s.PoolFraction)
	}
	return nil
}

// WorkerSaturated reports whether a worker with load l has no room.
func (s Saturation) WorkerSaturated(l picker.Load) bool {
	switch {
	case s.MaxQueuedPrefillTokens > 0 && l.PrefillTokens >= s.MaxQueuedPrefillTokens && (!l.HaveEngine || queuedBehind(l)):
		return true
	case s.MaxInflight > 0 && l.InflightRequests >= s.MaxInflight:
		return true
	case !l.HaveEngine:
		return false
	case s.MaxEngineWaiting > 0 && l.Waiting >= s.MaxEngineWaiting:
		return true
	case s.MaxKVUsage > 0 && l.KVUsage >= s.MaxKVUsage:
		return true
	}
	return false
}

// queuedBehind reports whether a request waits on the worker: the engine
// says so (vllm:num_requests_waiting), or kvgate has more requests in
// flight there than the engine last reported running — requests routed
// since its last metrics scrape, which the scrape has not seen yet (a
// request in prefill counts as running in vLLM, so with fresh metrics
// and no other router the two agree).
func queuedBehind(l picker.Load) bool {
	return l.Waiting > 0 || l.InflightRequests > l.Running
}

// AllSaturated reports whether every candidate that could serve a request
// is saturated (with PoolFraction below 1: that share of them). Candidates the picker would not choose (unhealthy,
// draining, ejected) do not count, nor prefill-only workers unless
// withPrefill (disaggregation is on: a prefill worker with room takes the
// prompt off the decode workers' queues); with none left it reports
// false, so the picker answers (no eligible worker) instead of the request
// waiting for a worker that may never come.
func (s Saturation) AllSaturated(cands []picker.Candidate, withPrefill bool) bool {
	usable, room := 0, 0
	for _, c := range cands {
		w := c.Worker
		if w.Unhealthy || w.Draining || w.Ejected || (w.Role == picker.RolePrefill && !withPrefill) {
			continue
		}
		usable++
		if !s.WorkerSaturated(c.Load) {
			if s.PoolFraction == 0 || s.PoolFraction == 1 {
				return false
			}
			room++
		}
	}
	if usable == 0 {
		return false
	}
	if s.PoolFraction == 0 || s.PoolFraction == 1 {
		return true
	}
	return float64(usable-room) >= s.PoolFraction*float64(usable)
}
