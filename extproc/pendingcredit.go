package extproc

import (
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// Pending-prefix credit for workers that publish KV events: between routing
// a request and the engine's BlockStored events reaching the index (a
// prefill plus the event path), the index does not know the worker is
// computing that prefix, so the next turn of the same session, or the rest
// of a burst sharing a new system prompt, would be scored as a cold miss
// everywhere and scattered. r.pending (loadview.Pending) remembers each
// decision's chain for PendingTTL and the match is deepened with it; the
// replay's kvgate policy runs the same code (lab/replay, simulation.go).
// Workers without KV events are credited by r.recent instead, at Dynamo's
// 120 s approximate TTL.

// recordPending remembers that chain is being computed on w, unless w is
// approximate (r.recent records those).
func (r *Router) recordPending(p *pool, w kvfleet.WorkerID, chain []uint64, now time.Time) {
	if p.approx[w] || len(chain) == 0 {
		return
	}
	r.pending.Record(w, chain, now)
}

// withdrawPending drops w's credit for chain when the request did not run
// there (a fallback served it, or the worker failed it).
func (r *Router) withdrawPending(w kvfleet.WorkerID, chain []uint64) {
	if len(chain) == 0 || w.Endpoint == "" {
		return
	}
	r.pending.Withdraw(w, chain)
}
