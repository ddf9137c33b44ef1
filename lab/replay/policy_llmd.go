package replay

import (
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// PolicyLLMD is llm-d's precise-prefix-cache-aware scheduling profile, as
// its guide deploys it (llm-d/llm-d at 019a3f3f,
// guides/precise-prefix-cache-aware/scheduler/precise-prefix-cache-aware.values.yaml):
// decode-filter (every replay worker serves both stages), then three
// scorers summed with their weights — precise-prefix-cache-scorer 2,
// kv-cache-utilization-scorer 1, queue-scorer 1 — and max-score-picker.
const PolicyLLMD = "llm-d"

// The profile's scorer weights (the guide's schedulingProfiles).
const (
	llmdPrefixWeight = 2.0
	llmdKVWeight     = 1.0
	llmdQueueWeight  = 1.0
)

// pickLLMD scores every worker as llm-d's scorers do and returns the best:
//
//   - precise prefix cache: each worker's run of consecutive cached blocks
//     from the prompt's start, from an index fed by the engines' KV events
//     (the replay's own, as llm-d-kv-cache's is), min-max normalised over
//     the workers that hold any block; a worker holding none scores 0, and
//     when all holders tie they score 1 (llm-d-inference-scheduler
//     pkg/plugins/scorer/utils.go indexedScoresToNormalizedScoredPods);
//   - KV-cache utilisation: 1 − the engine's KV usage (GIE
//     pkg/epp/scheduling/framework/plugins/scorer/kvcache_utilization.go);
//   - queue: the engine's waiting requests, min-max normalised and
//     inverted, every worker 1 when all are equal (GIE scorer/queue.go).
//
// The engine signals are read from the simulated engines at the moment of
// the pick — fresher than the EPP's 50 ms metric scrapes, so this reading
// is if anything kinder to llm-d than the real one. Ties go to a random
// worker among the best, as max-score-picker shuffles before it picks.
func (s *simulation) pickLLMD(m *kvindex.Match) int {
	minHit, maxHit, holders := 0, 0, 0
	minQ, maxQ := 0, 0
	for j, wk := range s.workers {
		if d, _ := m.Lookup(wk.ID); d[kvfleet.TierDevice] > 0 {
			h := d[kvfleet.TierDevice]
			if holders == 0 || h < minHit {
				minHit = h
			}
			maxHit = max(maxHit, h)
			holders++
		}
		q := s.engines[j].Stats().Waiting
		if j == 0 || q < minQ {
			minQ = q
		}
		maxQ = max(maxQ, q)
	}
	best, bestScore, ties := 0, -1.0, 0
	for j, wk := range s.workers {
		st := s.engines[j].Stats()
		prefix := 0.0
		if d, _ := m.Lookup(wk.ID); d[kvfleet.TierDevice] > 0 {
			h := d[kvfleet.TierDevice]
			prefix = 1
			if maxHit > minHit {
				prefix = float64(h-minHit) / float64(maxHit-minHit)
			}
		}
		queue := 1.0
		if maxQ > minQ {
			queue = float64(maxQ-st.Waiting) / float64(maxQ-minQ)
		}
		score := llmdPrefixWeight*prefix + llmdKVWeight*(1-st.KVUsage) + llmdQueueWeight*queue
		switch {
		case score > bestScore:
			best, bestScore, ties = j, score, 1
		case score == bestScore:
			ties++
			if s.rnd.IntN(ties) == 0 {
				best = j
			}
		}
	}
	return best
}
