package loadview

import (
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// PendingTTL is how long a routed prefix is credited before only KV events
// count: longer than a prefill under load (the engine publishes a block's
// BlockStored once it is computed), shorter than a cache lifetime.
const PendingTTL = 10 * time.Second

// Pending credits a worker with the prefixes of requests kvgate routed to
// it whose KV events have not arrived yet. Without it, a burst of requests
// sharing a new prefix scatters across the fleet: until the first one's
// blocks are stored and published, the index shows no holder and every
// request in the burst looks like a cold miss everywhere.
//
// Dynamo's router keeps the same per-worker record of routed requests'
// block hashes (ActiveSequences, lib/llm/src/kv_router/sequence.rs in
// ai-dynamo/dynamo) but uses it for load only (potential active and prefill
// blocks, docs/design_docs/router_design.md); its overlap score comes from
// the KvIndexer's events alone, or, with --no-kv-events, from the
// ApproxKvIndexer's 120 s TTL instead of events. Pending is the middle
// ground: events are the truth, own decisions fill the gap until they come.
//
// A credit ends at the TTL, when the index confirms it (Merge then forgets
// the confirmed pairs, so later removals and resets in the index take
// effect at once), when its pairs are evicted to stay within MaxEntries, or
// when ForgetWorker is called for a worker that left or reset. It is safe
// for concurrent use.
type Pending struct {
	r *Recent
}

// NewPending returns an empty Pending; cfg bounds the TTL and the number of
// (block, worker) pairs remembered.
func NewPending(cfg RecentConfig) (*Pending, error) {
	r, err := NewRecent(cfg)
	if err != nil {
		return nil, err
	}
	return &Pending{r: r}, nil
}

// DefaultPendingConfig is PendingTTL with the Recent view's default bound.
func DefaultPendingConfig() RecentConfig {
	return RecentConfig{TTL: PendingTTL, MaxEntries: DefaultRecentMaxEntries}
}

// Record notes that the prompt whose block sequence hashes are chain was
// routed to w at now.
func (p *Pending) Record(w kvfleet.WorkerID, chain []uint64, now time.Time) {
	p.r.Record(w, chain, now)
}

// ForgetWorker drops every credit of w (it left the fleet or reset).
func (p *Pending) ForgetWorker(w kvfleet.WorkerID) { p.r.ForgetWorker(w) }

// Stats reads the underlying counters.
func (p *Pending) Stats() RecentStats { return p.r.Stats() }

// Merge deepens the index match m for chain with the pending credits at
// now, in place. For each worker the pending run is followed from the
// block where the index's device depth ends, so a prefix half confirmed by
// events and half still pending counts whole; the device depth is the end
// of that run and deeper tiers are raised to it, since depths are
// cumulative. A pending prefix counts as on the device: it is being
// computed there.
//
// Pairs the index already confirms on the device are forgotten: from then
// on the index alone says whether the worker holds them.
//
// The cost is one pass over m and one over the chain's pending pairs (not
// the chain once per worker the index knows): at 512 workers sharing a
// prompt the index reports hundreds.
func (p *Pending) Merge(m *kvindex.Match, chain []uint64, now time.Time) {
	if len(chain) == 0 {
		return
	}
	t := now.UnixNano()
	r := p.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live == 0 {
		return // nothing pending: the index's answer stands
	}
	// Confirmed pairs go first, while m still holds the index's depths:
	// the pending holders of each chain block the index puts within a
	// worker's device depth. The walk ends at the deepest device depth.
	confirmed := 0
	for i := range m.Len() {
		_, d := m.At(i)
		confirmed = max(confirmed, min(d[kvfleet.TierDevice], len(chain)))
	}
	for pos := range confirmed {
		slot := r.entries.find(chain[pos])
		if slot < 0 {
			continue
		}
		hs := &r.entries.slots[slot].set
		for k := 0; k < hs.len(); {
			if d, known := m.Lookup(r.workers.worker(hs.at(k).w)); known && d[kvfleet.TierDevice] > pos {
				hs.remove(k) // the last holder moved to k: look at k again
				r.live--
				continue
			}
			k++
		}
		if hs.len() == 0 {
			r.entries.removeAt(slot)
		}
	}
	// Workers the index knows, then pending holders of the first block the
	// index does not cover for them (block 0 for workers it does not know).
	for i := range m.Len() {
		w, d := m.At(i)
		dev := d[kvfleet.TierDevice]
		if end := r.runLocked(w, chain, dev, t); end > dev {
			for k := range d {
				d[k] = max(d[k], end)
			}
			m.SetDepthsAt(i, d)
		}
	}
	first := r.entries.get(chain[0])
	for k := range first.len() {
		h := first.at(k)
		if h.exp <= t {
			continue
		}
		w := r.workers.worker(h.w)
		if _, known := m.Lookup(w); known {
			continue
		}
		m.Add(w, depthsOf(r.runLocked(w, chain, 0, t)))
	}
}

// runLocked returns the end of w's unexpired pending run in chain starting
// at from (from itself when chain[from] is not pending for w).
func (r *Recent) runLocked(w kvfleet.WorkerID, chain []uint64, from int, t int64) int {
	id, ok := r.workers.lookup(w)
	if !ok {
		return from // no pairs
	}
	d := from
	for d < len(chain) {
		hs := r.entries.get(chain[d])
		if !hs.holds(id, t) {
			break
		}
		d++
	}
	return d
}

// forgetLocked drops w's pairs for hashes; their queue records become
// stale and fall out as they reach the front.
func (r *Recent) forgetLocked(w kvfleet.WorkerID, hashes []uint64) {
	id, ok := r.workers.lookup(w)
	if !ok {
		return // no pairs
	}
	for _, h := range hashes {
		r.dropHolderLocked(h, id)
	}
}

// Withdraw drops w's credit for chain: the request routed there failed or
// was served by another worker, so w is not computing that prefix. Blocks
// another in-flight request to w shares lose their credit too, which only
// errs towards trusting the kvindex.
func (p *Pending) Withdraw(w kvfleet.WorkerID, chain []uint64) {
	p.r.mu.Lock()
	p.r.forgetLocked(w, chain)
	p.r.mu.Unlock()
}
