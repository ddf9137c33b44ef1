package picker

// prefillTerm is the prefill term: Dynamo's adjusted prefill,
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
//
// A row term (terms.go): it reads its own candidate only.
type prefillTerm struct {
	on, scale bool
	weight    float64
}

func newPrefillTerm(in *termInputs) prefillTerm {
	cfg := in.cfg
	return prefillTerm{
		on:     cfg.TermEnabled(TermPrefill) && in.req.Stage != StageDecode,
		scale:  cfg.Policy == PolicyKvgate && cfg.Kvgate.ThroughputAware && !in.fleet.uniform,
		weight: cfg.PrefillLoadScale,
	}
}

// of is candidate i's column; its inputs are set (fillInputs).
func (p *prefillTerm) of(in *termInputs, i int) float64 {
	t := &in.terms[i]
	prefill := max(0, t.PrefillBlocks-t.Credit)
	if p.scale {
		prefill *= in.fleet.mean / in.fleet.rateOf(&in.cands[i].Load)
	}
	return p.weight * prefill
}
