package extproc

import (
	"math/rand/v2"
	"net/http"

	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/picker"
)

// choice is the pick stage's answer. dec indexes cands: the gathered
// candidates, or the decode leg's for a P/D pool. prefill is the prefill
// worker of a disaggregated request, nil otherwise.
type choice struct {
	dec     picker.Decision
	cands   []picker.Candidate
	prefill *picker.Candidate
	pdNote  string // why the P/D decision went the way it did; "" outside P/D pools
	// prefillPanic: the prefill leg's pick was made in panic
	// (dec.Panic says so of the decode or aggregated pick).
	prefillPanic                   bool
	prefillHealthy, prefillWorkers int
	// expectedOutput is the output length the picker assumed, which the
	// booking reserves KV blocks for.
	expectedOutput int
	// pooled is the recycled Decision dec was picked into (nil for a P/D
	// pool's); release returns it.
	pooled *picker.Decision
}

// release hands the choice's Decision back for another request. Decide
// calls it once the decision is booked and recorded: book copies the
// endpoints it keeps, record the terms (topCandidates), so nothing holds
// dec's slices after.
func (r *Router) release(c *choice) {
	if c.pooled != nil {
		r.decisions.Put(c.pooled)
		c.pooled, c.dec = nil, picker.Decision{}
	}
}

// pick asks the pure picker for a worker (picker.Checked.Pick), or, in a
// pool with prefill workers and P/D enabled, for a decode worker and
// whether to prefill elsewhere first (picker.CheckedPD.Decide).
func (r *Router) pick(req *server.Request, res *preprocess.Result, p *pool, cands []picker.Candidate, rnd *rand.Rand) (choice, *server.RouteError) {
	noWorker := func() (choice, *server.RouteError) {
		r.metrics.requests.WithLabelValues(res.Served, "no_worker").Inc()
		return choice{}, routeError(req.Path, http.StatusServiceUnavailable, "no eligible worker for model "+res.Served, "service_unavailable", "no_eligible_worker")
	}
	if len(cands) == 0 {
		return noWorker()
	}
	expected := int(min(res.MaxTokens, picker.MaxOutputTokens)) // parsing bounds it; the picker must never see more
	if expected <= 0 {
		expected = r.cfg.ExpectedOutputTokens
	}
	preq := picker.Request{Stage: picker.StageAggregated, PromptTokens: len(res.Tokens), BlockSize: res.Model.BlockSize, Blocks: len(res.Sequence), ExpectedOutputTokens: expected}
	c := choice{cands: cands, expectedOutput: expected}
	var err error
	if r.cfg.PD.Enabled && p.hasPD {
		err = r.pickPD(&c, preq, rnd)
	} else {
		// A recycled Decision: its terms (one row per candidate) and
		// scratch are not allocated per request.
		d, _ := r.decisions.Get().(*picker.Decision)
		if d == nil {
			d = new(picker.Decision)
		}
		err = r.picks.PickInto(d, preq, cands, rnd)
		c.dec, c.pooled = *d, d
	}
	if err != nil {
		r.release(&c)
		// The picker's reason names workers and bounds: log it, never tell
		// the client.
		r.log.Warn("picker refused the request", "request_id", req.RequestID, "model", res.Served, "err", err)
		return noWorker()
	}
	return c, nil
}

// pickPD splits c.cands by role and lets the picker decide between an
// aggregated request and a prefill worker plus a decode worker.
func (r *Router) pickPD(c *choice, preq picker.Request, rnd *rand.Rand) error {
	prefillCands := byRole(c.cands, picker.RolePrefill)
	decodeCands := byRole(c.cands, picker.RoleDecode)
	pdd, err := r.pd.Decide(preq, prefillCands, decodeCands, rnd)
	if err != nil {
		return err
	}
	c.dec, c.cands, c.pdNote = pdd.Decode, decodeCands, pdd.Reason
	if pdd.Disaggregate {
		c.prefill = &prefillCands[pdd.Prefill.Primary]
		c.prefillPanic, c.prefillHealthy, c.prefillWorkers = pdd.Prefill.Panic, pdd.Prefill.Healthy, pdd.Prefill.Hosts
		r.metrics.pd.WithLabelValues("disaggregated").Inc()
	} else {
		r.metrics.pd.WithLabelValues("aggregated").Inc()
	}
	return nil
}

// byRole keeps the candidates that can serve a P/D leg: prefill-only
// workers for the prefill leg; decode-only and aggregated workers for the
// decode leg (they also serve requests that stay aggregated).
func byRole(cands []picker.Candidate, role picker.Role) []picker.Candidate {
	var out []picker.Candidate
	for _, c := range cands {
		if c.Worker.Role == role || (role == picker.RoleDecode && c.Worker.Role == picker.RoleBoth) {
			out = append(out, c)
		}
	}
	return out
}
