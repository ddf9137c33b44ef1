package extproc

import (
	"context"
	"sync"
	"time"

	"github.com/kvgate/kvgate/kv/kvindex"
)

// matchBuffers recycles the match stage's result buffers: a decision's
// Match lives from match to gather, and a buffer that grew to the fleet's
// size is reused by the next decision instead of reallocated (kvindex.Match).
var matchBuffers = sync.Pool{New: func() any { return new(kvindex.Match) }}

// newMatchBuffer returns an empty buffer for match; releaseMatchBuffer
// hands it back once gather has copied the depths out.
func newMatchBuffer() *kvindex.Match { return matchBuffers.Get().(*kvindex.Match) }

func releaseMatchBuffer(m *kvindex.Match) {
	m.Reset()
	matchBuffers.Put(m)
}

// match fills m with the index's answer, deepened by the prefixes routed
// but not yet confirmed by KV events (pendingcredit.go), and, for workers
// without KV events, kvgate's own recent decisions. An index failure or
// timeout routes on load alone: counted, never a 5xx.
func (r *Router) match(ctx context.Context, p *pool, chain []uint64, now time.Time, m *kvindex.Match) {
	m.Reset()
	if len(chain) == 0 {
		return
	}
	ictx, cancel := context.WithTimeout(ctx, r.cfg.IndexTimeout.D())
	defer cancel()
	if err := r.idx.Match(ictx, chain, m); err != nil {
		r.metrics.indexErrors.Inc()
		r.log.Warn("index match failed; routing on load only", "err", err)
		m.Reset()
	}
	r.pending.Merge(m, chain, now)
	if len(p.approx) > 0 {
		approx := newMatchBuffer()
		defer releaseMatchBuffer(approx)
		r.recent.Match(chain, now, approx)
		for w, d := range approx.All() {
			if p.approx[w] {
				m.Set(w, d)
			}
		}
	}
}
