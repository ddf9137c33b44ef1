package kvindex

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvgate/kvgate/kv/indexconfig"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// MemoryConfig sizes the embedded index.
type MemoryConfig struct {
	// Shards is the number of independently locked partitions of the block
	// table, rounded up to a power of two; 0 means DefaultMemoryShards.
	Shards int
	// MaxEntries bounds (block, worker, tier) entries; 0 means
	// index.memory.max_entries' default (indexerconfig, where the option and
	// its default are declared). Past it, least recently used blocks are
	// evicted whole.
	MaxEntries int64
}

const (
	DefaultMemoryShards = 64
	maxMemoryShards     = 4096
	// A shard's capacity is its own (see NewMemory), so small capacities use
	// fewer shards: below this many entries per shard, one block held by a
	// large fleet (a shared system prompt on every worker) could not fit.
	minEntriesPerShard = 4096
)

// Memory is the embedded fleet index.
//
// Layout: workers are interned to small integers; blocks are partitioned by
// hash into shards, each behind its own RWMutex, so writers for different
// workers and concurrent matches rarely meet. A block's holders are a slice
// of (worker, tier mask) sorted by worker, packed in 32 bits each (holder),
// because most blocks have a few holders and Match walks them in step with
// its own sorted worker list. Match reads a chain's blocks in runs, each
// run's shards read-locked together (memory_window.go), so that the cache
// misses of consecutive blocks overlap.
//
// Each shard also keeps, per worker, the list of block slots that worker
// holds in the shard (each holder entry knows its position, so removal is a
// swap), so Clear and RemoveWorker touch only that worker's blocks. An
// epoch per worker (lazy invalidation) would make Clear O(1) but leave dead
// entries counted in Stats and in the capacity bound until swept; a scan
// of every block per Clear would hold each shard's lock for milliseconds at
// full capacity. The list costs an append per new (block, worker) and one
// more touched block per removal.
//
// Block hashes map to slots through slotTable, not a Go map: engines store
// and remove blocks all day, and the tombstones a map's deletions leave
// made probing half of Store's time. The two changes (this table, and
// slot lists instead of a Go map of hashes per worker) took
// BenchmarkMemoryStore from about 800 to 290 CPU ns per event.
//
// Capacity: MaxEntries is split evenly across shards and each shard evicts
// from its own CLOCK (second-chance) ring of blocks, so eviction never takes
// a second shard's lock. Store and Match set a block's reference bit; the
// hand clears set bits and evicts the first block whose bit is clear, with
// all its holders. That approximates LRU at one bit per block and no list
// maintenance on the Match path (a read lock plus, at most, one atomic
// store). Hashes are uniform (XXH3), so the per-shard split costs little
// capacity.
type Memory struct {
	shards    []memShard
	shardBits uint
	workers   workerTable
	scratch   sync.Pool // *matchScratch
}

var _ Index = (*Memory)(nil)

// NewMemory returns an empty index. Out-of-range settings fall back to the
// defaults; indexerconfig validation (the index: section) reports them to the user first.
func NewMemory(cfg MemoryConfig) *Memory {
	maxEntries := cfg.MaxEntries
	if maxEntries <= 0 {
		maxEntries = indexconfig.DefaultMemoryMaxEntries
	}
	n := cfg.Shards
	if n <= 0 {
		n = DefaultMemoryShards
	}
	n = min(n, maxMemoryShards)
	n = 1 << bits.Len(uint(n-1)) // round up to a power of two
	for n > 1 && maxEntries/int64(n) < minEntriesPerShard {
		n /= 2
	}
	m := &Memory{
		shards:    make([]memShard, n),
		shardBits: uint(bits.TrailingZeros(uint(n))),
	}
	for i := range m.shards {
		s := &m.shards[i]
		s.capacity = maxEntries / int64(n)
		if int64(i) < maxEntries%int64(n) {
			s.capacity++
		}
		// Slots are int32; a shard never holds more blocks than entries.
		s.capacity = min(s.capacity, math.MaxInt32)
	}
	m.workers.byID = make(map[kvfleet.WorkerID]uint32)
	m.workers.publish()
	m.scratch.New = func() any { return new(matchScratch) }
	return m
}

