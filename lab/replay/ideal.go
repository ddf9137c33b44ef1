package replay

import "github.com/kvgate/kvgate/kv/blockhash"

// IdealHitRatio is the prefix-cache hit ratio of one engine with an
// infinite cache serving the whole trace in arrival order, at blockSize:
// cached prompt tokens / prompt tokens, where a request's cached tokens are
// its longest prefix of full blocks seen in any earlier request, capped (as
// in vLLM) so that the last prompt token is always computed. A fleet of
// finite caches can only do worse: this is the bar for hit_ratio.
func IdealHitRatio(reqs []TraceRequest, blockSize int) float64 {
	if blockSize <= 0 {
		return 0
	}
	seen := map[uint64]struct{}{}
	return singleCacheHitRatio(reqs, blockSize,
		func(h uint64) bool { _, ok := seen[h]; return ok },
		func(chain []uint64) {
			for _, h := range chain {
				seen[h] = struct{}{}
			}
		})
}

// singleCacheHitRatio serves reqs in arrival order from one prefix cache:
// a request's cached tokens are its longest prefix of full blocks for which
// has holds, capped so that the last prompt token is always computed (as in
// vLLM); then admit is told the request's whole prompt chain. Returns
// cached prompt tokens / prompt tokens.
func singleCacheHitRatio(reqs []TraceRequest, blockSize int, has func(uint64) bool, admit func(chain []uint64)) float64 {
	seed := blockhash.Seed("", "")
	var cached, total int64
	var toks []uint32
	for _, r := range reqs {
		toks = Tokens(toks, r)
		chain := blockhash.SequenceHashes(blockhash.LocalHashes(toks, blockSize, seed))
		limit := (len(toks) - 1) / blockSize
		hit := 0
		for hit < limit && has(chain[hit]) {
			hit++
		}
		admit(chain)
		cached += int64(hit * blockSize)
		total += int64(len(toks))
	}
	if total == 0 {
		return 0
	}
	return float64(cached) / float64(total)
}
