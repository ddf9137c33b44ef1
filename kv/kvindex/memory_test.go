package kvindex_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// memModel is the reference the Memory index is checked against: the
// semantics of kvindex.Index written as directly as possible, with no
// sharding, interning or eviction.
type memModel struct {
	held  map[kvfleet.WorkerID]map[uint64]uint8 // worker → hash → tier mask
	known map[kvfleet.WorkerID]bool
}

func newMemModel() *memModel {
	return &memModel{held: map[kvfleet.WorkerID]map[uint64]uint8{}, known: map[kvfleet.WorkerID]bool{}}
}

func (m *memModel) store(w kvfleet.WorkerID, t kvfleet.Tier, hs []uint64) {
	m.known[w] = true
	if m.held[w] == nil {
		m.held[w] = map[uint64]uint8{}
	}
	for _, h := range hs {
		m.held[w][h] |= 1 << t
	}
}

func (m *memModel) remove(w kvfleet.WorkerID, t kvfleet.Tier, hs []uint64) {
	m.known[w] = true
	for _, h := range hs {
		if mask := m.held[w][h] &^ (1 << t); mask != 0 {
			m.held[w][h] = mask
		} else {
			delete(m.held[w], h)
		}
	}
}

func (m *memModel) clear(w kvfleet.WorkerID) { m.known[w] = true; delete(m.held, w) }

func (m *memModel) removeWorker(w kvfleet.WorkerID) { delete(m.known, w); delete(m.held, w) }

// match applies the definition: Depths[t] is the longest prefix whose every
// block the worker holds on tier t or a faster one.
func (m *memModel) match(chain []uint64) matchMap {
	out := matchMap{}
	for w, held := range m.held {
		var d kvfleet.Depths
		for t := range kvfleet.NumTiers {
			fasterOrEqual := uint8(1)<<(t+1) - 1
			for d[t] < len(chain) && held[chain[d[t]]]&fasterOrEqual != 0 {
				d[t]++
			}
		}
		if d.Max() > 0 {
			out[w] = d
		}
	}
	return out
}

func (m *memModel) stats() kvindex.Stats {
	var st kvindex.Stats
	blocks := map[uint64]bool{}
	for _, held := range m.held {
		for h, mask := range held {
			blocks[h] = true
			for ; mask != 0; mask &= mask - 1 {
				st.Entries++
			}
		}
	}
	st.Blocks = int64(len(blocks))
	st.Workers = len(m.known)
	return st
}

func memWorker(i int) kvfleet.WorkerID {
	return kvfleet.WorkerID{Endpoint: fmt.Sprintf("10.0.0.%d:8000", i), DPRank: i % 2}
}

var memCtx = context.Background()

// matchMap is a Match read whole, for comparisons.
type matchMap = map[kvfleet.WorkerID]kvfleet.Depths

func mustMatch(t *testing.T, idx kvindex.Index, chain []uint64) matchMap {
	t.Helper()
	got, err := kvindex.MatchMap(memCtx, idx, chain)
	if err != nil {
		t.Fatalf("Match(%v): %v", chain, err)
	}
	return got
}

