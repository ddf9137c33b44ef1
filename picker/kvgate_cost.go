package picker

// The "kvgate" policy keeps Dynamo's cost (dynamo_cost.go) and changes three
// terms, each switchable on its own in KvgateConfig so that the replay
// benchmark can measure them one at a time:
//
//	(a) throughput-aware prefill — predicted TTFT instead of block counts;
//	(b) decode footprint        — expected output, device dedup, KV capacity;
//	(c) anti-herding            — spread ties in credit by in-flight share;
//	(d) affinity under load     — leaving the cache holder pays the recompute.
//
// Units stay Dynamo's (KV blocks), so PrefillLoadScale and Temperature mean
// the same under both policies.

// kvgateTerms fills t for an eligible candidate under the kvgate policy.
func kvgateTerms(req *Request, c *Candidate, cfg *Config, fleet *fleetView, t *Terms) {
	k := &cfg.Kvgate
	bs := float64(req.BlockSize)
	credit, device := tierCredit(&c.Depths, req.Blocks, &cfg.TierWeights)
	t.Credit = credit

	prefill := 0.0
	if req.Stage != StageDecode {
		t.PrefillBlocks = rawPrefillBlocks(req, &c.Load)
		prefill = max(0, t.PrefillBlocks-credit) // Dynamo's adjusted prefill
		rate := fleet.rateOf(&c.Load)
		// (a) The worker first drains its queued prefill, then computes the
		// part of this prompt it cannot load from cache.
		t.TTFTSeconds = prefill * bs / rate
		if k.ThroughputAware && !fleet.uniform {
			// Express the TTFT in blocks at the fleet's mean rate: a worker
			// twice as fast costs half as much per queued block. When all
			// rates agree the ratio is 1 and is skipped, so that the cost is
			// bit-identical to Dynamo's and exact ties stay ties.
			prefill *= fleet.mean / rate
		}
	}

	if k.AnticipateDecode {
		// (b) The request will hold its prompt blocks that are not already
		// on the device plus its output blocks. A footprint beyond the safe
		// fraction of KV capacity means preemption and recompute.
		out := (int64(req.ExpectedOutputTokens) + int64(req.BlockSize) - 1) / int64(req.BlockSize)
		footprint := usedKVBlocks(&c.Load) + (float64(req.Blocks) - device) + float64(out)
		t.DecodeBlocks = footprint
		if capacity := c.Load.KVCapacityBlocks; capacity > 0 {
			over := footprint - k.KVHeadroom*float64(capacity)
			if over > 0 {
				t.DecodeBlocks += k.KVOverflowWeight * over
			}
		}
	} else {
		t.DecodeBlocks = nonNeg(c.Load.DecodeBlocks) + float64(req.Blocks)
	}
	t.RequestsTerm = cfg.ActiveRequestWeight * nonNeg(int64(c.Load.InflightRequests))
	t.Cost = cfg.PrefillLoadScale*prefill + t.DecodeBlocks + t.RequestsTerm
}

// addHerdPenalties is term (c). With argmin routing, a burst of requests that
// all see several workers equally well cached (a shared system prompt, or no
// cache at all) follows whichever worker's load signal is momentarily
// lowest; other routers' traffic is invisible to kvgate's own counts. When
// at least HerdMinTied eligible workers are within HerdTieBlocks of the best
// credit, each of them pays HerdWeight × request blocks × the excess of its
// in-flight count over the group's mean (engine-reported counts included).
func addHerdPenalties(req *Request, cands []Candidate, terms []Terms, k *KvgateConfig) {
	if k.HerdWeight == 0 {
		return
	}
	best := -1.0
	for i := range terms {
		if terms[i].Eligible && terms[i].Credit > best {
			best = terms[i].Credit
		}
	}
	floor := best - k.HerdTieBlocks
	n, sum := 0, 0.0
	for i := range terms {
		if terms[i].Eligible && terms[i].Credit >= floor {
			n++
			sum += inflight(&cands[i].Load)
		}
	}
	if n < k.HerdMinTied || sum == 0 {
		return
	}
	mean := sum / float64(n)
	size := max(1, float64(req.PromptTokens)/float64(req.BlockSize))
	for i := range terms {
		t := &terms[i]
		if !t.Eligible || t.Credit < floor {
			continue
		}
		if excess := inflight(&cands[i].Load)/mean - 1; excess > 0 {
			t.HerdPenalty = k.HerdWeight * size * excess
			t.Cost += t.HerdPenalty
		}
	}
}

// addRecomputePenalties is term (d). Under overload every worker has a
// queue, and Dynamo's cost moves a request off the worker caching its
// prefix as soon as that worker's queue exceeds the others' by the cached
// blocks: the request is then recomputed elsewhere, the fleet does more
// work for the same traffic, and the hit ratio falls exactly when cached
// prefill is the only spare capacity. Charging each worker the blocks it
// would recompute relative to the holder keeps the request with the holder
// until the holder's extra queue exceeds (1 + RecomputeWeight) × the
// recompute, or until the holder's predicted TTFT passes the wait bound.
func addRecomputePenalties(req *Request, terms []Terms, cfg *Config) {
	k := &cfg.Kvgate
	if k.RecomputeWeight == 0 || req.Stage == StageDecode {
		return
	}
	holder := -1
	for i := range terms {
		t := &terms[i]
		if t.Eligible && (holder < 0 || t.Credit > terms[holder].Credit || (t.Credit == terms[holder].Credit && t.Cost < terms[holder].Cost)) {
			holder = i
		}
	}
	if holder < 0 || terms[holder].Credit == 0 {
		return
	}
	if k.HolderMaxWaitSeconds > 0 && terms[holder].TTFTSeconds > k.HolderMaxWaitSeconds {
		return
	}
	best := terms[holder].Credit
	for i := range terms {
		t := &terms[i]
		if !t.Eligible || t.Credit >= best {
			continue
		}
		t.RecomputePenalty = cfg.PrefillLoadScale * k.RecomputeWeight * (best - t.Credit)
		t.Cost += t.RecomputePenalty
	}
}
