package store

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// commitChain offloads a chain of n blocks of namespace ns through the
// arena, as an engine does, and returns the keys.
func commitChain(t *testing.T, s *Store, ns string, base uint64, n int) []Key {
	t.Helper()
	ks := make([]Key, n)
	metas := make([]Meta, n)
	for i := range ks {
		ks[i] = Key{Namespace: ns, Hash: base + uint64(i)}
		metas[i] = blockMeta(ks[i], base+uint64(i)-1, i > 0)
	}
	slots, err := s.Reserve(ks)
	if err != nil {
		t.Fatal(err)
	}
	for i, sl := range slots {
		copy(s.arena.slot(int32(sl)), blockData(ks[i], s.BlockBytes()))
	}
	if err := s.Commit(ks, metas, slots); err != nil {
		t.Fatal(err)
	}
	return ks
}

// AcquireVerified (the peer path) stops before a host block whose arena
// bytes changed since Commit, drops it and counts it; plain Acquire (the
// engine path) does not pay for the check.
func TestAcquireVerifiedDropsAChangedHostBlock(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.DiskBlocks = 0
	log := newChangeLog()
	cfg.OnChange = log.record
	s := openTest(t, cfg)
	ks := commitChain(t, s, "m", 10, 4)
	chain := []uint64{10, 11, 12, 13}

	got, err := s.AcquireVerified("m", chain)
	if err != nil || len(got) != 4 {
		t.Fatalf("AcquireVerified of an intact chain: %v, %v", got, err)
	}
	s.Release(got)

	// Someone writes into block 12's slot outside a reservation.
	s.arena.slot(int32(got[2]))[100] ^= 0xff
	before := s.Stats()
	got, err = s.AcquireVerified("m", chain)
	if err != nil || len(got) != 2 {
		t.Fatalf("AcquireVerified over a changed block: %v, %v; want the 2 blocks before it", got, err)
	}
	for i, sl := range got {
		if !bytes.Equal(s.arena.slot(int32(sl)), blockData(ks[i], s.BlockBytes())) {
			t.Fatalf("block %d served with other bytes", i)
		}
	}
	s.Release(got)
	after := s.Stats()
	if after.Host.CorruptBlocks != before.Host.CorruptBlocks+1 || log.has(TierHost, ks[2]) {
		t.Fatalf("changed block not dropped and counted: corrupt %d → %d, still announced %v", before.Host.CorruptBlocks, after.Host.CorruptBlocks, log.has(TierHost, ks[2]))
	}
	if after.Host.Hits != before.Host.Hits+2 || after.Misses != before.Misses+2 {
		t.Fatalf("hits %d → %d, misses %d → %d; want +2 each", before.Host.Hits, after.Host.Hits, before.Misses, after.Misses)
	}
	if r := s.Lookup("m", chain); len(r) != 2 {
		t.Fatalf("Lookup after the drop: %v, want the 2-block prefix", r)
	}
	// Nothing stays pinned: every slot can be reserved again.
	all := make([]Key, cfg.HostBlocks)
	for i := range all {
		all[i] = Key{Namespace: "other", Hash: uint64(1000 + i)}
	}
	slots, err := s.Reserve(all)
	if err != nil {
		t.Fatalf("reserve of the whole arena after verified acquires: %v", err)
	}
	s.Abort(slots)
}

// PinSlots holds acquired slots on their own: after the Acquire's pins
// are released the blocks stay (not evictable) until the extra pin goes.
func TestPinSlotsHoldsAcquiredBlocks(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.DiskBlocks = 0
	cfg.HostBlocks = 2
	s := openTest(t, cfg)
	commitChain(t, s, "m", 1, 2)
	if err := s.PinSlots([]Slot{0}); err == nil {
		t.Fatal("PinSlots of a slot nobody acquired succeeded")
	}
	if err := s.PinSlots([]Slot{7}); err == nil {
		t.Fatal("PinSlots outside the arena succeeded")
	}
	got, err := s.Acquire("m", []uint64{1, 2})
	if err != nil || len(got) != 2 {
		t.Fatal(got, err)
	}
	if err := s.PinSlots(got); err != nil {
		t.Fatal(err)
	}
	s.Release(got)
	if _, err := s.Reserve([]Key{{Namespace: "x", Hash: 9}}); err == nil {
		t.Fatal("a block held by PinSlots was evicted")
	}
	s.Release(got)
	slots, err := s.Reserve([]Key{{Namespace: "x", Hash: 9}, {Namespace: "x", Hash: 10}})
	if err != nil {
		t.Fatalf("reserve after the last pin went: %v", err)
	}
	s.Abort(slots)
}

