package picker

// requestsTerm is the requests term: Dynamo's
// decode_active_request_weight × the worker's in-flight requests
// (kvgate's own count; default weight 0, as Dynamo's).
//
// A row term (terms.go): it reads its own candidate only.
type requestsTerm struct {
	on     bool
	weight float64
}

func newRequestsTerm(in *termInputs) requestsTerm {
	return requestsTerm{on: in.cfg.TermEnabled(TermRequests), weight: in.cfg.ActiveRequestWeight}
}

// of is candidate i's column.
func (r *requestsTerm) of(c *Candidate) float64 {
	return r.weight * nonNeg(int64(c.Load.InflightRequests))
}
