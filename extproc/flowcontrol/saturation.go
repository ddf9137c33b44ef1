package flowcontrol

import (
	"fmt"
	"math"

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
	// PoolMeanScore: the pool also has no room when the mean over its
	// usable workers of each worker's score — the larger of engine waiting
	// ÷ MaxEngineWaiting and KV usage ÷ MaxKVUsage; 1 for a worker without
	// engine metrics — reaches it; 0 = off. This is GIE's utilization
	// detector, "PoolSaturation = Average(EndpointScore)" with EndpointScore
	// = max(queue depth ÷ queue threshold, KV usage ÷ KV threshold), a
	// worker with no fresh metrics scoring 1 (gateway-api-inference-extension
	// at 8f87162a, pkg/epp/saturationdetector/framework/plugins/
	// utilizationdetector/detector.go Saturation; doc.go at 1d375123). It
	// catches what the every-worker rule misses in a large pool: the picker
	// sends requests to their prefix holders, whose engine queues grow
	// while a few workers without the prefix still have room, so requests
	// wait in engine queues (FCFS, no bands, no tenants) instead of
	// kvgate's, and are abandoned there mid-prefill (issue 26, 16 workers).
	PoolMeanScore float64
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
	case !(s.PoolMeanScore >= 0) || math.IsInf(s.PoolMeanScore, 0):
		return fmt.Errorf("flowcontrol: pool mean score %g must be finite and >= 0 (0 = off)", s.PoolMeanScore)
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

// PoolSaturated reports whether the pool has no room for a request: every
// candidate that could serve it is saturated (with PoolFraction below 1:
// that share of them), or their mean score reaches PoolMeanScore.
// Candidates the picker would not choose (unhealthy, draining, ejected) do
// not count, nor prefill-only workers unless withPrefill (disaggregation
// is on: a prefill worker with room takes the prompt off the decode
// workers' queues); with none left it reports false, so the picker answers
// (no eligible worker) instead of the request waiting for a worker that
// may never come.
func (s Saturation) PoolSaturated(cands []picker.Candidate, withPrefill bool) bool {
	every := s.PoolFraction == 0 || s.PoolFraction == 1
	usable, room := 0, 0
	score := 0.0
	for _, c := range cands {
		w := c.Worker
		if w.Unhealthy || w.Draining || w.Ejected || (w.Role == picker.RolePrefill && !withPrefill) {
			continue
		}
		usable++
		if !s.WorkerSaturated(c.Load) {
			if every && s.PoolMeanScore == 0 {
				return false
			}
			room++
		}
		if s.PoolMeanScore > 0 {
			score += s.WorkerScore(c.Load)
		}
	}
	if usable == 0 {
		return false
	}
	if s.PoolMeanScore > 0 && score >= s.PoolMeanScore*float64(usable) {
		return true
	}
	if every {
		return room == 0
	}
	return float64(usable-room) >= s.PoolFraction*float64(usable)
}

// WorkerScore is a worker's share of PoolMeanScore's mean: the larger of
// its engine's waiting queue ÷ MaxEngineWaiting and its KV usage ÷
// MaxKVUsage (a bound of 0 leaves its term out), and 1 without engine
// metrics, as GIE scores a pod whose metrics are missing or stale.
func (s Saturation) WorkerScore(l picker.Load) float64 {
	if !l.HaveEngine {
		return 1
	}
	score := 0.0
	if s.MaxEngineWaiting > 0 {
		score = float64(l.Waiting) / float64(s.MaxEngineWaiting)
	}
	if s.MaxKVUsage > 0 {
		score = max(score, l.KVUsage/s.MaxKVUsage)
	}
	return score
}
