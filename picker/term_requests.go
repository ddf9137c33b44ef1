package picker

// applyRequests is the requests term: Dynamo's
// decode_active_request_weight × the worker's in-flight requests
// (kvgate's own count; default weight 0, as Dynamo's).
func applyRequests(in *termInputs) {
	for i := range in.terms {
		if in.terms[i].Eligible {
			in.set(i, in.cfg.ActiveRequestWeight*nonNeg(int64(in.cands[i].Load.InflightRequests)))
		}
	}
}
