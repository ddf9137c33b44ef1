package store

import (
	"errors"
	"fmt"

	"github.com/kvgate/kvgate/kv/kvevents"
)

// diskWrite is one queued offload to disk: the slot image (header region,
// then the block's bytes) in an aligned buffer owned by the queue.
type diskWrite struct {
	key  Key
	meta Meta
	sum  uint64
	buf  []byte
}

// openDisk probes O_DIRECT, opens the disk file, recovers its index and
// starts the writer.
func (s *Store) openDisk() error {
	direct := false
	if s.cfg.DirectIO != "off" {
		if err := mkdirAll(s.cfg.DiskDir); err != nil {
			return err
		}
		ok, err := probeDirectIO(s.cfg.DiskDir)
		if err != nil {
			return fmt.Errorf("kvagent store: %w", err)
		}
		if !ok && s.cfg.DirectIO == "on" {
			return fmt.Errorf("kvagent store: direct_io is on but the filesystem of %s refuses O_DIRECT", s.cfg.DiskDir)
		}
		direct = ok
	}
	d, existing, err := openDiskFile(s.cfg.DiskDir, s.cfg.BlockBytes, s.cfg.DiskBlocks, direct)
	if err != nil {
		return fmt.Errorf("kvagent store: %w", err)
	}
	s.diskFile = d
	s.diskIndex = newTierIndex(TierDisk, s.cfg.DiskBlocks)
	if err := s.recoverDisk(existing); err != nil {
		d.close()
		return fmt.Errorf("kvagent store: recover disk tier: %w", err)
	}
	s.queue = make(chan diskWrite, s.cfg.DiskQueue)
	s.writerEnd = make(chan struct{})
	go s.diskWriter()
	s.log.Info("kvagent disk tier open", "file", d.path, "slots", d.slots, "direct_io", direct,
		"recovered", len(s.diskIndex.entries), "corrupt", s.c.corrupt[TierDisk])
	return nil
}

// enqueueDiskLocked copies src into a queue buffer and queues the write.
// The queue never blocks: with every buffer in flight the offload is
// dropped and counted (the disk is not keeping up).
func (s *Store) enqueueDiskLocked(k Key, m Meta, sum uint64, src []byte) {
	var buf []byte
	if n := len(s.bufFree); n > 0 {
		buf = s.bufFree[n-1]
		s.bufFree = s.bufFree[:n-1]
	} else if s.bufCount < s.cfg.DiskQueue {
		buf = alignedBuffer(int(s.diskFile.slotBytes))
		s.bufCount++
	} else {
		s.c.dropped[TierDisk]++
		return
	}
	copy(buf[headerRegion:], src)
	s.pending[k] = true
	s.queue <- diskWrite{key: k, meta: m, sum: sum, buf: buf} // capacity == buffers: never blocks
}

func (s *Store) diskWriter() {
	defer close(s.writerEnd)
	for w := range s.queue {
		s.writeDisk(w)
	}
}

func (s *Store) writeDisk(w diskWrite) {
	s.mu.Lock()
	if s.diskIndex.entries[w.key] != nil {
		s.finishWriteLocked(w)
		s.mu.Unlock()
		return
	}
	slot, ok := s.allocDiskLocked()
	if !ok {
		s.c.dropped[TierDisk]++
		s.finishWriteLocked(w)
		s.mu.Unlock()
		return
	}
	s.nextGen++
	h := blockHeader{Gen: s.nextGen, Key: w.key, Meta: w.meta, DataLen: uint32(s.cfg.BlockBytes), DataSum: w.sum}
	s.mu.Unlock()
	s.flush() // the victim's removal goes out before this block's store

	_, err := encodeHeader(w.buf[:headerRegion], &h)
	if err == nil {
		err = s.diskFile.writeSlot(slot, w.buf)
	}

	s.mu.Lock()
	s.finishWriteLocked(w)
	if err != nil {
		s.log.Warn("kvagent disk write failed; offload dropped", "slot", slot, "namespace", w.key.Namespace, "hash", w.key.Hash, "err", err)
		s.diskFree = append(s.diskFree, slot)
		s.c.dropped[TierDisk]++
	} else {
		e := &entry{key: w.key, meta: w.meta, slot: slot, sum: w.sum, gen: h.Gen, lastUse: s.tick()}
		s.diskIndex.insert(e)
		s.c.offloadBytes[TierDisk] += uint64(s.cfg.BlockBytes)
		s.announceLocked(kvevents.BlockStored, TierDisk, w.key, &e.meta)
	}
	s.mu.Unlock()
	s.flush()
}

