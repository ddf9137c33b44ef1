package store

import (
	"errors"
	"fmt"
	"sort"

	"github.com/kvgate/kvgate/kv/kvevents"
)

// recoverDisk rebuilds the disk index by reading every slot that existed
// before (header and data): a slot whose header or data checksum fails is
// a torn or corrupt write and is dropped (counted, never served); when two
// slots claim one key the newest generation wins (the other is a stale copy
// of an evicted block). Recovered blocks are announced parents first, since
// the indexer links a stored block to its parent.
func (s *Store) recoverDisk(existing int) error {
	buf := alignedBuffer(int(s.diskFile.slotBytes))
	found := map[Key]*entry{}
	used := make([]bool, s.cfg.DiskBlocks)
	corrupt := 0
	for i := 0; i < existing; i++ {
		slot := int32(i)
		if _, err := s.diskFile.f.ReadAt(buf, s.diskFile.offset(slot)); err != nil {
			return fmt.Errorf("read slot %d: %w", i, err)
		}
		h, err := decodeHeader(buf[:headerRegion])
		if errors.Is(err, errEmptySlot) {
			continue
		}
		if err == nil && int(h.DataLen) != s.cfg.BlockBytes {
			err = fmt.Errorf("data length %d, block size %d", h.DataLen, s.cfg.BlockBytes)
		}
		if err == nil {
			if got := blockSum(buf[headerRegion : headerRegion+s.cfg.BlockBytes]); got != h.DataSum {
				err = fmt.Errorf("data checksum %#016x, header says %#016x", got, h.DataSum)
			}
		}
		if err != nil {
			corrupt++
			s.log.Warn("kvagent disk slot dropped at recovery", "slot", i, "err", err)
			continue
		}
		s.nextGen = max(s.nextGen, h.Gen)
		if old := found[h.Key]; old != nil {
			if old.gen >= h.Gen {
				continue
			}
			used[old.slot] = false
		}
		found[h.Key] = &entry{key: h.Key, meta: h.Meta, slot: slot, sum: h.DataSum, gen: h.Gen}
		used[slot] = true
	}
	s.c.corrupt[TierDisk] += uint64(corrupt)

	// Older writes count as less recently used.
	all := make([]*entry, 0, len(found))
	for _, e := range found {
		all = append(all, e)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].gen < all[j].gen })
	for _, e := range all {
		e.lastUse = s.tick()
		s.diskIndex.insert(e)
	}
	for i := s.cfg.DiskBlocks - 1; i >= 0; i-- {
		if !used[i] {
			s.diskFree = append(s.diskFree, int32(i))
		}
	}
	announced := map[Key]bool{}
	var announce func(e *entry)
	announce = func(e *entry) {
		if announced[e.key] {
			return
		}
		announced[e.key] = true
		if p, ok := parentKey(e); ok {
			if pe := found[p]; pe != nil {
				announce(pe)
			}
		}
		s.announceLocked(kvevents.BlockStored, TierDisk, e.key, &e.meta)
	}
	for _, e := range all {
		announce(e)
	}
	return nil
}
