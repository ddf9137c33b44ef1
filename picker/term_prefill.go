package picker

// applyPrefill is the prefill term: Dynamo's adjusted prefill,
// prefill_load_scale × max(0, raw_prefill_blocks − overlap credit), the
// worker's queued prefill plus the part of this prompt it cannot load
// from cache (dynamo_cost.go). A decode leg prefills nothing.
//
// Under the kvgate policy with ThroughputAware (term (a) of the policy),
// the blocks are priced at the worker's measured prefill rate, expressed
// in blocks at the fleet's mean rate: a worker twice as fast costs half as
// much per queued block. When all rates agree the ratio is 1 and is
// skipped, so that the cost is bit-identical to Dynamo's and exact ties
// stay ties.
func applyPrefill(in *termInputs) {
	if in.req.Stage == StageDecode {
		return
	}
	scale := in.cfg.Policy == PolicyKvgate && in.cfg.Kvgate.ThroughputAware && !in.fleet.uniform
	for i := range in.terms {
		t := &in.terms[i]
		if !t.Eligible {
			continue
		}
		prefill := max(0, t.PrefillBlocks-t.Credit)
		if scale {
			prefill *= in.fleet.mean / in.fleet.rateOf(&in.cands[i].Load)
		}
		in.set(i, in.cfg.PrefillLoadScale*prefill)
	}
}
