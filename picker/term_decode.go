package picker

// applyDecode is the decode term, weight 1 (Dynamo has none).
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
func applyDecode(in *termInputs) {
	req, k := in.req, &in.cfg.Kvgate
	footprint := in.cfg.Policy == PolicyKvgate && k.AnticipateDecode
	out := (int64(req.ExpectedOutputTokens) + int64(req.BlockSize) - 1) / int64(req.BlockSize)
	for i := range in.terms {
		if !in.terms[i].Eligible {
			continue
		}
		c := &in.cands[i]
		if !footprint {
			in.set(i, nonNeg(c.Load.DecodeBlocks)+float64(req.Blocks))
			continue
		}
		v := usedKVBlocks(&c.Load) + (float64(req.Blocks) - in.device[i]) + float64(out)
		if capacity := c.Load.KVCapacityBlocks; capacity > 0 {
			if over := v - k.KVHeadroom*float64(capacity); over > 0 {
				v += k.KVOverflowWeight * over
			}
		}
		in.set(i, v)
	}
}
