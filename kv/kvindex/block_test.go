package kvindex

import "testing"

// placed gives each of hs (blocks of chain, or hashes outside it) the
// segment ChainBlocks gives it in chain; a hash outside chain is its own
// segment's first block.
func placed(chain, hs []uint64) []Block {
	pos := make(map[uint64]int, len(chain))
	for i, h := range chain {
		pos[h] = i
	}
	out := make([]Block, len(hs))
	for i, h := range hs {
		out[i] = Block{Hash: h, Seg: h}
		if p, ok := pos[h]; ok {
			out[i].Seg = chain[p-p%SegmentBlocks]
		}
	}
	return out
}

func TestChainBlocksSegments(t *testing.T) {
	chain := make([]uint64, 2*SegmentBlocks+3)
	for i := range chain {
		chain[i] = uint64(1000 + i)
	}
	bs := ChainBlocks(chain)
	for i, b := range bs {
		want := chain[(i/SegmentBlocks)*SegmentBlocks]
		if b.Hash != chain[i] || b.Seg != want {
			t.Fatalf("block %d = %+v; want hash %d in segment %d", i, b, chain[i], want)
		}
	}
	if got := placed(chain, []uint64{chain[SegmentBlocks+5], 7}); got[0].Seg != chain[SegmentBlocks] || got[1].Seg != 7 {
		t.Fatalf("placed = %+v", got)
	}
}