func mustStats(t *testing.T, idx kvindex.Index) kvindex.Stats {
	t.Helper()
	st, err := idx.Stats(memCtx)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

// memOp is one step of a table test.
type memOp struct {
	kind   string // store, remove, clear, removeWorker
	worker int
	tier   kvfleet.Tier
	hashes []uint64
}

func applyMemOp(t *testing.T, idx kvindex.Index, op memOp) {
	t.Helper()
	w := memWorker(op.worker)
	var err error
	switch op.kind {
	case "store":
		err = idx.Store(memCtx, w, op.tier, kvindex.ChainBlocks(op.hashes))
	case "remove":
		err = idx.Remove(memCtx, w, op.tier, kvindex.ChainBlocks(op.hashes))
	case "clear":
		err = idx.Clear(memCtx, w)
	case "removeWorker":
		err = idx.RemoveWorker(memCtx, w)
	default:
		t.Fatalf("unknown op %q", op.kind)
	}
	if err != nil {
		t.Fatalf("%s %v: %v", op.kind, op, err)
	}
}

func TestMemorySemantics(t *testing.T) {
	dev, host, disk, ext := kvfleet.TierDevice, kvfleet.TierHost, kvfleet.TierDisk, kvfleet.TierExternal
	store := func(w int, tier kvfleet.Tier, hs ...uint64) memOp { return memOp{"store", w, tier, hs} }
	remove := func(w int, tier kvfleet.Tier, hs ...uint64) memOp { return memOp{"remove", w, tier, hs} }
	chain := []uint64{10, 11, 12, 13, 14}
	cases := []struct {
		name  string
		ops   []memOp
		chain []uint64
		want  map[int]kvfleet.Depths
		stats kvindex.Stats
	}{
		{
			name:  "one worker on device",
			ops:   []memOp{store(1, dev, 10, 11, 12, 13)},
			chain: chain,
			want:  map[int]kvfleet.Depths{1: {4, 4, 4, 4}},
			stats: kvindex.Stats{Blocks: 4, Entries: 4, Workers: 1},
		},
		{
			name:  "mixed tiers",
			ops:   []memOp{store(1, dev, 10, 11), store(1, host, 12), store(1, disk, 13)},
			chain: chain,
			want:  map[int]kvfleet.Depths{1: {2, 3, 4, 4}},
			stats: kvindex.Stats{Blocks: 4, Entries: 4, Workers: 1},
		},
		{
			name:  "a copy on a faster tier counts for the slower ones",
			ops:   []memOp{store(1, host, 10, 11, 12), store(1, dev, 10, 11)},
			chain: chain,
			want:  map[int]kvfleet.Depths{1: {2, 3, 3, 3}},
			stats: kvindex.Stats{Blocks: 3, Entries: 5, Workers: 1},
		},
		{
			name:  "a slow block ends the fast depths for good",
			ops:   []memOp{store(1, dev, 10, 12, 13), store(1, ext, 11)},
			chain: chain,
			want:  map[int]kvfleet.Depths{1: {1, 1, 1, 4}},
			stats: kvindex.Stats{Blocks: 4, Entries: 4, Workers: 1},
		},
		{
			name:  "a gap ends the prefix",
			ops:   []memOp{store(1, dev, 10, 11, 13, 14)},
			chain: chain,
			want:  map[int]kvfleet.Depths{1: {2, 2, 2, 2}},
			stats: kvindex.Stats{Blocks: 4, Entries: 4, Workers: 1},
		},
		{
			name:  "without the first block a worker is absent",
			ops:   []memOp{store(1, dev, 11, 12), store(2, dev, 10)},
			chain: chain,
			want:  map[int]kvfleet.Depths{2: {1, 1, 1, 1}},
			stats: kvindex.Stats{Blocks: 3, Entries: 3, Workers: 2},
		},
		{
			name:  "several workers, several depths",
			ops:   []memOp{store(1, dev, 10, 11, 12), store(2, dev, 10), store(3, host, 10, 11, 12, 13, 14), store(4, ext, 10, 11)},
			chain: chain,
			want:  map[int]kvfleet.Depths{1: {3, 3, 3, 3}, 2: {1, 1, 1, 1}, 3: {0, 5, 5, 5}, 4: {0, 0, 0, 2}},
			stats: kvindex.Stats{Blocks: 5, Entries: 11, Workers: 4},
		},
		{
			name:  "remove on one tier keeps the other",
			ops:   []memOp{store(1, dev, 10, 11), store(1, host, 10, 11), remove(1, dev, 11)},
			chain: chain,
			want:  map[int]kvfleet.Depths{1: {1, 2, 2, 2}},
			stats: kvindex.Stats{Blocks: 2, Entries: 3, Workers: 1},
		},
		{
			name:  "remove on a tier not held, of unknown hashes, by an unknown worker",
			ops:   []memOp{store(1, dev, 10, 11), remove(1, host, 10), remove(1, dev, 99), remove(2, dev, 10)},
			chain: chain,
			want:  map[int]kvfleet.Depths{1: {2, 2, 2, 2}},
			stats: kvindex.Stats{Blocks: 2, Entries: 2, Workers: 2},
		},
		{
			name:  "removing the last holder forgets the block",
			ops:   []memOp{store(1, dev, 10, 11), remove(1, dev, 10)},
			chain: chain,
			want:  map[int]kvfleet.Depths{},
			stats: kvindex.Stats{Blocks: 1, Entries: 1, Workers: 1},
		},
		{
			name:  "store is idempotent",
			ops:   []memOp{store(1, dev, 10, 10, 11), store(1, dev, 10, 11)},
			chain: chain,
			want:  map[int]kvfleet.Depths{1: {2, 2, 2, 2}},
			stats: kvindex.Stats{Blocks: 2, Entries: 2, Workers: 1},
		},
		{
			name:  "clear keeps the worker known",
			ops:   []memOp{store(1, dev, 10, 11), store(2, dev, 10), {kind: "clear", worker: 1}},
			chain: chain,
			want:  map[int]kvfleet.Depths{2: {1, 1, 1, 1}},
			stats: kvindex.Stats{Blocks: 1, Entries: 1, Workers: 2},
		},
		{
			name:  "remove worker forgets it",
			ops:   []memOp{store(1, dev, 10, 11), store(2, dev, 10), {kind: "removeWorker", worker: 1}},
			chain: chain,
			want:  map[int]kvfleet.Depths{2: {1, 1, 1, 1}},
			stats: kvindex.Stats{Blocks: 1, Entries: 1, Workers: 1},
		},
		{
			name:  "store after clear",
			ops:   []memOp{store(1, dev, 10, 11), {kind: "clear", worker: 1}, store(1, host, 10)},
			chain: chain,
			want:  map[int]kvfleet.Depths{1: {0, 1, 1, 1}},
			stats: kvindex.Stats{Blocks: 1, Entries: 1, Workers: 1},
		},
		{
			name:  "a removed worker's slot reused by a newcomer",
			ops:   []memOp{store(1, dev, 10, 11, 12), {kind: "removeWorker", worker: 1}, store(2, dev, 10)},
			chain: chain,
			want:  map[int]kvfleet.Depths{2: {1, 1, 1, 1}},
			stats: kvindex.Stats{Blocks: 1, Entries: 1, Workers: 1},
		},
		{
			name:  "empty chain",
			ops:   []memOp{store(1, dev, 10)},
			chain: nil,
			want:  map[int]kvfleet.Depths{},
			stats: kvindex.Stats{Blocks: 1, Entries: 1, Workers: 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			idx := kvindex.NewMemory(kvindex.MemoryConfig{})
			for _, op := range tc.ops {
				applyMemOp(t, idx, op)
			}
			want := matchMap{}
			for w, d := range tc.want {
				want[memWorker(w)] = d
			}
			if got := mustMatch(t, idx, tc.chain); !reflect.DeepEqual(got, want) {
				t.Errorf("Match = %v, want %v", got, want)
			}
			if got := mustStats(t, idx); got != tc.stats {
				t.Errorf("Stats = %+v, want %+v", got, tc.stats)
			}
		})
	}
}

func TestMemoryRejectsBadInput(t *testing.T) {
	idx := kvindex.NewMemory(kvindex.MemoryConfig{})
	good := memWorker(1)
	if err := idx.Store(memCtx, good, kvfleet.TierDevice, kvindex.ChainBlocks([]uint64{1})); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name string
		call func() error
	}{
		{"store tier out of range", func() error { return idx.Store(memCtx, good, kvfleet.NumTiers, kvindex.ChainBlocks([]uint64{2})) }},
		{"remove tier out of range", func() error { return idx.Remove(memCtx, good, 200, kvindex.ChainBlocks([]uint64{1})) }},
		{"empty endpoint", func() error {
			return idx.Store(memCtx, kvfleet.WorkerID{}, kvfleet.TierDevice, kvindex.ChainBlocks([]uint64{2}))
		}},
		{"negative rank", func() error {
			return idx.Store(memCtx, kvfleet.WorkerID{Endpoint: "a:1", DPRank: -1}, kvfleet.TierDevice, kvindex.ChainBlocks([]uint64{2}))
		}},
		{"clear bad worker", func() error { return idx.Clear(memCtx, kvfleet.WorkerID{DPRank: 3}) }},
		{"remove bad worker", func() error { return idx.RemoveWorker(memCtx, kvfleet.WorkerID{DPRank: -2}) }},
	}
	for _, tc := range bad {
		if err := tc.call(); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	want := kvindex.Stats{Blocks: 1, Entries: 1, Workers: 1}
	if got := mustStats(t, idx); got != want {
		t.Errorf("after rejected calls Stats = %+v, want %+v", got, want)
	}
}

// randomMemOps drives idx and the model with the same random operations
// over a small hash space, so blocks are shared, re-stored and removed.
func randomMemOps(t *testing.T, rng *rand.Rand, idx kvindex.Index, model *memModel, n, workers, hashSpace int) {
	t.Helper()
	for range n {
		w := rng.IntN(workers)
		tier := kvfleet.Tier(rng.IntN(int(kvfleet.NumTiers)))
		hs := make([]uint64, 1+rng.IntN(8))
		start := rng.IntN(hashSpace)
		for i := range hs {
			hs[i] = uint64((start + i) % hashSpace)
		}
		var op memOp
		switch r := rng.IntN(100); {
		case r < 60:
			op = memOp{"store", w, tier, hs}
			model.store(memWorker(w), tier, hs)
		case r < 92:
			op = memOp{"remove", w, tier, hs}
			model.remove(memWorker(w), tier, hs)
		case r < 97:
			op = memOp{kind: "clear", worker: w}
			model.clear(memWorker(w))
		default:
			op = memOp{kind: "removeWorker", worker: w}
			model.removeWorker(memWorker(w))
		}
		applyMemOp(t, idx, op)
	}
}

func TestMemoryMatchesModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			idx := kvindex.NewMemory(kvindex.MemoryConfig{Shards: 1 << (seed % 5)})
			model := newMemModel()
			const hashSpace = 24
			for round := range 30 {
				// 40 workers make blocks with many more holders than
				// workers still matching (Match's binary-search path).
				randomMemOps(t, rng, idx, model, 20, 6+34*int(seed%2), hashSpace)
				for q := range 10 {
					chain := make([]uint64, 1+rng.IntN(12))
					start := rng.IntN(hashSpace)
					for i := range chain {
						chain[i] = uint64((start + i) % hashSpace)
					}
					if q%3 == 0 { // scramble: chains the fleet rarely holds in order
						rng.Shuffle(len(chain), func(i, j int) { chain[i], chain[j] = chain[j], chain[i] })
					}
					if got, want := mustMatch(t, idx, chain), model.match(chain); !reflect.DeepEqual(got, want) {
						t.Fatalf("round %d: Match(%v) = %v, want %v", round, chain, got, want)
					}
				}
				if got, want := mustStats(t, idx), model.stats(); got != want {
					t.Fatalf("round %d: Stats = %+v, want %+v", round, got, want)
				}
			}
		})
	}
}