// shardOf spreads hashes over shards by Fibonacci hashing, so that
// non-random hashes (tests, sequential ids) spread as well as XXH3 output.
func (m *Memory) shardOf(h uint64) *memShard { return &m.shards[m.shardIndex(h)] }

func (m *Memory) shardIndex(h uint64) int {
	if m.shardBits == 0 {
		return 0
	}
	return int((h * 0x9E3779B97F4A7C15) >> (64 - m.shardBits))
}

// Store implements Index.
// The memory index finds blocks by hash alone and ignores Block.Seg.
func (m *Memory) Store(_ context.Context, w kvfleet.WorkerID, tier kvfleet.Tier, blocks []Block) error {
	if err := validTier(tier); err != nil {
		return fmt.Errorf("memory index store for %s: %w", w, err)
	}
	ws, err := m.workers.lock(w, true)
	if err != nil {
		return fmt.Errorf("memory index store: %w", err)
	}
	defer ws.mu.Unlock()
	bit := uint8(1) << tier
	for _, b := range blocks {
		s := m.shardOf(b.Hash)
		s.mu.Lock()
		s.store(ws.idx, bit, b.Hash)
		s.mu.Unlock()
	}
	return nil
}

// Remove implements Index. Unknown hashes are no-ops; like every write
// (and as the Redis backend does), it makes the worker known.
func (m *Memory) Remove(_ context.Context, w kvfleet.WorkerID, tier kvfleet.Tier, blocks []Block) error {
	if err := validTier(tier); err != nil {
		return fmt.Errorf("memory index remove for %s: %w", w, err)
	}
	ws, err := m.workers.lock(w, true)
	if err != nil {
		return fmt.Errorf("memory index remove: %w", err)
	}
	defer ws.mu.Unlock()
	bit := uint8(1) << tier
	for _, b := range blocks {
		s := m.shardOf(b.Hash)
		s.mu.Lock()
		s.remove(ws.idx, bit, b.Hash)
		s.mu.Unlock()
	}
	return nil
}

// Clear implements Index. The worker stays known (it counts in Stats.Workers).
func (m *Memory) Clear(_ context.Context, w kvfleet.WorkerID) error {
	ws, err := m.workers.lock(w, true)
	if err != nil {
		return fmt.Errorf("memory index clear: %w", err)
	}
	defer ws.mu.Unlock()
	m.dropAll(ws.idx)
	return nil
}

// RemoveWorker implements Index. Unknown workers are a no-op.
func (m *Memory) RemoveWorker(_ context.Context, w kvfleet.WorkerID) error {
	ws, err := m.workers.lock(w, false)
	if err != nil {
		return fmt.Errorf("memory index remove worker: %w", err)
	}
	if ws == nil {
		return nil
	}
	defer ws.mu.Unlock()
	// Entries go first: the slot number may be handed to a new worker as
	// soon as it is released, and must by then appear in no holder list.
	m.dropAll(ws.idx)
	m.workers.release(ws)
	return nil
}

func (m *Memory) dropAll(w uint32) {
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		s.dropWorker(w)
		s.mu.Unlock()
	}
}

// Stats implements Index. It is exact at the moment each shard is read.
func (m *Memory) Stats(context.Context) (Stats, error) {
	var st Stats
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.RLock()
		st.Blocks += int64(s.index.len())
		st.Entries += s.entries
		s.mu.RUnlock()
	}
	st.Workers = m.workers.count()
	return st, nil
}

// Evictions is how many blocks the capacity bound has evicted so far.
func (m *Memory) Evictions() int64 {
	var n int64
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.RLock()
		n += s.evictions
		s.mu.RUnlock()
	}
	return n
}

