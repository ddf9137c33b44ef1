package extproc

import (
	"time"

	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// booking is what a routed request holds on its worker until its ticket
// ends: the zero value for a request without a prompt.
type booking struct {
	chain        []uint64 // the prompt's block hashes, credited as pending/recent
	uncached     int64    // prompt tokens to prefill (not on the worker's device tier)
	decodeBlocks int64    // KV blocks for the prompt and the expected output
	model        string   // served model name
}

// bookingFor sizes the booking of a prompt routed to c's choice.
func bookingFor(res *preprocess.Result, c choice) booking {
	chosen := c.cands[c.dec.Primary]
	return booking{
		chain:        res.Sequence,
		uncached:     int64(len(res.Tokens) - chosen.Depths[kvfleet.TierDevice]*res.Model.BlockSize),
		decodeBlocks: int64((len(res.Tokens) + c.expectedOutput + res.Model.BlockSize - 1) / res.Model.BlockSize),
		model:        res.Served,
	}
}

// book opens the request's ticket on kvgate's own accounting (the load
// view, and the pending or recent credit for the prompt's chain) and
// writes the decision Envoy gets: primary, fallbacks, prefiller.
func (r *Router) book(p *pool, c choice, b booking, now time.Time) *server.Decision {
	chosen := c.cands[c.dec.Primary]
	switch {
	case c.dec.Panic:
		r.panics.note(p.model, c.dec.Healthy, c.dec.Hosts, r.pickConfig.HealthyPanicThreshold, now)
	case c.prefillPanic:
		r.panics.note(p.model, c.prefillHealthy, c.prefillWorkers, r.pickConfig.HealthyPanicThreshold, now)
	}
	t := &ticket{router: r, worker: chosen.Worker.ID, chain: b.chain, start: now, uncached: b.uncached, decodeBlocks: b.decodeBlocks, model: b.model}
	t.load = r.load.Begin(chosen.Worker.ID, b.uncached, b.decodeBlocks, now)
	if c.prefill != nil {
		// The prefill leg is accounted on the prefill worker until the
		// first token: the decode worker receives KV, not a prefill.
		t.prefill = r.load.Begin(c.prefill.Worker.ID, b.uncached, 0, now)
	}
	if p.approx[chosen.Worker.ID] {
		r.recent.Record(chosen.Worker.ID, b.chain, now)
	}
	r.recordPending(p, chosen.Worker.ID, b.chain, now)
	if c.prefill != nil {
		r.recordPending(p, c.prefill.Worker.ID, b.chain, now)
	}
	d := &server.Decision{Endpoint: chosen.Worker.Endpoint, Ticket: t}
	for _, fb := range c.dec.Fallbacks {
		d.Fallbacks = append(d.Fallbacks, c.cands[fb].Worker.Endpoint)
		t.fallbackIDs = append(t.fallbackIDs, c.cands[fb].Worker.ID)
	}
	t.fallbacks = d.Fallbacks
	if c.prefill != nil {
		// Only the header: the routing sidecar beside the decode worker
		// writes the prefill and decode bodies itself (server's
		// routingMutation cites it), so kvgate leaves the body alone.
		d.Prefiller = c.prefill.Worker.Endpoint
	}
	return d
}