func (s *Store) finishWriteLocked(w diskWrite) {
	delete(s.pending, w.key)
	s.bufFree = append(s.bufFree, w.buf)
	s.settled.Broadcast()
}

// allocDiskLocked returns a disk slot to write, evicting the least recently
// used unpinned leaf when none is free.
func (s *Store) allocDiskLocked() (int32, bool) {
	if n := len(s.diskFree); n > 0 {
		i := s.diskFree[n-1]
		s.diskFree = s.diskFree[:n-1]
		return i, true
	}
	v := s.diskIndex.victim()
	if v == nil {
		return -1, false
	}
	s.diskIndex.remove(v)
	s.c.evictions[TierDisk]++
	s.announceLocked(kvevents.BlockRemoved, TierDisk, v.key, nil)
	return v.slot, true
}

func (s *Store) releaseDiskLocked(e *entry) {
	s.diskIndex.unpin(e)
	if e.dead && e.pins == 0 {
		s.diskFree = append(s.diskFree, e.slot)
	}
}

// diskReadFailedLocked drops a disk block that could not be read back
// intact: it is never served, and the router hears it is gone.
func (s *Store) diskReadFailedLocked(e *entry, err error) {
	if errors.Is(err, ErrCorrupt) {
		s.c.corrupt[TierDisk]++
	}
	s.log.Warn("kvagent disk block dropped", "namespace", e.key.Namespace, "hash", e.key.Hash, "slot", e.slot, "err", err)
	if e.dead {
		return
	}
	s.diskIndex.remove(e)
	s.announceLocked(kvevents.BlockRemoved, TierDisk, e.key, nil)
	e.dead = true
	if e.pins == 0 {
		s.diskFree = append(s.diskFree, e.slot)
	}
}

// readDiskBlock reads slot into dst (len BlockBytes) and verifies that its
// header names k and that the data matches both the header's checksum and
// the one the index holds. Called without mu; the entry is pinned.
func (s *Store) readDiskBlock(slot int32, k Key, wantSum uint64, dst []byte) (Meta, error) {
	hdr := s.hdrPool.Get().([]byte)
	defer s.hdrPool.Put(hdr)
	var scratch []byte
	if s.diskFile.direct && !isAligned(dst) {
		scratch = s.dataPool.Get().([]byte)
		defer s.dataPool.Put(scratch)
	}
	if err := s.diskFile.readSlot(slot, hdr, dst, scratch); err != nil {
		return Meta{}, err
	}
	h, err := decodeHeader(hdr[:headerRegion])
	if err != nil {
		return Meta{}, fmt.Errorf("%w: disk slot %d: %v", ErrCorrupt, slot, err)
	}
	if h.Key != k || int(h.DataLen) != s.cfg.BlockBytes || h.DataSum != wantSum {
		return Meta{}, fmt.Errorf("%w: disk slot %d holds %s/%d (len %d, sum %#016x), want %s/%d (sum %#016x)",
			ErrCorrupt, slot, h.Key.Namespace, h.Key.Hash, h.DataLen, h.DataSum, k.Namespace, k.Hash, wantSum)
	}
	if got := blockSum(dst); got != h.DataSum {
		return Meta{}, fmt.Errorf("%w: disk slot %d data checksum %#016x, header says %#016x", ErrCorrupt, slot, got, h.DataSum)
	}
	return h.Meta, nil
}