// Close implements Index; the memory index holds no outside resources.
func (m *Memory) Close() error { return nil }

// matchState is one worker's outcome along the queried chain: depths[t]
// is final for t < slowest; the others end where the worker dropped out.
type matchState struct {
	worker  uint32
	slowest uint8
	end     int32 // blocks matched on tiers >= slowest
	depths  [kvfleet.NumTiers]int32
}

// matchLive is a worker still extending; it carries what the walk needs
// so that the inner loop reads only the holder list and this slice.
type matchLive struct {
	worker  uint32
	slowest uint8 // slowest tier among the worker's fastest copies so far
	state   int32 // position in matchScratch.states
}

// matchScratch is reused across Match calls so that the walk does not
// allocate (the result goes into the caller's buffer).
type matchScratch struct {
	states []matchState // one per holder of chain[0], sorted by worker
	live   []matchLive  // sorted by worker
	dense  denseScratch // the dense walk's (memory_dense.go)
	window chainWindow  // the blocks being walked (memory_window.go)
}

// Match implements Index.
//
// Every holder of chain[0] starts a walk; at block i a worker extends if it
// holds the block on any tier, and its depth on tier t grows while every
// block so far has a copy on t or faster. A worker missing block i can
// extend no depth, so the walk stops when no worker extends (the early
// termination the interface promises).
func (m *Memory) Match(_ context.Context, chain []uint64, into *Match) error {
	into.Reset()
	if len(chain) == 0 {
		return nil
	}
	sc := m.scratch.Get().(*matchScratch)
	defer m.scratch.Put(sc)
	win := &sc.window
	win.open(m, chain)
	defer win.close()

	b := win.at(0)
	if b == nil {
		return nil
	}
	b.touch()
	// Loaded while chain[0]'s shard is read-locked (the window holds it):
	// RemoveWorker drops a worker's entries under this lock before its
	// slot can be reused, so every holder seen here is named by this
	// snapshot.
	names := *m.workers.names.Load()
	if denseWalk(len(b.holders), len(names)) {
		m.matchDense(sc, chain, b, names, into)
		return nil
	}
	sc.states = sc.states[:0]
	sc.live = sc.live[:0]
	for _, h := range b.holders {
		sc.live = append(sc.live, matchLive{worker: h.worker(), slowest: h.fastestTier(), state: int32(len(sc.states))})
		sc.states = append(sc.states, matchState{worker: h.worker()})
	}
	m.mergeWalk(sc, chain, 1)
	sc.results(names, into)
	return nil
}

// mergeWalk extends sc.live from block depth on (every live worker holds
// the blocks before it) until the chain ends or no worker extends, and
// finishes the workers still live. It reads the blocks through
// sc.window (memory_window.go), which the caller opened on chain.
func (m *Memory) mergeWalk(sc *matchScratch, chain []uint64, depth int32) {
	for int(depth) < len(chain) && len(sc.live) > 0 {
		for _, b := range sc.window.run(int(depth)) {
			b.touch()
			sc.extend(b.holders, depth)
			depth++
			if len(sc.live) == 0 {
				break
			}
		}
		if int(depth) < sc.window.end {
			break // a block nobody holds, or no worker left
		}
	}
	for _, l := range sc.live {
		sc.finish(l, depth)
	}
}

// results appends the merge walk's outcome for every named live worker
// that matched at least one block.
func (sc *matchScratch) results(names []workerName, into *Match) {
	for i := range sc.states {
		st := &sc.states[i]
		if int(st.worker) >= len(names) || !names[st.worker].live {
			continue
		}
		var d kvfleet.Depths
		for t := range d {
			if t < int(st.slowest) {
				d[t] = int(st.depths[t])
			} else {
				d[t] = int(st.end)
			}
		}
		if d.Max() > 0 {
			into.Add(names[st.worker].id, d)
		}
	}
}

