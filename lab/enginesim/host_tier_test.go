package enginesim

import (
	"testing"

	"github.com/kvgate/kvgate/kv/kvevents"
)

func tierChainBlocks(n int) []TierBlock {
	var out []TierBlock
	for i := range n {
		b := TierBlock{Hash: uint64(100 + i), TokenIDs: []uint32{uint32(i), uint32(i), uint32(i), uint32(i)}}
		if i > 0 {
			b.Parent, b.HasParent = uint64(99+i), true
		}
		out = append(out, b)
	}
	return out
}

func TestStoreTierPublishesHostResidencyAndEvictsWithinCapacity(t *testing.T) {
	var evs []kvevents.Event
	tier, err := NewStoreTier(StoreTierConfig{HostBlocks: 2, CopyBlockBytes: 1000, Dir: t.TempDir()}, func(e []kvevents.Event) { evs = append(evs, e...) })
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	blocks := tierChainBlocks(2)
	tier.Offload(blocks)
	chain := []uint64{100, 101}
	if n := tier.Lookup("", chain); n != 2 {
		t.Fatalf("lookup %d blocks, want 2", n)
	}
	if len(evs) == 0 || evs[0].Kind != kvevents.BlockStored || evs[0].Medium != "CPU" || len(evs[0].TokenIDs) != 4*len(evs[0].BlockHashes) {
		t.Fatalf("events %+v: want BlockStored with medium CPU and the blocks' tokens", evs)
	}
	if n := tier.Onboard("", chain); n != 2 || tier.BlockBytes() != 1000 {
		t.Fatalf("onboarded %d, block bytes %d", n, tier.BlockBytes())
	}
	// A third block does not fit: the store evicts to make room and
	// announces the removal on the host medium.
	evs = nil
	tier.Offload([]TierBlock{{Hash: 500, TokenIDs: []uint32{7, 7, 7, 7}}})
	removed := false
	for _, e := range evs {
		removed = removed || (e.Kind == kvevents.BlockRemoved && e.Medium == "CPU")
	}
	if !removed || tier.Lookup("", []uint64{500}) != 1 || tier.Lookup("", chain) == 2 {
		t.Errorf("after a third block: events %+v, lookups %d and %d", evs, tier.Lookup("", []uint64{500}), tier.Lookup("", chain))
	}
	if err := tier.Err(); err != nil {
		t.Error(err)
	}
	if _, err := NewStoreTier(StoreTierConfig{HostBlocks: 0, CopyBlockBytes: 1}, nil); err == nil {
		t.Error("a tier of 0 blocks opened")
	}
}
