package benchmarks

import (
	"context"
	"fmt"
	"math/bits"
	"sync"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// baselineIndex is the index as one would first write it: one map of maps
// behind one mutex, no interning, no sharding, no capacity bound. It is
// correct (TestBaselineIndexAgreesWithMemory) and is measured in the same
// run as the real backends so that their figures come with a ratio.
type baselineIndex struct {
	mu     sync.Mutex
	blocks map[uint64]map[kvfleet.WorkerID]uint8 // hash → worker → tier mask
	known  map[kvfleet.WorkerID]struct{}
}

func newBaselineIndex() *baselineIndex {
	return &baselineIndex{
		blocks: map[uint64]map[kvfleet.WorkerID]uint8{},
		known:  map[kvfleet.WorkerID]struct{}{},
	}
}

var _ kvindex.Index = (*baselineIndex)(nil)

func (b *baselineIndex) Store(_ context.Context, w kvfleet.WorkerID, tier kvfleet.Tier, blocks []kvindex.Block) error {
	if tier >= kvfleet.NumTiers {
		return fmt.Errorf("baseline index: store: tier %d out of range", tier)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.known[w] = struct{}{}
	for _, blk := range blocks {
		h := blk.Hash
		holders := b.blocks[h]
		if holders == nil {
			holders = map[kvfleet.WorkerID]uint8{}
			b.blocks[h] = holders
		}
		holders[w] |= 1 << tier
	}
	return nil
}

func (b *baselineIndex) Remove(_ context.Context, w kvfleet.WorkerID, tier kvfleet.Tier, blocks []kvindex.Block) error {
	if tier >= kvfleet.NumTiers {
		return fmt.Errorf("baseline index: remove: tier %d out of range", tier)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.known[w] = struct{}{}
	for _, blk := range blocks {
		h := blk.Hash
		holders := b.blocks[h]
		mask, ok := holders[w]
		if !ok {
			continue
		}
		if mask &^= 1 << tier; mask != 0 {
			holders[w] = mask
			continue
		}
		delete(holders, w)
		if len(holders) == 0 {
			delete(b.blocks, h)
		}
	}
	return nil
}

func (b *baselineIndex) dropLocked(w kvfleet.WorkerID) {
	for h, holders := range b.blocks {
		delete(holders, w)
		if len(holders) == 0 {
			delete(b.blocks, h)
		}
	}
}

func (b *baselineIndex) Clear(_ context.Context, w kvfleet.WorkerID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.known[w] = struct{}{}
	b.dropLocked(w)
	return nil
}

func (b *baselineIndex) RemoveWorker(_ context.Context, w kvfleet.WorkerID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.known, w)
	b.dropLocked(w)
	return nil
}

// Match walks the chain once per holder of its first block.
func (b *baselineIndex) Match(_ context.Context, chain []uint64, out *kvindex.Match) error {
	out.Reset()
	if len(chain) == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for w := range b.blocks[chain[0]] {
		var d kvfleet.Depths
		slowest := 0
		for i, h := range chain {
			mask := b.blocks[h][w]
			if mask == 0 {
				break
			}
			slowest = max(slowest, bits.TrailingZeros8(mask))
			for t := slowest; t < int(kvfleet.NumTiers); t++ {
				d[t] = i + 1
			}
		}
		out.Add(w, d)
	}
	return nil
}

func (b *baselineIndex) Stats(context.Context) (kvindex.Stats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := kvindex.Stats{Blocks: int64(len(b.blocks)), Workers: len(b.known)}
	for _, holders := range b.blocks {
		for _, mask := range holders {
			st.Entries += int64(bits.OnesCount8(mask))
		}
	}
	return st, nil
}

func (b *baselineIndex) Close() error { return nil }
