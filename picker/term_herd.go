package picker

// applyHerd is the herd term, kvgate's anti-herding (term (c) of the
// policy). With argmin routing, a burst of requests that all see several
// workers equally well cached (a shared system prompt, or no cache at all)
// follows whichever worker's load signal is momentarily lowest; other
// routers' traffic is invisible to kvgate's own counts. When at least
// HerdMinTied eligible workers are within HerdTieBlocks of the best
// credit, each of them pays HerdWeight × request blocks × the excess of
// its in-flight count over the group's mean (engine-reported counts
// included).
func applyHerd(in *termInputs) {
	k, terms, cands := &in.cfg.Kvgate, in.terms, in.cands
	if k.HerdWeight == 0 {
		return
	}
	floor := in.bestCredit - k.HerdTieBlocks
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
	size := max(1, float64(in.req.PromptTokens)/float64(in.req.BlockSize))
	for i := range terms {
		t := &terms[i]
		if !t.Eligible || t.Credit < floor {
			continue
		}
		if excess := inflight(&cands[i].Load)/mean - 1; excess > 0 {
			in.set(i, TermHerd, k.HerdWeight*size*excess)
		}
	}
}
