package store

import (
	"errors"
	"fmt"
)

// Lookup returns the tier of each block of the longest resident prefix of
// chain (host preferred when a block is in both). It is a pure query: it
// neither pins, promotes nor counts hits.
func (s *Store) Lookup(ns string, chain []uint64) []Tier {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Tier, 0, len(chain))
	for _, h := range chain {
		k := Key{Namespace: ns, Hash: h}
		switch {
		case s.hostIndex != nil && s.hostIndex.entries[k] != nil:
			out = append(out, TierHost)
		case s.diskIndex != nil && s.diskIndex.entries[k] != nil:
			out = append(out, TierDisk)
		default:
			return out
		}
	}
	return out
}

// Acquire pins the resident prefix of chain in host memory and returns one
// slot per block of it; disk blocks are promoted into host slots (their
// checksums verified on the way). The prefix ends at the first block that
// is absent, fails its checksum, or cannot get a host slot. Every block of
// chain counts as seen for admission; blocks beyond the prefix count as
// misses. The caller must Release the slots.
//
// Host-resident blocks are handed out as they are: the engine that asks
// maps the arena read-write anyway, so a checksum pass would guard
// nothing it could not overwrite, and would cost a read of every block on
// the onboard path.
func (s *Store) Acquire(ns string, chain []uint64) ([]Slot, error) {
	return s.acquire(ns, chain, false)
}

// AcquireVerified is Acquire that also checks the checksum of every
// host-resident block before handing it out (disk blocks are checked when
// promoted): for blocks served beyond the node (peer fetches), so bytes
// that changed in the arena since their Commit — by a bug, or an engine
// writing outside its reservation — are dropped, never propagated. The
// prefix ends before the first block that fails; it is removed and
// counted as corrupt.
func (s *Store) AcquireVerified(ns string, chain []uint64) ([]Slot, error) {
	return s.acquire(ns, chain, true)
}