// finish records a worker that held depth blocks.
func (sc *matchScratch) finish(l matchLive, depth int32) {
	st := &sc.states[l.state]
	st.slowest = l.slowest
	st.end = depth
}

// extend keeps the live workers that hold the block at position depth
// (in place, order kept) and finishes the others. Both lists are sorted by
// worker: a merge when they are of similar size, a binary search per live
// worker when the block has many more holders (a shared system prompt on
// every worker) than workers still matching.
func (sc *matchScratch) extend(holders []holder, depth int32) {
	kept := sc.live[:0]
	if len(sc.live)*8 < len(holders) {
		for _, l := range sc.live {
			if j, ok := findHolder(holders, l.worker); ok {
				kept = append(kept, sc.step(l, holders[j], depth))
			} else {
				sc.finish(l, depth)
			}
		}
		sc.live = kept
		return
	}
	j := 0
	for _, l := range sc.live {
		for j < len(holders) && holders[j].worker() < l.worker {
			j++
		}
		if j < len(holders) && holders[j].worker() == l.worker {
			kept = append(kept, sc.step(l, holders[j], depth))
		} else {
			sc.finish(l, depth)
		}
	}
	sc.live = kept
}

// step extends l by the block at position depth, which h (l's holder
// entry) has on its fastest tier. Only when that tier is slower than any
// before do depths on the faster tiers end, here, at depth.
func (sc *matchScratch) step(l matchLive, h holder, depth int32) matchLive {
	if t := h.fastestTier(); t > l.slowest {
		st := &sc.states[l.state]
		for u := l.slowest; u < t; u++ {
			st.depths[u] = depth
		}
		l.slowest = t
	}
	return l
}

// holder is one worker's copies of a block, packed in 32 bits: the
// worker's slot above, and below, in the low 8 bits, its tier mask (bit t
// set when the worker holds the block on Tier t). Packed, a block's
// holders are a third of the 12-byte entries they were (a 16-holder list
// is one cache line, not three), and Match reads them for every block of
// a chain. Where each block's slot sits in its holder's slot list
// (memShard.byWorker), which only writers need, is block.pos.
type holder uint32

// Slot numbers stay below maxMemoryWorkers, which must fit the 24 bits
// above the tier mask (a larger bound overflows this constant: a compile
// error), and the mask holds every tier.
const (
	_ = uint32((maxMemoryWorkers - 1) << 8)
	_ = uint8(1<<kvfleet.NumTiers - 1)
)

func newHolder(w uint32, tiers uint8) holder { return holder(w<<8 | uint32(tiers)) }

func (h holder) worker() uint32     { return uint32(h) >> 8 }
func (h holder) tiers() uint8       { return uint8(h) }
func (h holder) fastestTier() uint8 { return uint8(bits.TrailingZeros8(h.tiers())) }

