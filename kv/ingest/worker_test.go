package ingest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

const bs = 16

var ctx = context.Background()

func newMem() *kvindex.Memory { return kvindex.NewMemory(kvindex.MemoryConfig{}) }

// tokenRange returns n consecutive token ids starting at start.
func tokenRange(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

// chainOf is what a request for tokens hashes to: the oracle is
// blockhash, independent of how the events were split.
func chainOf(tokens []uint32, lora, ns string) []uint64 {
	seed := blockhash.Seed(lora, ns)
	return blockhash.SequenceHashes(blockhash.LocalHashes(tokens, bs, seed))
}

func store(hashes []uint64, parent *uint64, tokens []uint32, medium, lora string) kvevents.Event {
	ev := kvevents.Event{Kind: kvevents.BlockStored, BlockHashes: hashes, TokenIDs: tokens, BlockSize: bs, Medium: medium, LoRAName: lora}
	if parent != nil {
		ev.ParentHash, ev.HasParent = *parent, true
	}
	return ev
}

func remove(medium string, hashes ...uint64) kvevents.Event {
	return kvevents.Event{Kind: kvevents.BlockRemoved, BlockHashes: hashes, Medium: medium}
}

func batch(evs ...kvevents.Event) kvevents.Batch { return kvevents.Batch{TS: 1, Events: evs} }

func ptr(v uint64) *uint64 { return &v }

func depths(t *testing.T, idx kvindex.Index, w kvfleet.WorkerID, chain []uint64) kvfleet.Depths {
	t.Helper()
	m, err := kvindex.MatchMap(ctx, idx, chain)
	if err != nil {
		t.Fatal(err)
	}
	return m[w]
}

func apply(t *testing.T, wk *Worker, b kvevents.Batch) {
	t.Helper()
	if err := wk.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
}

// Events split over several chained batches must leave exactly the
// request-side sequence hashes of the whole token stream in the index,
// under the LoRA's and the namespace's seed.
func TestChainedBatchesStoreRequestSequenceHashes(t *testing.T) {
	const lora, ns = "adapter-x", "tenant-a"
	idx := newMem()
	w := kvfleet.WorkerID{Endpoint: "10.0.0.1:8000"}
	wk := NewWorker(w, idx, Config{BlockSize: bs, Namespace: ns})
	tokens := tokenRange(7000, 10*bs)
	eng := func(i int) uint64 { return 0xE000 + uint64(i)*7919 } // engine ids: opaque
	ids := func(from, to int) []uint64 {
		var out []uint64
		for i := from; i < to; i++ {
			out = append(out, eng(i))
		}
		return out
	}
	apply(t, wk, batch(store(ids(0, 4), nil, tokens[:4*bs], "GPU", lora)))
	apply(t, wk, batch(store(ids(4, 7), ptr(eng(3)), tokens[4*bs:7*bs], "GPU", lora)))
	apply(t, wk, batch(store(ids(7, 10), ptr(eng(6)), tokens[7*bs:], "", lora)))

	chain := chainOf(tokens, lora, ns)
	if got := depths(t, idx, w, chain); got != (kvfleet.Depths{10, 10, 10, 10}) {
		t.Fatalf("depths %v, want 10 on every tier", got)
	}
	st, _ := idx.Stats(ctx)
	if st.Entries != 10 {
		t.Fatalf("index holds %d entries, want exactly the 10 chain blocks", st.Entries)
	}
	// Same tokens without the LoRA or namespace are other identities.
	for _, c := range [][]uint64{chainOf(tokens, "", ns), chainOf(tokens, lora, ""), chainOf(tokens, "other", ns)} {
		if got := depths(t, idx, w, c); got.Max() != 0 {
			t.Fatalf("foreign chain matched %v", got)
		}
	}
	// Removing block 5 cuts the prefix at 5.
	apply(t, wk, batch(remove("GPU", eng(5))))
	if got := depths(t, idx, w, chain); got.Max() != 5 {
		t.Fatalf("after removal depths %v, want 5", got)
	}
	s := wk.Stats()
	if s.Batches != 4 || s.StoredEvents != 3 || s.RemovedEvents != 1 || s.BlocksStored != 10 || s.BlocksRemoved != 1 || s.EngineHashes != 9 || s.SequenceEntries != 9 {
		t.Fatalf("stats %+v", s)
	}
}

func TestTiersAreTrackedPerEngineHash(t *testing.T) {
	idx := newMem()
	w := kvfleet.WorkerID{Endpoint: "e:1"}
	wk := NewWorker(w, idx, Config{BlockSize: bs})
	toks := tokenRange(1, 2*bs)
	chain := chainOf(toks, "", "")
	apply(t, wk, batch(store([]uint64{1, 2}, nil, toks, "GPU", "")))
	apply(t, wk, batch(store([]uint64{1, 2}, nil, toks, "CPU", ""))) // offload
	apply(t, wk, batch(remove("GPU", 1, 2)))
	if got := depths(t, idx, w, chain); got != (kvfleet.Depths{0, 2, 2, 2}) {
		t.Fatalf("after GPU eviction depths %v, want host 2", got)
	}
	apply(t, wk, batch(remove("DISK", 1), remove("CPU", 2)))
	if got := depths(t, idx, w, chain); got != (kvfleet.Depths{0, 1, 1, 1}) {
		t.Fatalf("depths %v, want host 1", got)
	}
	apply(t, wk, batch(remove("CPU", 1)))
	if got := depths(t, idx, w, chain); got.Max() != 0 {
		t.Fatalf("depths %v, want nothing", got)
	}
	s := wk.Stats()
	if s.RemovedUnknown != 1 || s.EngineHashes != 0 || s.SequenceEntries != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Two engine ids standing for the same tokens (engine-side salt, hybrid
// groups) share one index entry that must outlive the first removal.
func TestSharedSequenceHashIsReferenceCounted(t *testing.T) {
	idx := newMem()
	w := kvfleet.WorkerID{Endpoint: "e:1"}
	wk := NewWorker(w, idx, Config{BlockSize: bs})
	toks := tokenRange(50, bs)
	chain := chainOf(toks, "", "")
	apply(t, wk, batch(store([]uint64{10}, nil, toks, "GPU", ""), store([]uint64{20}, nil, toks, "GPU", "")))
	if s := wk.Stats(); s.EngineHashes != 2 || s.SequenceEntries != 1 || s.BlocksStored != 2 {
		t.Fatalf("stats %+v, want 2 engine hashes behind 1 index entry", s)
	}
	apply(t, wk, batch(remove("GPU", 10)))
	if got := depths(t, idx, w, chain); got.Max() != 1 {
		t.Fatalf("depths %v after removing one of two holders, want 1", got)
	}
	apply(t, wk, batch(remove("GPU", 20)))
	if got := depths(t, idx, w, chain); got.Max() != 0 {
		t.Fatalf("depths %v after removing both holders, want 0", got)
	}
}

func TestReusedEngineHashRetiresOldIdentity(t *testing.T) {
	idx := newMem()
	w := kvfleet.WorkerID{Endpoint: "e:1"}
	wk := NewWorker(w, idx, Config{BlockSize: bs})
	a, b := tokenRange(0, bs), tokenRange(100, bs)
	apply(t, wk, batch(store([]uint64{5}, nil, a, "GPU", ""), store([]uint64{5}, nil, a, "CPU", "")))
	apply(t, wk, batch(store([]uint64{5}, nil, b, "GPU", "")))
	if got := depths(t, idx, w, chainOf(a, "", "")); got.Max() != 0 {
		t.Fatalf("old identity still matched on %v", got)
	}
	if got := depths(t, idx, w, chainOf(b, "", "")); got != (kvfleet.Depths{1, 1, 1, 1}) {
		t.Fatalf("new identity depths %v", got)
	}
	if s := wk.Stats(); s.HashConflicts != 1 || s.EngineHashes != 1 || s.SequenceEntries != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRejectedEventsLeaveIndexUntouched(t *testing.T) {
	toks := tokenRange(0, 2*bs)
	cases := []struct {
		name   string
		cfg    Config
		ev     kvevents.Event
		reason RejectReason
	}{
		{"block size", Config{BlockSize: 32}, store([]uint64{1, 2}, nil, toks, "GPU", ""), RejectBlockSize},
		{"unknown parent", Config{BlockSize: bs}, store([]uint64{1, 2}, ptr(99), toks, "GPU", ""), RejectUnknownParent},
		{"token count", Config{BlockSize: bs}, store([]uint64{1, 2}, nil, toks[:bs+3], "GPU", ""), RejectTokenCount},
		{"hash count", Config{BlockSize: bs}, store([]uint64{1}, nil, toks, "GPU", ""), RejectTokenCount},
		{"unknown medium", Config{BlockSize: bs}, store([]uint64{1, 2}, nil, toks, "TAPE", ""), RejectUnknownMedium},
		{"lora without name", Config{BlockSize: bs}, func() kvevents.Event {
			ev := store([]uint64{1, 2}, nil, toks, "GPU", "")
			ev.LoRAID, ev.HasLoRAID = 3, true
			return ev
		}(), RejectLoRAWithoutName},
		{"capacity", Config{BlockSize: bs, MaxBlocks: 1}, store([]uint64{1, 2}, nil, toks, "GPU", ""), RejectCapacity},
		{"removal with unknown medium", Config{BlockSize: bs}, remove("TAPE", 1), RejectUnknownMedium},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			idx := newMem()
			wk := NewWorker(kvfleet.WorkerID{Endpoint: "e:1"}, idx, tc.cfg)
			apply(t, wk, batch(tc.ev))
			s := wk.Stats()
			for r := RejectReason(0); r < NumRejectReasons; r++ {
				want := uint64(0)
				if r == tc.reason {
					want = 1
				}
				if s.Rejected[r] != want {
					t.Fatalf("rejected[%s] = %d, want %d (stats %+v)", r, s.Rejected[r], want, s)
				}
			}
			st, _ := idx.Stats(ctx)
			if st.Entries != 0 || s.EngineHashes != 0 || s.StoredEvents != 0 {
				t.Fatalf("rejected event changed state: index %+v, worker %+v", st, s)
			}
		})
	}
}

func TestAllBlocksClearedForgetsParents(t *testing.T) {
	idx := newMem()
	w := kvfleet.WorkerID{Endpoint: "e:1"}
	wk := NewWorker(w, idx, Config{BlockSize: bs})
	toks := tokenRange(0, 2*bs)
	apply(t, wk, batch(store([]uint64{1}, nil, toks[:bs], "GPU", ""), kvevents.Event{Kind: kvevents.AllBlocksCleared}))
	if got := depths(t, idx, w, chainOf(toks, "", "")); got.Max() != 0 {
		t.Fatalf("depths %v after clear", got)
	}
	apply(t, wk, batch(store([]uint64{2}, ptr(1), toks[bs:], "GPU", "")))
	if s := wk.Stats(); s.Rejected[RejectUnknownParent] != 1 || s.ClearedEvents != 1 || s.EngineHashes != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDPRankMismatchIsAnError(t *testing.T) {
	idx := newMem()
	wk := NewWorker(kvfleet.WorkerID{Endpoint: "e:1", DPRank: 1}, idx, Config{BlockSize: bs})
	b := batch(store([]uint64{1}, nil, tokenRange(0, bs), "GPU", ""))
	b.DPRank, b.HasDPRank = 2, true
	if err := wk.Apply(ctx, b); err == nil || !strings.Contains(err.Error(), "dp rank 2") {
		t.Fatalf("err %v, want a dp rank mismatch", err)
	}
	if st, _ := idx.Stats(ctx); st.Entries != 0 {
		t.Fatalf("mismatched batch was applied: %+v", st)
	}
	b.DPRank = 1
	apply(t, wk, b)
}

// failingIndex is the real memory index with Store failing on demand, to
// reach the error path (the memory backend itself cannot fail).
type failingIndex struct {
	*kvindex.Memory
	fail bool
}

func (f *failingIndex) Store(ctx context.Context, w kvfleet.WorkerID, t kvfleet.Tier, h []kvindex.Block) error {
	if f.fail {
		return errors.New("backend down")
	}
	return f.Memory.Store(ctx, w, t, h)
}

func TestIndexErrorRequiresReset(t *testing.T) {
	idx := &failingIndex{Memory: newMem(), fail: true}
	w := kvfleet.WorkerID{Endpoint: "e:1"}
	wk := NewWorker(w, idx, Config{BlockSize: bs})
	toks := tokenRange(0, bs)
	b := batch(store([]uint64{1}, nil, toks, "GPU", ""))
	if err := wk.Apply(ctx, b); err == nil || !strings.Contains(err.Error(), "backend down") {
		t.Fatalf("err %v, want the index error", err)
	}
	idx.fail = false
	if err := wk.Apply(ctx, b); !errors.Is(err, ErrNeedsReset) {
		t.Fatalf("err %v, want ErrNeedsReset", err)
	}
	if wk.Stats().NeedsResetReason == "" {
		t.Fatal("stats do not say the worker needs a reset")
	}
	if err := wk.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	apply(t, wk, b)
	if got := depths(t, idx, w, chainOf(toks, "", "")); got.Max() != 1 {
		t.Fatalf("depths %v after reset and re-store", got)
	}
	if s := wk.Stats(); s.Resets != 1 || s.NeedsResetReason != "" {
		t.Fatalf("stats %+v", s)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{BlockSize: 16}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{{}, {BlockSize: -1}, {BlockSize: blockhash.MaxBlockSize + 1}, {BlockSize: 16, MaxBlocks: -1}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v validated", c)
		}
	}
}

// End to end: the vLLM-shaped fixtures written by
// kvevents/testdata/gen_fixtures.py, decoded, ingested and matched.
func TestFixturesEndToEnd(t *testing.T) {
	read := func(name string) kvevents.Batch {
		raw, err := os.ReadFile(filepath.Join("..", "kvevents", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := kvevents.NewDecoder(kvevents.Limits{}).Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	idx := newMem()

	// array_current: blocks 0,1 then 2 under 1 (base model), a LoRA block,
	// block 2 removed, blocks 0,1 offloaded to CPU. dp rank 1.
	w1 := kvfleet.WorkerID{Endpoint: "10.0.0.1:8000", DPRank: 1}
	apply(t, NewWorker(w1, idx, Config{BlockSize: bs}), read("array_current.msgpack"))
	if got := depths(t, idx, w1, chainOf(tokenRange(1000, 3*bs), "", "")); got != (kvfleet.Depths{2, 2, 2, 2}) {
		t.Fatalf("array_current base chain depths %v, want 2", got)
	}
	if got := depths(t, idx, w1, chainOf(tokenRange(5000, bs), "adapter-a", "")); got != (kvfleet.Depths{1, 1, 1, 1}) {
		t.Fatalf("array_current LoRA chain depths %v, want 1", got)
	}

	// map_current without its final AllBlocksCleared: LoRA blocks 0,1 on
	// GPU, block 2 on SHARED storage, block 0's CPU_TIER2 copy removed.
	w2 := kvfleet.WorkerID{Endpoint: "10.0.0.2:8000", DPRank: 2}
	b := read("map_current.msgpack")
	if last := b.Events[len(b.Events)-1]; last.Kind != kvevents.AllBlocksCleared {
		t.Fatalf("fixture changed: last event %v", last.Kind)
	}
	wk := NewWorker(w2, idx, Config{BlockSize: bs})
	full := b
	b.Events = b.Events[:len(b.Events)-1]
	apply(t, wk, b)
	chain := chainOf(tokenRange(1, 3*bs), "sql-lora", "")
	if got := depths(t, idx, w2, chain); got != (kvfleet.Depths{2, 2, 2, 3}) {
		t.Fatalf("map_current depths %v, want device 2, external 3", got)
	}
	// The whole batch ends with AllBlocksCleared.
	apply(t, NewWorker(w2, idx, Config{BlockSize: bs}), full)
	if got := depths(t, idx, w2, chain); got.Max() != 0 {
		t.Fatalf("depths %v after AllBlocksCleared", got)
	}
}
