package ingest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// The batches below are kv/kvevents/testdata fixtures, written by
// gen_fixtures.py in the engines' own layouts (array and map); each test
// decodes the bytes and applies them as the indexer does.

func applyFixture(t *testing.T, wk *Worker, name string) {
	t.Helper()
	payload, err := os.ReadFile(filepath.Join("..", "kvevents", "testdata", name+".msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := kvevents.NewDecoder(kvevents.Limits{}).Decode(payload)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	apply(t, wk, b)
}

func held(t *testing.T, idx kvindex.Index, w kvfleet.WorkerID, chain []uint64) kvfleet.Depths {
	t.Helper()
	return depths(t, idx, w, chain)
}

// vLLM v0.26 with the OffloadingConnector: GPU events and CPU/STORAGE
// placeholders (block_size 0, no tokens) in one batch. The placeholders
// are dropped one at a time; the GPU store and its removal apply.
func TestOffloadPlaceholdersDropOnlyThemselves(t *testing.T) {
	w := kvfleet.WorkerID{Endpoint: "e:1"}
	for _, fx := range []string{"array_offload_placeholder", "map_v026_offload_placeholders"} {
		t.Run(fx, func(t *testing.T) {
			idx := newMem()
			wk := NewWorker(w, idx, Config{BlockSize: bs})
			applyFixture(t, wk, fx)
			s := wk.Stats()
			if s.Rejected[RejectOffloadPlaceholder] == 0 || s.StoredEvents == 0 {
				t.Fatalf("stats %+v: want the GPU store applied and the placeholders counted", s)
			}
			if fx == "array_offload_placeholder" {
				if d := held(t, idx, w, chainOf(tokenRange(10, bs), "", "")); d[kvfleet.TierDevice] != 1 || d[kvfleet.TierHost] != 1 {
					t.Fatalf("GPU block depths %v, want held on device only (host counts faster tiers)", d)
				}
			} else if s.SequenceEntries != 0 || s.RemovedEvents != 1 {
				t.Fatalf("stats %+v: the GPU block was stored then removed in the same batch", s)
			}
		})
	}
}

// A hybrid model's sliding-window group publishes the same engine hashes
// as its full-attention group; its removal must not take the
// full-attention blocks out of the kvindex.
func TestHybridModelIndexesOnlyTheMainGroup(t *testing.T) {
	w := kvfleet.WorkerID{Endpoint: "e:1"}
	for _, fx := range []string{"array_hybrid_groups", "map_hybrid_groups"} {
		t.Run(fx, func(t *testing.T) {
			idx := newMem()
			wk := NewWorker(w, idx, Config{BlockSize: bs})
			applyFixture(t, wk, fx)
			if d := held(t, idx, w, chainOf(tokenRange(500, 2*bs), "", "")); d[kvfleet.TierDevice] != 2 {
				t.Fatalf("depths %v: the full-attention prefix must stay whole", d)
			}
			if s := wk.Stats(); s.Rejected[RejectNonMainGroup] != 2 {
				t.Fatalf("stats %+v: want the sliding-window store and removal counted as non_main_group", s)
			}
		})
	}
	// A removal that carries only group_idx is judged by what that
	// group's stores said.
	idx := newMem()
	wk := NewWorker(w, idx, Config{BlockSize: bs})
	main := store([]uint64{1}, nil, tokenRange(0, bs), "GPU", "")
	main.GroupIdx, main.HasGroupIdx, main.SpecKind = 1, true, "full_attention"
	window := main
	window.GroupIdx, window.SpecKind = 0, "mamba"
	apply(t, wk, batch(main, window))
	rm := remove("GPU", 1)
	rm.HasGroupIdx = true // group 0, learned non-main
	apply(t, wk, batch(rm))
	if d := held(t, idx, w, chainOf(tokenRange(0, bs), "", "")); d[kvfleet.TierDevice] != 1 {
		t.Fatalf("depths %v: group 0 is the mamba group here; its removal must not drop group 1's block", d)
	}
	rm.GroupIdx = 1
	apply(t, wk, batch(rm))
	if d := held(t, idx, w, chainOf(tokenRange(0, bs), "", "")); d[kvfleet.TierDevice] != 0 {
		t.Fatalf("depths %v: the main group's removal must drop it", d)
	}
}

// Salted requests: the engine hashes them under the salt, so the index
// must too, and a continuation without a salt of its own inherits its
// parent's. Unsalted requests must not match salted blocks.
func TestSaltedEventsIndexUnderTheirNamespace(t *testing.T) {
	w := kvfleet.WorkerID{Endpoint: "e:1"}
	for _, fx := range []string{"array_salted_extra_keys", "map_salted_extra_keys"} {
		t.Run(fx, func(t *testing.T) {
			idx := newMem()
			wk := NewWorker(w, idx, Config{BlockSize: bs, Namespace: "configured"})
			applyFixture(t, wk, fx)
			toks := tokenRange(900, 3*bs)
			if d := held(t, idx, w, chainOf(toks, "", "tenant-a")); d[kvfleet.TierDevice] != 3 {
				t.Fatalf("tenant-a depths %v, want 3 (two salted blocks and the inheriting continuation)", d)
			}
			if d := held(t, idx, w, chainOf(toks, "", "configured")); d.Max() != 0 {
				t.Fatalf("unsalted depths %v: salted blocks must not match unsalted requests", d)
			}
			if d := held(t, idx, w, chainOf(toks[:bs], "sql-lora", "tenant-b")); d[kvfleet.TierDevice] != 1 {
				t.Fatalf("LoRA + salt depths %v, want 1 (salt found after the LoRA name and multimodal keys)", d)
			}
			if d := held(t, idx, w, chainOf(toks[:bs], "", "tenant-c")); d[kvfleet.TierDevice] != 1 {
				t.Fatalf("typed-salt depths %v, want 1", d)
			}
		})
	}
	// SGLang: position-7 metadata (0.5.18) and the named field (#37482).
	for _, fx := range []string{"array_sglang_salt_metadata", "map_sglang_cache_salt"} {
		t.Run(fx, func(t *testing.T) {
			idx := newMem()
			wk := NewWorker(w, idx, Config{BlockSize: 1})
			applyFixture(t, wk, fx)
			seq := chainOfBS(tokenRange(40, 2), 1, "", "tenant-s")
			want := 2
			if fx == "map_sglang_cache_salt" {
				want = 1 // the second block is removed in the same batch
			}
			if d := held(t, idx, w, seq); d[kvfleet.TierDevice] != want {
				t.Fatalf("depths %v, want %d", d, want)
			}
		})
	}
}

// REMOTE blocks are not the worker's (Dynamo drops them); LOCAL and
// unspecified are.
func TestNonLocalEventsAreDropped(t *testing.T) {
	w := kvfleet.WorkerID{Endpoint: "e:1"}
	idx := newMem()
	wk := NewWorker(w, idx, Config{BlockSize: bs})
	applyFixture(t, wk, "map_locality")
	if d := held(t, idx, w, chainOf(tokenRange(1, bs), "", "")); d[kvfleet.TierHost] != 1 {
		t.Fatalf("depths %v, want the LOCAL block on host", d)
	}
	s := wk.Stats()
	if s.Rejected[RejectNonLocal] != 2 || s.SequenceEntries != 1 {
		t.Fatalf("stats %+v: want the REMOTE store and removal dropped", s)
	}
}

// A hash announced twice on a tier leaves it with its second removal.
func TestAnnouncementsAreReferenceCounted(t *testing.T) {
	w := kvfleet.WorkerID{Endpoint: "e:1"}
	idx := newMem()
	wk := NewWorker(w, idx, Config{BlockSize: bs})
	toks := tokenRange(0, 2*bs)
	chain := chainOf(toks, "", "")
	// The offload tracker re-announces the shared first block with the
	// second chunk.
	apply(t, wk, batch(store([]uint64{1}, nil, toks[:bs], "CPU", ""), store([]uint64{1, 2}, nil, toks, "CPU", "")))
	apply(t, wk, batch(remove("CPU", 1)))
	if d := held(t, idx, w, chain); d[kvfleet.TierHost] != 2 {
		t.Fatalf("depths %v: one of two announcements withdrawn, the block is still there", d)
	}
	apply(t, wk, batch(remove("CPU", 1)))
	if d := held(t, idx, w, chain); d[kvfleet.TierHost] != 0 {
		t.Fatalf("depths %v: both announcements withdrawn, the block is gone", d)
	}
	apply(t, wk, batch(remove("CPU", 1, 2)))
	if s := wk.Stats(); s.EngineHashes != 0 || s.SequenceEntries != 0 || s.RemovedUnknown != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// llm-d-inference-sim writes parent 0 for "no parent".
func TestUnknownParentZeroStartsASequence(t *testing.T) {
	w := kvfleet.WorkerID{Endpoint: "e:1"}
	idx := newMem()
	wk := NewWorker(w, idx, Config{BlockSize: bs})
	applyFixture(t, wk, "array_parent_zero")
	if d := held(t, idx, w, chainOf(tokenRange(3, bs), "", "")); d[kvfleet.TierDevice] != 1 {
		t.Fatalf("depths %v", d)
	}
	// Any other unknown parent is still refused.
	apply(t, wk, batch(store([]uint64{9}, ptr(12345), tokenRange(0, bs), "GPU", "")))
	if s := wk.Stats(); s.Rejected[RejectUnknownParent] != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// An unusable event costs only itself.
func TestUnusableEventCostsOnlyItself(t *testing.T) {
	w := kvfleet.WorkerID{Endpoint: "e:1"}
	idx := newMem()
	wk := NewWorker(w, idx, Config{BlockSize: bs})
	bad := kvevents.Event{Kind: kvevents.BlockStored, Err: errTest}
	unknown := kvevents.Event{Err: kvevents.ErrUnknownEventType}
	apply(t, wk, batch(bad, unknown, store([]uint64{1}, nil, tokenRange(0, bs), "GPU", "")))
	s := wk.Stats()
	if s.Rejected[RejectMalformedEvent] != 1 || s.Rejected[RejectUnknownEventType] != 1 || s.SequenceEntries != 1 {
		t.Fatalf("stats %+v", s)
	}
}

var errTest = errors.New("field lora_name: want a string, got integer")

func chainOfBS(tokens []uint32, blockSize int, lora, ns string) []uint64 {
	seed := blockhash.Seed(lora, ns)
	return blockhash.SequenceHashes(blockhash.LocalHashes(tokens, blockSize, seed))
}
