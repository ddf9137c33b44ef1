package kvindex

import "math/bits"

// The match window: how Match reads a chain's blocks from the shards.
//
// A chain's blocks live in hashed shards (memory.go), so consecutive
// blocks sit in unrelated memory. Read one at a time, each block cost a
// read lock and three dependent cache misses (the slot table's cell, the
// block, its holders): about 300 ns of CPU per block of the chain at 512
// workers (BENCHMARKS.md "Issue 27 item 2: Match shape"), nearly all of
// it waiting on memory. The lock is a locked instruction, a full fence on
// amd64, so the processor could not start the next block's loads while
// one block's misses were outstanding.
//
// The window reads a run of the chain's positions at once: it takes the
// read locks of every shard the run's hashes fall in (ascending shard
// order, each once), then resolves every position's slot in one pass and
// loads every block's holder list in a second, before the walk reads any
// of them. The loads of one pass do not depend on each other, so they
// overlap in the memory system instead of queueing one behind another;
// the walk then finds its blocks and holders in cache. Locks per run: at
// most one per shard instead of one per block.
//
// Deadlock: the walk holds several read locks at once, but always takes
// them in ascending shard order and takes no other lock while holding
// them; every writer holds one shard lock at a time (Store, Remove,
// dropAll, Stats). So no cycle of waits can form even though a pending
// writer blocks new readers of its shard (sync.RWMutex).
//
// Runs grow with the walk, from matchWindowMin positions up to
// matchWindowMax (a run is as long as the part of the chain already
// walked), so a chain whose first blocks nobody holds (the common unknown
// prompt) locks a few shards, not a whole window's. The walk ends at the
// first position no worker holds, so a run stops resolving there; but it
// has locked its shards by then, and a walk also ends where its last
// worker drops out, which the run cannot see. So each run after the first
// is preceded by a run of one position: where a walk ends at a run's
// edge (a shared system prompt, then conversations nobody else holds),
// the next run costs one lock, not up to matchWindowMax. When the index
// fits in the cache (BenchmarkMemoryMatch at 8 workers) the lock
// operations, not the misses, are most of a walk's cost, and a run's
// locks beyond the walk's end are pure loss.

const (
	matchWindowMin = 8
	// matchWindowMax: four segments (SegmentBlocks), 4,096 tokens at block
	// size 16. A writer of a shard the run covers waits, at most, for the
	// walk over this many blocks; a longer run locks each shard once for
	// more blocks (at 64 shards a 64-block run already takes ~40 of them).
	matchWindowMax = 4 * SegmentBlocks
)

// chainWindow is one run of a chain's positions, [from, end), with its
// shards read-locked; blocks[:found] are the blocks of positions
// from..from+found-1, and position from+found (when < end) is held by
// no worker.
type chainWindow struct {
	m      *Memory
	chain  []uint64
	from   int
	end    int
	found  int
	blocks []*block
	// lockedShards is a bitset over shard indices: the read locks held.
	lockedShards []uint64
	locked       bool
	// probed: the last run was the one-position run before a longer one.
	probed bool
	// sink keeps the prefetching loads of resolve from being dropped.
	sink uint32
}

// open starts a walk over chain; the first run begins at position 0.
func (w *chainWindow) open(m *Memory, chain []uint64) {
	w.m, w.chain = m, chain
	w.from, w.end, w.found = 0, 0, 0
	w.probed = true // the first run is not preceded by a one-position run
	if n := (len(m.shards) + 63) / 64; len(w.lockedShards) != n {
		w.lockedShards = make([]uint64, n)
	}
}

// at returns the block at position depth, or nil when no worker holds it
// (the walk ends there). Positions must be asked in ascending order
// (depth >= the last run's start); moving past the current run releases
// its locks and resolves the next one.
func (w *chainWindow) at(depth int) *block {
	// The walk's common case, kept small enough to inline.
	if i := depth - w.from; i < w.found {
		return w.blocks[i]
	}
	return w.next(depth)
}

// next is at's slow path: a position past the current run, or its end.
func (w *chainWindow) next(depth int) *block {
	if depth >= w.end {
		if depth >= len(w.chain) {
			return nil
		}
		w.unlock()
		w.resolve(depth)
	}
	if i := depth - w.from; i < w.found {
		return w.blocks[i]
	}
	return nil
}

// run returns the blocks from position depth to the end of its run, or
// to the block before the first one nobody holds: as at, for a walk that
// reads them in a loop (mergeWalk). depth follows the same rules as at's.
// Fewer than end-depth blocks means the walk ends after them.
func (w *chainWindow) run(depth int) []*block {
	if depth >= w.end {
		if depth >= len(w.chain) {
			return nil
		}
		w.unlock()
		w.resolve(depth)
	}
	return w.blocks[min(depth-w.from, w.found):w.found]
}

// close releases the read locks still held; the walk reads no block after.
func (w *chainWindow) close() {
	w.unlock()
	w.m, w.chain = nil, nil
	clear(w.blocks) // drop references to the shards' blocks
}

func (w *chainWindow) unlock() {
	if !w.locked {
		return
	}
	for k, word := range w.lockedShards {
		for ; word != 0; word &= word - 1 {
			w.m.shards[k*64+bits.TrailingZeros64(word)].mu.RUnlock()
		}
		w.lockedShards[k] = 0
	}
	w.locked = false
}

// resolve locks the shards of the run starting at from and finds its
// blocks up to the first one nobody holds.
func (w *chainWindow) resolve(from int) {
	size := min(matchWindowMax, max(matchWindowMin, from))
	if !w.probed {
		size = 1
	}
	w.probed = !w.probed
	w.from, w.end = from, min(len(w.chain), from+size)
	m := w.m
	run := w.chain[from:w.end]
	for _, h := range run {
		i := m.shardIndex(h)
		w.lockedShards[i/64] |= 1 << (i % 64)
	}
	for k, word := range w.lockedShards {
		for ; word != 0; word &= word - 1 {
			m.shards[k*64+bits.TrailingZeros64(word)].mu.RLock()
		}
	}
	w.locked = true
	// Pass 1: every position's slot (the slot tables' cells).
	w.blocks = w.blocks[:0]
	for _, h := range run {
		s := &m.shards[m.shardIndex(h)]
		slot, ok := s.index.get(h)
		if !ok {
			break
		}
		w.blocks = append(w.blocks, &s.blocks[slot])
	}
	w.found = len(w.blocks)
	// Pass 2: what the walk will read of each block (independent loads;
	// the sum only keeps them): a short holder list whole, one load per
	// cache line; for a long one, the holder bitsets the dense walk reads
	// when they are cached (memory_dense.go).
	var sink uint32
	for _, b := range w.blocks {
		hs := b.holders
		if len(hs) < holderBitsMin {
			for j := 0; j < len(hs); j += holdersPerLine {
				sink += uint32(hs[j])
			}
			continue
		}
		if c := b.bits.Load(); c != nil {
			for j := 0; j < len(c.all); j += wordsPerLine {
				sink += uint32(c.all[j])
			}
		}
	}
	w.sink = sink
}

// holdersPerLine: holder entries (4 bytes) per 64-byte cache line.
const holdersPerLine = 16

// wordsPerLine: bitset words per cache line.
const wordsPerLine = 8