func findHolder(hs []holder, w uint32) (int, bool) {
	// Binary search by hand: slices.BinarySearchFunc's callback showed in
	// profiles of Store.
	lo, hi := 0, len(hs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if hs[mid].worker() < w {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(hs) && hs[lo].worker() == w
}

// block is one slot of a shard's CLOCK ring.
type block struct {
	hash    uint64
	holders []holder // sorted by worker; empty iff the slot is free
	// pos[i] is where this block's slot sits in the shard's slot list for
	// holders[i]'s worker (memShard.byWorker), so removal is a swap.
	pos []int32
	// referenced is the CLOCK bit. Match sets it under the read lock, hence
	// atomic; it is only written when clear, so hot blocks stay read-shared.
	referenced uint32
	// bits caches holders as per-tier bitsets for the dense walk
	// (memory_dense.go): built by a Match under the read lock, hence
	// atomic; dropped by every write that changes holders.
	bits atomic.Pointer[holderBits]
}

// changed drops the bitset cache after a write to b's holders.
func (b *block) changed() {
	if b.bits.Load() != nil {
		b.bits.Store(nil)
	}
}

func (b *block) touch() {
	if atomic.LoadUint32(&b.referenced) == 0 {
		atomic.StoreUint32(&b.referenced, 1)
	}
}

type memShard struct {
	mu     sync.RWMutex
	index  slotTable // hash → slot in blocks
	blocks []block
	free   []int32 // free slots in blocks
	hand   int     // CLOCK hand
	// byWorker[w] lists the slots of the blocks w holds here, so Clear and
	// RemoveWorker visit only those; holder.pos makes removal a swap.
	byWorker [][]int32
	entries  int64
	capacity int64

	evictions int64
	_         [64]byte // keep neighbouring shards' locks off this cache line
}

func (s *memShard) store(w uint32, bit uint8, h uint64) {
	slot, ok := s.index.get(h)
	if ok {
		b := &s.blocks[slot]
		if i, found := findHolder(b.holders, w); found && b.holders[i].tiers()&bit != 0 {
			b.touch()
			return
		}
	}
	if s.entries >= s.capacity {
		for s.entries >= s.capacity {
			s.evictOne()
		}
		slot, ok = s.index.get(h) // the block itself may have gone
	}
	if !ok {
		slot = s.newBlock(h)
	}
	b := &s.blocks[slot]
	b.touch()
	i, found := findHolder(b.holders, w)
	b.changed()
	if found {
		b.holders[i] |= holder(bit)
	} else {
		if int(w) >= len(s.byWorker) {
			s.byWorker = append(s.byWorker, make([][]int32, int(w)+1-len(s.byWorker))...)
		}
		pos := int32(len(s.byWorker[w]))
		s.byWorker[w] = append(s.byWorker[w], slot)
		b.holders = slices.Insert(b.holders, i, newHolder(w, bit))
		b.pos = slices.Insert(b.pos, i, pos)
	}
	s.entries++
}

func (s *memShard) remove(w uint32, bit uint8, h uint64) {
	slot, ok := s.index.get(h)
	if !ok {
		return
	}
	b := &s.blocks[slot]
	i, found := findHolder(b.holders, w)
	if !found || b.holders[i].tiers()&bit == 0 {
		return
	}
	s.entries--
	b.changed()
	b.holders[i] &^= holder(bit)
	if b.holders[i].tiers() != 0 {
		return
	}
	s.unlist(w, b.pos[i])
	b.holders = slices.Delete(b.holders, i, i+1)
	b.pos = slices.Delete(b.pos, i, i+1)
	if len(b.holders) == 0 {
		s.freeBlock(slot)
	}
}

// unlist removes position pos from w's slot list by moving the last slot
// into it, and tells that block's holder entry where it now is.
func (s *memShard) unlist(w uint32, pos int32) {
	list := s.byWorker[w]
	last := len(list) - 1
	if int(pos) != last {
		moved := list[last]
		list[pos] = moved
		mb := &s.blocks[moved]
		if j, ok := findHolder(mb.holders, w); ok {
			mb.pos[j] = pos
		}
	}
	s.byWorker[w] = list[:last]
}

func (s *memShard) dropWorker(w uint32) {
	if int(w) >= len(s.byWorker) {
		return
	}
	for _, slot := range s.byWorker[w] {
		b := &s.blocks[slot]
		i, found := findHolder(b.holders, w)
		if !found {
			continue
		}
		s.entries -= int64(bits.OnesCount8(b.holders[i].tiers()))
		b.changed()
		b.holders = slices.Delete(b.holders, i, i+1)
		b.pos = slices.Delete(b.pos, i, i+1)
		if len(b.holders) == 0 {
			s.freeBlock(slot)
		}
	}
	s.byWorker[w] = nil
}

func (s *memShard) newBlock(h uint64) int32 {
	var slot int32
	if n := len(s.free); n > 0 {
		slot = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		slot = int32(len(s.blocks))
		s.blocks = append(s.blocks, block{})
	}
	s.blocks[slot].hash = h
	s.index.put(h, slot)
	return slot
}

// freeBlock returns an emptied slot to the free list, keeping a small
// holder slice for reuse so that steady-state churn does not allocate.
func (s *memShard) freeBlock(slot int32) {
	b := &s.blocks[slot]
	b.changed()
	s.index.del(b.hash)
	if cap(b.holders) > 8 {
		b.holders, b.pos = nil, nil
	} else {
		b.holders, b.pos = b.holders[:0], b.pos[:0]
	}
	b.referenced = 0
	s.free = append(s.free, slot)
}

// evictOne runs the CLOCK hand to the first occupied block whose reference
// bit is clear, clearing set bits on the way, and drops that block with all
// its holders. The caller guarantees entries > 0, so an occupied block
// exists and the hand stops within two turns of the ring.
func (s *memShard) evictOne() {
	for {
		if s.hand >= len(s.blocks) {
			s.hand = 0
		}
		slot := s.hand
		s.hand++
		b := &s.blocks[slot]
		if len(b.holders) == 0 {
			continue
		}
		if atomic.LoadUint32(&b.referenced) != 0 {
			atomic.StoreUint32(&b.referenced, 0)
			continue
		}
		for i, h := range b.holders {
			s.entries -= int64(bits.OnesCount8(h.tiers()))
			s.unlist(h.worker(), b.pos[i])
		}
		s.freeBlock(int32(slot))
		s.evictions++
		return
	}
}

// slotTable maps block hashes to slots: open addressing, linear probing,
// deletion by backward shift. It replaces a Go map, whose deletions leave
// tombstones that lengthen the probes for new keys: with blocks stored and
// removed all day that made map probing half of Store's time in profiles.
type slotTable struct {
	cells []slotCell
	used  int
}

type slotCell struct {
	hash uint64
	slot int32 // slot+1; 0 marks an empty cell
}

const slotTableMinCells = 16

// home spreads the hash over the cells; shardOf used the product's top
// bits, so this takes bits from the middle.
func (t *slotTable) home(h uint64) int {
	return int((h*0xff51afd7ed558ccd)>>17) & (len(t.cells) - 1)
}

func (t *slotTable) len() int { return t.used }

func (t *slotTable) get(h uint64) (int32, bool) {
	if len(t.cells) == 0 {
		return 0, false
	}
	mask := len(t.cells) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		c := &t.cells[i]
		if c.slot == 0 {
			return 0, false
		}
		if c.hash == h {
			return c.slot - 1, true
		}
	}
}

// put adds h, which the caller knows is absent.
func (t *slotTable) put(h uint64, slot int32) {
	// At most 3/4 full: linear probing's misses stay within a line or two.
	if (t.used+1)*4 > len(t.cells)*3 {
		t.resize(max(slotTableMinCells, len(t.cells)*2))
	}
	mask := len(t.cells) - 1
	i := t.home(h)
	for t.cells[i].slot != 0 {
		i = (i + 1) & mask
	}
	t.cells[i] = slotCell{hash: h, slot: slot + 1}
	t.used++
}

func (t *slotTable) del(h uint64) {
	if len(t.cells) == 0 {
		return
	}
	mask := len(t.cells) - 1
	i := t.home(h)
	for {
		if t.cells[i].slot == 0 {
			return
		}
		if t.cells[i].hash == h {
			break
		}
		i = (i + 1) & mask
	}
	// Shift back each following cell that may live at i (its home is not
	// cyclically within (i, j]), so no probe sequence has a hole (Knuth,
	// TAOCP vol. 3, 6.4 Algorithm R).
	for j := (i + 1) & mask; t.cells[j].slot != 0; j = (j + 1) & mask {
		if (j-t.home(t.cells[j].hash))&mask >= (j-i)&mask {
			t.cells[i] = t.cells[j]
			i = j
		}
	}
	t.cells[i] = slotCell{}
	t.used--
	if len(t.cells) > slotTableMinCells && t.used*16 < len(t.cells) {
		t.resize(len(t.cells) / 4)
	}
}

func (t *slotTable) resize(n int) {
	old := t.cells
	t.cells = make([]slotCell, n)
	t.used = 0
	mask := n - 1
	for _, c := range old {
		if c.slot == 0 {
			continue
		}
		i := t.home(c.hash)
		for t.cells[i].slot != 0 {
			i = (i + 1) & mask
		}
		t.cells[i] = c
		t.used++
	}
}

// workerTable interns WorkerIDs to small slot numbers, reused after
// RemoveWorker so that fleet churn does not grow per-shard tables forever.
type workerTable struct {
	mu    sync.RWMutex
	byID  map[kvfleet.WorkerID]uint32
	slots []*workerSlot
	free  []uint32
	// names is a copy-on-write view of slot → WorkerID for Match, which
	// must not take mu once per result.
	names atomic.Pointer[[]workerName]
}

type workerName struct {
	id   kvfleet.WorkerID
	live bool
}

// workerSlot serialises one worker's writes, and RemoveWorker against them,
// so a write that raced a removal cannot leave entries under a freed slot.
type workerSlot struct {
	mu   sync.Mutex
	idx  uint32
	id   kvfleet.WorkerID
	live bool // guarded by mu
}

const (
	// maxMemoryWorkers bounds the registry: a fleet is thousands of
	// engine ranks; slot numbers index per-shard tables, and each
	// registration copies the name table for Match.
	maxMemoryWorkers = 1 << 16
)

// lock returns w's slot, locked, registering w first when create is set.
// Without create, an unknown worker gives (nil, nil).
func (t *workerTable) lock(w kvfleet.WorkerID, create bool) (*workerSlot, error) {
	if err := validWorker(w); err != nil {
		return nil, err
	}
	for {
		t.mu.RLock()
		idx, ok := t.byID[w]
		var ws *workerSlot
		if ok {
			ws = t.slots[idx]
		}
		t.mu.RUnlock()
		if !ok {
			if !create {
				return nil, nil
			}
			var err error
			if ws, err = t.register(w); err != nil {
				return nil, err
			}
		}
		ws.mu.Lock()
		if ws.live {
			return ws, nil
		}
		// Removed between the lookup and the lock: look again.
		ws.mu.Unlock()
	}
}

func (t *workerTable) register(w kvfleet.WorkerID) (*workerSlot, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if idx, ok := t.byID[w]; ok {
		return t.slots[idx], nil
	}
	if len(t.byID) >= maxMemoryWorkers {
		return nil, fmt.Errorf("worker %s: already %d workers known", w, len(t.byID))
	}
	ws := &workerSlot{id: w, live: true}
	if n := len(t.free); n > 0 {
		ws.idx = t.free[n-1]
		t.free = t.free[:n-1]
		t.slots[ws.idx] = ws
	} else {
		ws.idx = uint32(len(t.slots))
		t.slots = append(t.slots, ws)
	}
	t.byID[w] = ws.idx
	t.publish()
	return ws, nil
}

// release forgets a worker whose slot the caller holds locked and whose
// entries are gone.
func (t *workerTable) release(ws *workerSlot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ws.live = false
	delete(t.byID, ws.id)
	t.slots[ws.idx] = nil
	t.free = append(t.free, ws.idx)
	t.publish()
}

// publish copies the slot names for Match; registrations are rare next to
// matches. Callers hold mu (or own t exclusively).
func (t *workerTable) publish() {
	names := make([]workerName, len(t.slots))
	for i, ws := range t.slots {
		if ws != nil {
			names[i] = workerName{id: ws.id, live: true}
		}
	}
	t.names.Store(&names)
}

func (t *workerTable) count() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byID)
}
