package extproc

import (
	"context"
	"time"

	"github.com/kvgate/kvgate/kv/kvindex"
)

// match asks the index, deepened by the prefixes routed but not yet
// confirmed by KV events (pendingcredit.go), and, for workers without KV
// events, kvgate's own recent decisions. An index failure or timeout
// routes on load alone: counted, never a 5xx.
func (r *Router) match(ctx context.Context, p *pool, chain []uint64, now time.Time) kvindex.Match {
	if len(chain) == 0 {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, r.cfg.IndexTimeout.D())
	defer cancel()
	m, err := r.idx.Match(ictx, chain)
	if err != nil {
		r.metrics.indexErrors.Inc()
		r.log.Warn("index match failed; routing on load only", "err", err)
		m = kvindex.Match{}
	}
	m = r.pending.Merge(m, chain, now)
	if len(p.approx) > 0 {
		for w, d := range r.recent.Match(chain, now) {
			if p.approx[w] {
				if m == nil {
					m = kvindex.Match{}
				}
				m[w] = d
			}
		}
	}
	return m
}
