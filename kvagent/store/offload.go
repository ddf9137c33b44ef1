package store

import (
	"fmt"
)

// Reserve hands out len(ks) pinned, empty host slots for an offload: the
// engine writes each block's bytes into the shared-memory file at the
// slot's offset, then calls Commit (or Abort). Slots come from free space
// first, then by evicting least recently used leaves. It fails with ErrFull
// when the tier cannot supply them all (every other slot pinned or
// reserved); nothing stays reserved then.
func (s *Store) Reserve(ks []Key) ([]Slot, error) {
	if s.hostIndex == nil {
		return nil, ErrNoHostTier
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	out := make([]Slot, 0, len(ks))
	for range ks {
		i, ok := s.allocHostLocked()
		if !ok {
			for _, sl := range out {
				s.freeHostSlotLocked(int32(sl))
			}
			s.c.dropped[TierHost] += uint64(len(ks))
			s.mu.Unlock()
			s.flush()
			return nil, fmt.Errorf("reserve %d slots: %w", len(ks), ErrFull)
		}
		out = append(out, Slot(i))
	}
	s.mu.Unlock()
	s.flush()
	return out, nil
}

// Commit makes reserved slots resident as ks with metas once the engine
// has written them: each block's checksum is computed from the slot, the
// slot is unpinned, and an admitted block is queued for disk.
func (s *Store) Commit(ks []Key, metas []Meta, slots []Slot) error {
	return s.commit(ks, metas, slots, nil)
}

// CommitSummed is Commit with each block's checksum (blockSum) given by
// the writer, which computed it while copying the block into its slot
// (CopySum), so the store does not read every slot again — a second pass
// over the bytes that cost more than the copy itself on the offload path
// (BENCHMARKS.md, kvagent engine connector). The sum is trusted as far as
// the bytes are: the writer could write any bytes anyway. A wrong sum
// only makes its block fail where blocks are verified (Get, AcquireVerified
// before a peer is served, disk reads and recovery), which drops it; it
// is never served on.
func (s *Store) CommitSummed(ks []Key, metas []Meta, slots []Slot, sums []uint64) error {
	if len(sums) != len(ks) {
		return fmt.Errorf("commit: %d sums for %d keys: want one per block", len(sums), len(ks))
	}
	return s.commit(ks, metas, slots, sums)
}

// commit is Commit; sums nil means compute them from the slots.
func (s *Store) commit(ks []Key, metas []Meta, slots []Slot, sums []uint64) error {
	if len(ks) != len(metas) || len(ks) != len(slots) {
		return fmt.Errorf("commit: %d keys, %d metas, %d slots: want equal counts", len(ks), len(metas), len(slots))
	}
	for i := range ks {
		if err := checkMeta(ks[i], metas[i]); err != nil {
			return fmt.Errorf("commit: block %d: %w", i, err)
		}
	}
	if s.hostIndex == nil {
		return ErrNoHostTier
	}
	s.mu.Lock()
	if err := s.checkReservedLocked("commit", slots); err != nil {
		s.mu.Unlock()
		return err
	}
	if err := s.beginLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	defer s.inflight.Done()

	if sums == nil {
		sums = make([]uint64, len(slots))
		for i, sl := range slots {
			sums[i] = blockSum(s.arena.slot(int32(sl)))
		}
	}

	s.mu.Lock()
	var lost []int
	for i, sl := range slots {
		if s.hostSlots[sl].state != slotReserved { // aborted or committed concurrently
			lost = append(lost, int(sl))
			continue
		}
		s.sketch.add(ks[i])
		e := s.installHostLocked(ks[i], cloneMeta(metas[i]), int32(sl), sums[i])
		s.c.offloadBytes[TierHost] += uint64(s.cfg.BlockBytes)
		s.considerDiskLocked(e)
	}
	s.mu.Unlock()
	s.flush()
	if lost != nil {
		return fmt.Errorf("commit: slots %v were released by another call while committing", lost)
	}
	return nil
}

// checkReservedLocked validates slots handed back by a client.
func (s *Store) checkReservedLocked(op string, slots []Slot) error {
	seen := make(map[Slot]bool, len(slots))
	for i, sl := range slots {
		if sl < 0 || int(sl) >= len(s.hostSlots) {
			return fmt.Errorf("%s: slot %d (block %d) out of range [0, %d)", op, sl, i, len(s.hostSlots))
		}
		if s.hostSlots[sl].state != slotReserved {
			return fmt.Errorf("%s: slot %d (block %d) is not reserved", op, sl, i)
		}
		if seen[sl] {
			return fmt.Errorf("%s: slot %d given twice", op, sl)
		}
		seen[sl] = true
	}
	return nil
}

// Abort gives reserved slots back unwritten. Slots that are not reserved
// are ignored (and logged): a client retrying an abort must not free
// someone else's slot.
func (s *Store) Abort(slots []Slot) {
	if s.hostIndex == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range slots {
		if sl < 0 || int(sl) >= len(s.hostSlots) || s.hostSlots[sl].state != slotReserved {
			s.log.Warn("kvagent abort of a slot that is not reserved", "slot", sl)
			continue
		}
		s.freeHostSlotLocked(int32(sl))
	}
}

// considerDiskLocked queues a host-resident block for disk when the
// frequency gate admits it and it is not on disk or queued already.
func (s *Store) considerDiskLocked(e *entry) {
	if s.diskIndex == nil || s.diskIndex.entries[e.key] != nil || s.pending[e.key] || !s.admittedLocked(e.key) {
		return
	}
	s.enqueueDiskLocked(e.key, e.meta, e.sum, s.arena.slot(e.slot))
}

// Put copies one block in (len(data) == BlockBytes). With a host tier the
// block lands there (evicting leaf-first if needed); an admitted block is
// also queued for disk. Without a host tier an admitted block is queued
// for disk and a non-admitted one is counted as rejected.
func (s *Store) Put(k Key, m Meta, data []byte) error {
	if len(data) != s.cfg.BlockBytes {
		return fmt.Errorf("put %s/%d: %d bytes, block size is %d", k.Namespace, k.Hash, len(data), s.cfg.BlockBytes)
	}
	if err := checkMeta(k, m); err != nil {
		return fmt.Errorf("put %s/%d: %w", k.Namespace, k.Hash, err)
	}
	s.mu.Lock()
	if err := s.beginLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	defer s.inflight.Done()
	s.sketch.add(k)
	if s.hostIndex == nil {
		return s.putDiskOnly(k, m, data)
	}
	if e := s.hostIndex.entries[k]; e != nil {
		s.hostIndex.touch(e, s.tick())
		s.considerDiskLocked(e)
		s.mu.Unlock()
		s.flush()
		return nil
	}
	i, ok := s.allocHostLocked()
	if !ok {
		s.c.dropped[TierHost]++
		s.mu.Unlock()
		s.flush()
		return fmt.Errorf("put %s/%d: %w", k.Namespace, k.Hash, ErrFull)
	}
	s.mu.Unlock()
	sum := copySum(s.arena.slot(i), data)
	s.mu.Lock()
	e := s.installHostLocked(k, cloneMeta(m), i, sum)
	s.c.offloadBytes[TierHost] += uint64(s.cfg.BlockBytes)
	s.considerDiskLocked(e)
	s.mu.Unlock()
	s.flush()
	return nil
}

// putDiskOnly is Put without a host tier; called with mu held, releases it.
func (s *Store) putDiskOnly(k Key, m Meta, data []byte) error {
	defer s.flush()
	defer s.mu.Unlock()
	if s.diskIndex.entries[k] != nil || s.pending[k] {
		return nil
	}
	if !s.admittedLocked(k) {
		s.c.rejections++
		return nil
	}
	s.enqueueDiskLocked(k, cloneMeta(m), blockSum(data), data)
	return nil
}
