package ingest

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// placingIndex is the memory index that also keeps every block it was
// given with its segment (the memory index itself ignores Block.Seg).
type placingIndex struct {
	*kvindex.Memory
	seg map[uint64]uint64
}

func (p *placingIndex) Store(ctx context.Context, w kvfleet.WorkerID, t kvfleet.Tier, bs []kvindex.Block) error {
	for _, b := range bs {
		p.seg[b.Hash] = b.Seg
	}
	return p.Memory.Store(ctx, w, t, bs)
}

func (p *placingIndex) Remove(ctx context.Context, w kvfleet.WorkerID, t kvfleet.Tier, bs []kvindex.Block) error {
	for _, b := range bs {
		if got, ok := p.seg[b.Hash]; !ok || got != b.Seg {
			return &segMismatch{b, got}
		}
		delete(p.seg, b.Hash)
	}
	return p.Memory.Remove(ctx, w, t, bs)
}

type segMismatch struct {
	b   kvindex.Block
	was uint64
}

func (e *segMismatch) Error() string { return "remove under another segment than stored" }

// Positions follow the parent links across events and segment
// boundaries: every block reaches the index in the segment a request's
// Match looks for it in (kvindex.ChainBlocks of the request's chain), and
// leaves it, on removal and on a scoped clear, under the same one.
func TestBlocksPlacedInTheirChainSegment(t *testing.T) {
	idx := &placingIndex{Memory: newMem(), seg: map[uint64]uint64{}}
	w := kvfleet.WorkerID{Endpoint: "10.0.0.1:8000"}
	wk := NewWorker(w, idx, Config{BlockSize: bs, ScopedClear: true})
	n := 2*kvindex.SegmentBlocks + 5
	tokens := tokenRange(100, n*bs)
	eng := func(i int) uint64 { return 0xA000 + uint64(i)*31 }
	// Three events: 60 blocks (no parent), 10 crossing the first
	// boundary, the rest crossing the second.
	cuts := []int{0, 60, 70, n}
	var evs []kvevents.Event
	for k := 0; k+1 < len(cuts); k++ {
		var hs []uint64
		for i := cuts[k]; i < cuts[k+1]; i++ {
			hs = append(hs, eng(i))
		}
		var parent *uint64
		if k > 0 {
			parent = ptr(eng(cuts[k] - 1))
		}
		evs = append(evs, store(hs, parent, tokens[cuts[k]*bs:cuts[k+1]*bs], "GPU", ""))
	}
	apply(t, wk, batch(evs...))
	chain := chainOf(tokens, "", "")
	for i, b := range kvindex.ChainBlocks(chain) {
		if got, ok := idx.seg[b.Hash]; !ok || got != b.Seg {
			t.Fatalf("block %d stored in segment %#x (present %v); want %#x", i, got, ok, b.Seg)
		}
		id, ok := wk.SeqOf(eng(i))
		if !ok || id.Seq != b.Hash || id.Pos != uint32(i) || id.Seg != b.Seg {
			t.Fatalf("engine block %d: identity %+v; want seq %#x at %d in segment %#x", i, id, b.Hash, i, b.Seg)
		}
	}
	if d := depths(t, idx, w, chain); d.Max() != n {
		t.Fatalf("depths %v; want %d", d, n)
	}
	// A removal and a scoped clear find each block under the segment it
	// was stored with (placingIndex refuses any other).
	apply(t, wk, batch(remove("GPU", eng(n-1), eng(kvindex.SegmentBlocks))))
	if err := wk.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if len(idx.seg) != 0 {
		left := slices.Collect(maps.Keys(idx.seg))
		t.Fatalf("%d blocks left after a scoped clear: %x", len(left), left)
	}
}
