package picker

// applyRecompute is the recompute term, kvgate's affinity under load (term
// (d) of the policy). Under overload every worker has a queue, and
// Dynamo's cost moves a request off the worker caching its prefix as soon
// as that worker's queue exceeds the others' by the cached blocks: the
// request is then recomputed elsewhere, the fleet does more work for the
// same traffic, and the hit ratio falls exactly when cached prefill is the
// only spare capacity. Charging each worker the blocks it would recompute
// relative to the holder keeps the request with the holder until the
// holder's extra queue exceeds (1 + RecomputeWeight) × the recompute, or
// until the holder's predicted TTFT passes HolderMaxWaitSeconds.
//
// The holder is the best-credited eligible worker, ties broken by the cost
// so far (the terms listed before this one).
func applyRecompute(in *termInputs) {
	cfg, terms := in.cfg, in.terms
	k := &cfg.Kvgate
	if k.RecomputeWeight == 0 || in.req.Stage == StageDecode {
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
		in.set(i, TermRecompute, cfg.PrefillLoadScale*k.RecomputeWeight*(best-t.Credit))
	}
}
