package picker

// decodeTerm is the decode term, weight 1 (Dynamo has none).
//
// Under dynamo, and under kvgate without AnticipateDecode: Dynamo's
// potential decode blocks, the worker's active blocks plus this request's
// (dynamo_cost.go).
//
// Under kvgate with AnticipateDecode (term (b) of the policy): the request
// will hold its prompt blocks that are not already on the device plus its
// output blocks, on top of what the worker holds (kvgate's bookings, or
// the engine's reported usage when larger). A footprint beyond the safe
// fraction of KV capacity means preemption and recompute, charged
// KVOverflowWeight per block past KVHeadroom × capacity.
//
// A row term (terms.go): it reads its own candidate only.
type decodeTerm struct {
	on, footprint bool
	blocks, out   float64 // this request's prompt and output blocks
	headroom      float64
	overflow      float64
}

func newDecodeTerm(in *termInputs) decodeTerm {
	req, k := in.req, &in.cfg.Kvgate
	out := (int64(req.ExpectedOutputTokens) + int64(req.BlockSize) - 1) / int64(req.BlockSize)
	return decodeTerm{
		on:        in.cfg.TermEnabled(TermDecode),
		footprint: in.cfg.Policy == PolicyKvgate && k.AnticipateDecode,
		blocks:    float64(req.Blocks), out: float64(out),
		headroom: k.KVHeadroom, overflow: k.KVOverflowWeight,
	}
}

// of is candidate i's column; device is its overlap in device memory
// (fillInputs).
func (d *decodeTerm) of(c *Candidate, device float64) float64 {
	if !d.footprint {
		return nonNeg(c.Load.DecodeBlocks) + d.blocks
	}
	v := usedKVBlocks(&c.Load) + (d.blocks - device) + d.out
	if capacity := c.Load.KVCapacityBlocks; capacity > 0 {
		if over := v - d.headroom*float64(capacity); over > 0 {
			v += d.overflow * over
		}
	}
	return v
}
