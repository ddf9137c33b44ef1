package store

import "github.com/kvgate/kvgate/kv/kvevents"

// announceLocked queues a residency change. Consecutive changes of one
// kind, tier and namespace merge into one Change, as a vLLM event batch
// carries several hashes.
func (s *Store) announceLocked(kind kvevents.Kind, t Tier, k Key, m *Meta) {
	if s.cfg.OnChange == nil {
		return
	}
	if n := len(s.outbox); n > 0 {
		last := &s.outbox[n-1]
		if last.Kind == kind && last.Tier == t && last.Namespace == k.Namespace {
			last.Hashes = append(last.Hashes, k.Hash)
			if m != nil {
				last.Metas = append(last.Metas, *m)
			}
			return
		}
	}
	c := Change{Kind: kind, Tier: t, Namespace: k.Namespace, Hashes: []uint64{k.Hash}}
	if m != nil {
		c.Metas = []Meta{*m}
	}
	s.outbox = append(s.outbox, c)
}

// flush delivers queued changes, in order, without holding mu. One
// goroutine delivers at a time (the delivering flag, under mu); others
// leave their changes in the outbox for it, so order is kept and a
// callback that calls back into the store does not deadlock.
func (s *Store) flush() {
	if s.cfg.OnChange == nil {
		return
	}
	s.mu.Lock()
	if s.delivering {
		s.mu.Unlock()
		return
	}
	s.delivering = true
	for len(s.outbox) > 0 {
		batch := s.outbox
		s.outbox = nil
		s.mu.Unlock()
		for _, c := range batch {
			s.cfg.OnChange(c)
		}
		s.mu.Lock()
	}
	s.delivering = false
	s.settled.Broadcast()
	s.mu.Unlock()
}