// TestMemoryCapacity checks the bound and that eviction drops whole blocks
// without corrupting what remains: every surviving holder is one the model
// has, and removing everything the model knows brings the index to zero.
func TestMemoryCapacity(t *testing.T) {
	const maxEntries = 40
	idx := kvindex.NewMemory(kvindex.MemoryConfig{MaxEntries: maxEntries})
	model := newMemModel()
	const holders = 4
	for b := range uint64(100) {
		for w := range holders {
			tier := kvfleet.Tier((int(b) + w) % int(kvfleet.NumTiers))
			if err := idx.Store(memCtx, memWorker(w), tier, kvindex.ChainBlocks([]uint64{b})); err != nil {
				t.Fatal(err)
			}
			model.store(memWorker(w), tier, []uint64{b})
			if st := mustStats(t, idx); st.Entries > maxEntries {
				t.Fatalf("block %d worker %d: %d entries > MaxEntries %d", b, w, st.Entries, maxEntries)
			}
		}
	}
	if ev := idx.Evictions(); ev < 100-maxEntries/holders {
		t.Errorf("Evictions = %d, want >= %d", ev, 100-maxEntries/holders)
	}
	present := 0
	for b := range uint64(100) {
		got := mustMatch(t, idx, []uint64{b})
		want := model.match([]uint64{b})
		switch {
		case len(got) == 0:
		case reflect.DeepEqual(got, want):
			present++
		default:
			t.Errorf("block %d partly evicted: Match = %v, want all of %v or nothing", b, got, want)
		}
	}
	if st := mustStats(t, idx); int64(present) != st.Blocks || st.Entries != int64(present*holders) {
		t.Errorf("%d blocks matchable, Stats = %+v", present, st)
	}
	if present == 0 {
		t.Error("capacity eviction left nothing")
	}
	// The survivors and the workers are intact: more events apply normally.
	for w := range holders {
		if err := idx.Store(memCtx, memWorker(w), kvfleet.TierDevice, kvindex.ChainBlocks([]uint64{1000, 1001})); err != nil {
			t.Fatal(err)
		}
		model.store(memWorker(w), kvfleet.TierDevice, []uint64{1000, 1001})
	}
	if got, want := mustMatch(t, idx, []uint64{1000, 1001}), model.match([]uint64{1000, 1001}); !reflect.DeepEqual(got, want) {
		t.Errorf("after eviction Match = %v, want %v", got, want)
	}
	for w, held := range model.held {
		for h, mask := range held {
			for tier := range kvfleet.NumTiers {
				if mask&(1<<tier) != 0 {
					if err := idx.Remove(memCtx, w, tier, kvindex.ChainBlocks([]uint64{h})); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	if st := mustStats(t, idx); st.Blocks != 0 || st.Entries != 0 || st.Workers != holders {
		t.Errorf("after removing everything Stats = %+v, want 0 blocks, 0 entries, %d workers", st, holders)
	}
}

// TestMemoryEvictsUntouchedFirst: blocks matched after the index filled up
// outlive a wave of new blocks smaller than the untouched rest, as they
// would under exact LRU.
func TestMemoryEvictsUntouchedFirst(t *testing.T) {
	const maxEntries = 64
	idx := kvindex.NewMemory(kvindex.MemoryConfig{MaxEntries: maxEntries})
	w := memWorker(1)
	for b := range uint64(maxEntries + 1) {
		if err := idx.Store(memCtx, w, kvfleet.TierDevice, kvindex.ChainBlocks([]uint64{b})); err != nil {
			t.Fatal(err)
		}
	}
	hot := []uint64{20, 21, 22, 23, 24, 25, 26, 27}
	for _, h := range hot {
		mustMatch(t, idx, []uint64{h})
	}
	for b := uint64(1000); b < 1000+maxEntries/2; b++ {
		if err := idx.Store(memCtx, w, kvfleet.TierDevice, kvindex.ChainBlocks([]uint64{b})); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range hot {
		if got := mustMatch(t, idx, []uint64{h}); len(got) == 0 {
			t.Errorf("recently matched block %d was evicted", h)
		}
	}
	if st := mustStats(t, idx); st.Entries > maxEntries {
		t.Errorf("Entries = %d > %d", st.Entries, maxEntries)
	}
}

// TestMemoryConcurrent runs one writer per worker (the interface's rule)
// with matchers, Stats and Clear/RemoveWorker of other workers alongside;
// run with -race. Each worker's final state depends only on its own ops,
// so the end result is checked against the model.
// randomWrite is one random writer step of the concurrent tests: a roll
// below storeBelow stores, below removeBelow removes, below 98 clears the
// worker, else removes the worker; the model follows the index.
type randomWrite struct{ roll, storeBelow, removeBelow int }

func (op randomWrite) apply(idx *kvindex.Memory, model *memModel, w kvfleet.WorkerID, tier kvfleet.Tier, blocks []kvindex.Block, hs []uint64) error {
	switch {
	case op.roll < op.storeBelow:
		model.store(w, tier, hs)
		return idx.Store(memCtx, w, tier, blocks)
	case op.roll < op.removeBelow:
		model.remove(w, tier, hs)
		return idx.Remove(memCtx, w, tier, blocks)
	case op.roll < 98:
		model.clear(w)
		return idx.Clear(memCtx, w)
	default:
		model.removeWorker(w)
		return idx.RemoveWorker(memCtx, w)
	}
}

// depthsOrdered reports (and fails t on) a worker whose depths in m are not
// non-decreasing from the fastest tier, or reach past a chain of n blocks:
// what a torn read during concurrent writes would show.
func depthsOrdered(t *testing.T, m *kvindex.Match, n int) bool {
	t.Helper()
	for w, d := range m.All() {
		for tier := 1; tier < int(kvfleet.NumTiers); tier++ {
			if d[tier] < d[tier-1] || d.Max() > n {
				t.Errorf("worker %v: depths %v not non-decreasing within a chain of %d", w, d, n)
				return false
			}
		}
	}
	return true
}

// mergeModels is one model of what the writers' own models (one worker
// each) say together.
func mergeModels(models []*memModel) *memModel {
	merged := newMemModel()
	for _, m := range models {
		for w := range m.known {
			merged.known[w] = true
		}
		for w, held := range m.held {
			merged.held[w] = held
		}
	}
	return merged
}

func TestMemoryConcurrent(t *testing.T) {
	idx := kvindex.NewMemory(kvindex.MemoryConfig{Shards: 8})
	const writers = 6
	models := make([]*memModel, writers)
	var wg sync.WaitGroup
	for wi := range writers {
		models[wi] = newMemModel()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(wi), 2))
			w := memWorker(wi)
			for range 2000 {
				hs := make([]uint64, 1+rng.IntN(16))
				start := rng.IntN(64)
				for i := range hs {
					hs[i] = uint64(start + i)
				}
				tier := kvfleet.Tier(rng.IntN(int(kvfleet.NumTiers)))
				op := randomWrite{roll: rng.IntN(100), storeBelow: 60, removeBelow: 95}
				if err := op.apply(idx, models[wi], w, tier, kvindex.ChainBlocks(hs), hs); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 3 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			chain := make([]uint64, 32)
			var m kvindex.Match
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				for j := range chain {
					chain[j] = uint64((i + j + r) % 80)
				}
				if err := idx.Match(memCtx, chain, &m); err != nil {
					t.Error(err)
					return
				}
				if !depthsOrdered(t, &m, len(chain)) {
					return
				}
				if i%50 == 0 {
					if _, err := idx.Stats(memCtx); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()

	merged := mergeModels(models)
	for start := range uint64(80) {
		chain := make([]uint64, 20)
		for i := range chain {
			chain[i] = start + uint64(i)
		}
		if got, want := mustMatch(t, idx, chain), merged.match(chain); !reflect.DeepEqual(got, want) {
			t.Fatalf("final Match(%v) = %v, want %v", chain, got, want)
		}
	}
	if got, want := mustStats(t, idx), merged.stats(); got != want {
		t.Fatalf("final Stats = %+v, want %+v", got, want)
	}
}

// TestMemoryManyBlocks grows and shrinks the block table of one shard
// through many random hashes, with holders removed in random order, and
// checks every block's presence after each wave: lookups must survive the
// table's resizing and its deletions.
func TestMemoryManyBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	idx := kvindex.NewMemory(kvindex.MemoryConfig{Shards: 1})
	model := newMemModel()
	w := memWorker(1)
	var live []uint64
	for wave := range 6 {
		fresh := make([]uint64, 3000)
		for i := range fresh {
			fresh[i] = rng.Uint64()
			if wave%2 == 1 { // clustered values: neighbouring table cells
				fresh[i] = uint64(wave)<<32 | uint64(i)
			}
		}
		if err := idx.Store(memCtx, w, kvfleet.TierDevice, kvindex.ChainBlocks(fresh)); err != nil {
			t.Fatal(err)
		}
		model.store(w, kvfleet.TierDevice, fresh)
		live = append(live, fresh...)
		rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
		gone := live[:len(live)*3/4]
		if err := idx.Remove(memCtx, w, kvfleet.TierDevice, kvindex.ChainBlocks(gone)); err != nil {
			t.Fatal(err)
		}
		model.remove(w, kvfleet.TierDevice, gone)
		for _, h := range live {
			if got, want := mustMatch(t, idx, []uint64{h}), model.match([]uint64{h}); !reflect.DeepEqual(got, want) {
				t.Fatalf("wave %d: Match(%#x) = %v, want %v", wave, h, got, want)
			}
		}
		live = slices.Clone(live[len(live)*3/4:])
		if got, want := mustStats(t, idx), model.stats(); got != want {
			t.Fatalf("wave %d: Stats = %+v, want %+v", wave, got, want)
		}
	}
}

// FuzzMemoryAgainstModel reads operations from the fuzzer's bytes, three
// per op: kind and worker, tier (out-of-range tiers must be refused and
// change nothing), and a run of hashes from a small space. After every op
// the index must agree with the model on a query and on Stats.
func FuzzMemoryAgainstModel(f *testing.F) {
	f.Add([]byte{0x00, 0, 0x13, 0x01, 1, 0x12, 0x40, 0, 0x03})
	f.Add([]byte{0x00, 0, 0x0f, 0x10, 0, 0x24, 0x20, 7, 0x11, 0x30, 2, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 3*512 {
			data = data[:3*512]
		}
		// A tiny capacity would evict, which the model does not do.
		idx := kvindex.NewMemory(kvindex.MemoryConfig{Shards: 4})
		model := newMemModel()
		for i := 0; i+3 <= len(data); i += 3 {
			kind, worker := data[i]>>4&3, int(data[i]&7)
			tier := kvfleet.Tier(data[i+1] & 7)
			start, n := int(data[i+2]>>3), 1+int(data[i+2]&7)
			hs := make([]uint64, n)
			for j := range hs {
				hs[j] = uint64((start + j) % 32)
			}
			w := memWorker(worker)
			var err error
			switch kind {
			case 0:
				err = idx.Store(memCtx, w, tier, kvindex.ChainBlocks(hs))
				if tier < kvfleet.NumTiers {
					model.store(w, tier, hs)
				}
			case 1:
				err = idx.Remove(memCtx, w, tier, kvindex.ChainBlocks(hs))
				if tier < kvfleet.NumTiers {
					model.remove(w, tier, hs)
				}
			case 2:
				err = idx.Clear(memCtx, w)
				model.clear(w)
			case 3:
				err = idx.RemoveWorker(memCtx, w)
				model.removeWorker(w)
			}
			if refused := kind < 2 && tier >= kvfleet.NumTiers; (err != nil) != refused {
				t.Fatalf("op %d (kind %d, tier %d): err = %v, want refused = %v", i/3, kind, tier, err, refused)
			}
			if got, want := mustMatch(t, idx, hs), model.match(hs); !reflect.DeepEqual(got, want) {
				t.Fatalf("op %d: Match(%v) = %v, want %v", i/3, hs, got, want)
			}
			if got, want := mustStats(t, idx), model.stats(); got != want {
				t.Fatalf("op %d: Stats = %+v, want %+v", i/3, got, want)
			}
		}
	})
}
