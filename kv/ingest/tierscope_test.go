package ingest

import (
	"testing"

	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// Two streams feed one worker: the engine's (GPU) and its kvagent's (host
// and disk). Each stream's reset must clear only what it announced, and
// the kvagent stream continues chains whose parents only the engine
// stream knows.
func TestTierStreamSharesAWorkerWithTheEngineStream(t *testing.T) {
	idx := newMem()
	w := kvfleet.WorkerID{Endpoint: "10.0.0.1:8000"}
	gpu := NewWorker(w, idx, Config{BlockSize: bs, ScopedClear: true})
	tier := NewWorker(w, idx, Config{BlockSize: bs, Tiers: 1<<kvfleet.TierHost | 1<<kvfleet.TierDisk, ScopedClear: true, ParentSeq: gpu.SeqOf})
	toks := tokenRange(0, 3*bs)
	chain := chainOf(toks, "", "")

	// GPU holds blocks 0..2 (engine hashes 100..102).
	if err := gpu.Apply(ctx, batch(store([]uint64{100, 101, 102}, nil, toks, "", ""))); err != nil {
		t.Fatal(err)
	}
	// The engine evicts its tail; the kvagent stores it on host with a
	// parent (101) that only the engine stream knows.
	if err := gpu.Apply(ctx, batch(remove("", 102))); err != nil {
		t.Fatal(err)
	}
	if err := tier.Apply(ctx, batch(store([]uint64{102}, ptr(101), toks[2*bs:], "CPU", ""))); err != nil {
		t.Fatal(err)
	}
	if got, want := depths(t, idx, w, chain), (kvfleet.Depths{2, 3, 3, 3}); got != want {
		t.Fatalf("depths %v, want %v", got, want)
	}
	if r := tier.Stats().Rejected[RejectUnknownParent]; r != 0 {
		t.Fatalf("%d stores rejected for an unknown parent", r)
	}
	// A kvagent stream announcing a GPU block is refused.
	if err := tier.Apply(ctx, batch(store([]uint64{200}, nil, tokenRange(500, bs), "GPU", ""))); err != nil {
		t.Fatal(err)
	}
	if r := tier.Stats().Rejected[RejectTierNotAllowed]; r != 1 {
		t.Fatalf("tier_not_allowed rejections: %d, want 1", r)
	}
	// The kvagent restarts: its stream resets; the GPU blocks stay.
	if err := tier.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := depths(t, idx, w, chain), (kvfleet.Depths{2, 2, 2, 2}); got != want {
		t.Fatalf("after the tier stream's reset: depths %v, want %v", got, want)
	}
	// And the other way: the kvagent holds block 2 again, the engine
	// stream resets (gap): the host block stays.
	if err := tier.Apply(ctx, batch(store([]uint64{102}, ptr(101), toks[2*bs:], "CPU", ""))); err != nil {
		t.Fatal(err)
	}
	if err := gpu.Apply(ctx, batch(kvevents.Event{Kind: kvevents.AllBlocksCleared})); err != nil {
		t.Fatal(err)
	}
	m, err := kvindex.MatchMap(ctx, idx, chain[2:])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m[w], (kvfleet.Depths{0, 1, 1, 1}); got != want {
		t.Fatalf("after the engine's clear: depths of block 2 %v, want %v", got, want)
	}
	if got := depths(t, idx, w, chain); got != (kvfleet.Depths{}) {
		t.Fatalf("after the engine's clear: chain depths %v, want none (blocks 0, 1 gone)", got)
	}
}