func TestPinnedMetas(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.DiskBlocks = 0
	s := openTest(t, cfg)
	ks := commitChain(t, s, "m", 40, 3)
	got, err := s.Acquire("m", []uint64{40, 41, 42})
	if err != nil || len(got) != 3 {
		t.Fatal(got, err)
	}
	defer s.Release(got)
	hashes, metas, err := s.PinnedMetas(got)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range ks {
		want := blockMeta(k, k.Hash-1, i > 0)
		if hashes[i] != k.Hash || metas[i].Parent != want.Parent || metas[i].HasParent != want.HasParent || !slices.Equal(metas[i].TokenIDs, want.TokenIDs) || metas[i].LoRAName != want.LoRAName {
			t.Fatalf("block %d: %#x %+v, want %#x %+v", i, hashes[i], metas[i], k.Hash, want)
		}
	}
	free := Slot(-1)
	for sl := range Slot(cfg.HostBlocks) {
		if !slices.Contains(got, sl) {
			free = sl
			break
		}
	}
	if _, _, err := s.PinnedMetas([]Slot{free}); err == nil {
		t.Fatal("metas of a slot nobody holds")
	}
}

// CommitSummed keeps the writer's sums: blocks written with CopySum read
// back verified; a block committed under a wrong sum is what the store's
// checks catch (AcquireVerified drops it, Get reports it corrupt) rather
// than a block served on; a sum count that does not match is refused.
func TestCommitSummed(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.DiskBlocks = 0
	s := openTest(t, cfg)
	ks := make([]Key, 3)
	metas := make([]Meta, 3)
	for i := range ks {
		ks[i] = Key{Namespace: "m", Hash: 20 + uint64(i)}
		metas[i] = blockMeta(ks[i], 19+uint64(i), i > 0)
	}
	slots, err := s.Reserve(ks)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CommitSummed(ks, metas, slots, []uint64{1}); err == nil {
		t.Fatal("CommitSummed with 1 sum for 3 blocks: no error")
	}
	sums := make([]uint64, 3)
	for i, sl := range slots {
		sums[i] = CopySum(s.arena.slot(int32(sl)), blockData(ks[i], s.BlockBytes()))
		if want := blockSum(blockData(ks[i], s.BlockBytes())); sums[i] != want {
			t.Fatalf("CopySum of block %d = %#x, blockSum = %#x", i, sums[i], want)
		}
	}
	sums[2] ^= 1 // the writer got block 2's sum wrong
	if err := s.CommitSummed(ks, metas, slots, sums); err != nil {
		t.Fatal(err)
	}
	got, err := s.AcquireVerified("m", []uint64{20, 21, 22})
	if err != nil || len(got) != 2 {
		t.Fatalf("AcquireVerified: %v, %v; want the 2 blocks with right sums", got, err)
	}
	s.Release(got)
	if st := s.Stats(); st.Host.CorruptBlocks != 1 {
		t.Fatalf("corrupt blocks %d, want 1 (the wrong sum)", st.Host.CorruptBlocks)
	}
	dst := make([]byte, s.BlockBytes())
	for i := range 2 {
		if _, _, err := s.Get(ks[i], dst); err != nil || !bytes.Equal(dst, blockData(ks[i], s.BlockBytes())) {
			t.Fatalf("Get of block %d committed with its CopySum: %v", i, err)
		}
	}
	if _, _, err := s.Get(ks[2], dst); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of the dropped block: %v, want ErrNotFound", err)
	}
}

// Stats.Host.Pinned (kvgate_kvagent_pinned_blocks) counts blocks, not
// pins: an acquired block a peer read pins again is one pinned block, and
// the count returns to zero only when the last pin goes.
func TestPinnedCountsBlocksUntilTheirLastPinGoes(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.DiskBlocks = 0
	s := openTest(t, cfg)
	commitChain(t, s, "m", 10, 4)
	if p := s.Stats().Host.Pinned; p != 0 {
		t.Fatalf("pinned after commit: %d, want 0", p)
	}
	got, err := s.Acquire("m", []uint64{10, 11, 12})
	if err != nil || len(got) != 3 {
		t.Fatalf("acquire: %v, %v", got, err)
	}
	if p := s.Stats().Host.Pinned; p != 3 {
		t.Fatalf("pinned after acquiring 3: %d", p)
	}
	if err := s.PinSlots(got[:2]); err != nil {
		t.Fatal(err)
	}
	if p := s.Stats().Host.Pinned; p != 3 {
		t.Fatalf("pinned after a second pin on 2 of them: %d, want 3 (blocks, not pins)", p)
	}
	s.Release(got)
	if p := s.Stats().Host.Pinned; p != 2 {
		t.Fatalf("pinned after the acquire's release: %d, want the 2 still read", p)
	}
	s.Release(got[:2])
	if p := s.Stats().Host.Pinned; p != 0 {
		t.Fatalf("pinned after every release: %d", p)
	}
}