func (s *Store) acquire(ns string, chain []uint64, verify bool) ([]Slot, error) {
	if s.hostIndex == nil {
		return nil, ErrNoHostTier
	}
	s.mu.Lock()
	if err := s.beginLocked(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	defer s.inflight.Done()
	out := make([]Slot, 0, len(chain))
	// held[i] is the host entry behind out[i] and whether it was resident
	// (not promoted) — the ones a verifying acquire still has to check.
	type heldEntry struct {
		e        *entry
		resident bool
	}
	var held []heldEntry
	for _, h := range chain {
		s.sketch.add(Key{Namespace: ns, Hash: h})
	}
	for _, h := range chain {
		k := Key{Namespace: ns, Hash: h}
		if e := s.hostIndex.entries[k]; e != nil {
			s.hostIndex.pin(e)
			s.hostIndex.touch(e, s.tick())
			s.c.hits[TierHost]++
			s.c.onboardBytes[TierHost] += uint64(s.cfg.BlockBytes)
			out = append(out, Slot(e.slot))
			if verify {
				held = append(held, heldEntry{e, true})
			}
			continue
		}
		de := (*entry)(nil)
		if s.diskIndex != nil {
			de = s.diskIndex.entries[k]
		}
		if de == nil {
			break
		}
		e, err := s.promoteLocked(de)
		if err != nil {
			break
		}
		s.c.hits[TierDisk]++
		s.c.onboardBytes[TierDisk] += uint64(s.cfg.BlockBytes)
		out = append(out, Slot(e.slot))
		if verify {
			held = append(held, heldEntry{e, false})
		}
	}
	s.c.misses += uint64(len(chain) - len(out))
	if verify {
		// Outside the lock: every entry is pinned, its slot cannot be
		// reused meanwhile, and e.sum never changes after install.
		s.mu.Unlock()
		bad := -1
		for i, he := range held {
			if he.resident && blockSum(s.arena.slot(he.e.slot)) != he.e.sum {
				bad = i
				break
			}
		}
		s.mu.Lock()
		if bad >= 0 {
			e := held[bad].e
			s.c.corrupt[TierHost]++
			s.log.Warn("kvagent host block failed its checksum before serving a peer; dropped", "namespace", e.key.Namespace, "hash", e.key.Hash, "slot", e.slot)
			for _, he := range held[bad:] {
				s.releaseHostLocked(he.e)
				tier := TierHost
				if !he.resident {
					tier = TierDisk
				}
				s.c.hits[tier]--
				s.c.onboardBytes[tier] -= uint64(s.cfg.BlockBytes)
			}
			s.dropHostLocked(e)
			s.c.misses += uint64(len(out) - bad)
			out = out[:bad]
		}
	}
	s.mu.Unlock()
	s.flush()
	return out, nil
}

// PinSlots adds one pin to each slot, which must hold a live block that
// is already pinned (by an Acquire): a peer read holds its blocks with it
// while their bytes are sent, so a concurrent Release of the Acquire's
// pins cannot let the slot be reused mid-read. Release undoes it. On error
// nothing is pinned.
func (s *Store) PinSlots(slots []Slot) error {
	if s.hostIndex == nil {
		return ErrNoHostTier
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range slots {
		if sl < 0 || int(sl) >= len(s.hostSlots) {
			return fmt.Errorf("pin: slot %d outside the arena [0, %d)", sl, len(s.hostSlots))
		}
		if hs := s.hostSlots[sl]; hs.state != slotResident || hs.e.dead || hs.e.pins == 0 {
			return fmt.Errorf("pin: slot %d holds no acquired block", sl)
		}
	}
	for _, sl := range slots {
		s.hostIndex.pin(s.hostSlots[sl].e)
	}
	return nil
}

// promoteLocked copies a disk block into a new host slot, verified, and
// returns the host entry pinned. Called with mu held; mu is released
// during the disk read (the disk entry is pinned meanwhile, so the writer
// cannot reuse its slot).
func (s *Store) promoteLocked(de *entry) (*entry, error) {
	i, ok := s.allocHostLocked()
	if !ok {
		return nil, ErrFull
	}
	s.diskIndex.pin(de)
	k, sum := de.key, de.sum
	s.mu.Unlock()
	meta, err := s.readDiskBlock(de.slot, k, sum, s.arena.slot(i))
	s.mu.Lock()
	s.releaseDiskLocked(de)
	if err != nil {
		s.freeHostSlotLocked(i)
		s.diskReadFailedLocked(de, err)
		return nil, err
	}
	s.diskIndex.touch(de, s.tick())
	e := s.installHostLocked(k, meta, i, sum)
	s.hostIndex.pin(e)
	return e, nil
}

// Release drops one pin per slot (from Acquire). Slots that are not pinned
// are ignored and logged.
func (s *Store) Release(slots []Slot) {
	if s.hostIndex == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range slots {
		if sl < 0 || int(sl) >= len(s.hostSlots) {
			s.log.Warn("kvagent release of an out-of-range slot", "slot", sl)
			continue
		}
		hs := s.hostSlots[sl]
		if hs.state != slotResident || hs.e.pins == 0 {
			s.log.Warn("kvagent release of a slot that is not pinned", "slot", sl)
			continue
		}
		s.releaseHostLocked(hs.e)
	}
}

// Get copies a block out into dst (len BlockBytes), verifying its checksum.
// A disk hit is promoted to host memory when a host slot can be had. It
// returns ErrNotFound when the block is absent and ErrCorrupt when it fails
// its checksum (the block is dropped).
func (s *Store) Get(k Key, dst []byte) (Tier, Meta, error) {
	if len(dst) != s.cfg.BlockBytes {
		return 0, Meta{}, fmt.Errorf("get %s/%d: buffer of %d bytes, block size is %d", k.Namespace, k.Hash, len(dst), s.cfg.BlockBytes)
	}
	s.mu.Lock()
	if err := s.beginLocked(); err != nil {
		s.mu.Unlock()
		return 0, Meta{}, err
	}
	defer s.inflight.Done()
	defer s.flush()
	defer s.mu.Unlock()
	s.sketch.add(k)
	if s.hostIndex != nil {
		if e := s.hostIndex.entries[k]; e != nil {
			return s.copyOutLocked(e, dst, TierHost)
		}
	}
	if s.diskIndex == nil || s.diskIndex.entries[k] == nil {
		s.c.misses++
		return 0, Meta{}, fmt.Errorf("get %s/%d: %w", k.Namespace, k.Hash, ErrNotFound)
	}
	de := s.diskIndex.entries[k]
	if s.hostIndex != nil {
		e, err := s.promoteLocked(de)
		if err == nil {
			t, m, err := s.copyOutLocked(e, dst, TierDisk)
			s.releaseHostLocked(e)
			return t, m, err
		}
		if !errors.Is(err, ErrFull) {
			return 0, Meta{}, fmt.Errorf("get %s/%d: %w", k.Namespace, k.Hash, err)
		}
		if de.dead { // dropped while we waited
			s.c.misses++
			return 0, Meta{}, fmt.Errorf("get %s/%d: %w", k.Namespace, k.Hash, ErrNotFound)
		}
	}
	// No host slot to promote into: read straight into dst.
	s.diskIndex.pin(de)
	s.mu.Unlock()
	meta, err := s.readDiskBlock(de.slot, k, de.sum, dst)
	s.mu.Lock()
	s.releaseDiskLocked(de)
	if err != nil {
		s.diskReadFailedLocked(de, err)
		return 0, Meta{}, fmt.Errorf("get %s/%d: %w", k.Namespace, k.Hash, err)
	}
	s.diskIndex.touch(de, s.tick())
	s.c.hits[TierDisk]++
	s.c.onboardBytes[TierDisk] += uint64(s.cfg.BlockBytes)
	return TierDisk, cloneMeta(meta), nil
}

// copyOutLocked copies a host entry into dst, verifying its checksum, and
// counts the hit for tier (TierDisk when e was just promoted). Called with
// mu held; mu is released during the copy (e is pinned meanwhile).
func (s *Store) copyOutLocked(e *entry, dst []byte, tier Tier) (Tier, Meta, error) {
	s.hostIndex.pin(e)
	s.hostIndex.touch(e, s.tick())
	s.mu.Unlock()
	got := copySum(dst, s.arena.slot(e.slot))
	s.mu.Lock()
	s.releaseHostLocked(e)
	if got != e.sum {
		s.c.corrupt[TierHost]++
		s.log.Warn("kvagent host block failed its checksum; dropped", "namespace", e.key.Namespace, "hash", e.key.Hash, "slot", e.slot)
		s.dropHostLocked(e)
		return 0, Meta{}, fmt.Errorf("get %s/%d: %w: host slot %d checksum %#016x, stored %#016x", e.key.Namespace, e.key.Hash, ErrCorrupt, e.slot, got, e.sum)
	}
	s.c.hits[tier]++
	s.c.onboardBytes[tier] += uint64(s.cfg.BlockBytes)
	return tier, cloneMeta(e.meta), nil
}

// PinnedMetas returns the hash and meta of the block in each slot, which
// the caller holds pinned (Acquire): a peer fetch commits the blocks under
// the same metas. Nothing is copied but the metas.
func (s *Store) PinnedMetas(slots []Slot) ([]uint64, []Meta, error) {
	if s.hostIndex == nil {
		return nil, nil, ErrNoHostTier
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	hashes := make([]uint64, len(slots))
	metas := make([]Meta, len(slots))
	for i, sl := range slots {
		if sl < 0 || int(sl) >= len(s.hostSlots) {
			return nil, nil, fmt.Errorf("metas: slot %d outside the arena [0, %d)", sl, len(s.hostSlots))
		}
		hs := s.hostSlots[sl]
		if hs.state != slotResident || hs.e.pins == 0 {
			return nil, nil, fmt.Errorf("metas: slot %d holds no pinned block", sl)
		}
		hashes[i], metas[i] = hs.e.key.Hash, cloneMeta(hs.e.meta)
	}
	return hashes, metas, nil
}
