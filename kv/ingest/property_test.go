package ingest

import (
	"math/rand/v2"
	"testing"

	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// A random stream of stores (with and without known parents, repeated and
// conflicting engine ids, several tiers), removals and clears is applied
// to a Worker and to a plain model of "which engine id holds which prefix
// on which tier, announced how many times" (vLLM's consumers must
// reference-count: a hash stored twice leaves with its second removal).
// The index must then hold exactly the model's (sequence, tier) pairs.
func TestRandomStreamMatchesModel(t *testing.T) {
	media := []string{"GPU", "CPU", "DISK", "SHARED"}
	var total Stats
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		idx := newMem()
		w := kvfleet.WorkerID{Endpoint: "e:1"}
		wk := NewWorker(w, idx, Config{BlockSize: bs, Namespace: "ns"})

		type key struct {
			eng  uint64
			tier kvfleet.Tier
		}
		type holding struct {
			seq uint64
			n   int // live announcements
		}
		held := map[key]holding{}       // model: (engine id, tier) -> sequence hash, count
		identity := map[uint64]uint64{} // model: engine id -> sequence hash (any tier)
		// Prefixes are token ranges; the sequence hash of the block that
		// ends prefix p of stream s is chainOf(...)[p-1].
		streams := [][]uint32{tokenRange(0, 8*bs), tokenRange(500, 8*bs), tokenRange(0, 8*bs)}
		loras := []string{"", "", "lora-b"} // stream 2 repeats stream 0's tokens under a LoRA
		chains := make([][]uint64, len(streams))
		for s := range streams {
			chains[s] = chainOf(streams[s], loras[s], "ns")
		}
		// Two ids per block; streams 0 and 2 share ids, so an id is sometimes
		// re-stored for another prefix (a conflict).
		// Ids start at 1: an unknown parent 0 means "no parent"
		// (llm-d-inference-sim's array encoding).
		engID := func(s, blk int) uint64 { return uint64(1 + s%2*100 + blk + rng.IntN(2)*1000) }

		for step := 0; step < 300; step++ {
			switch op := rng.IntN(10); {
			case op < 6: // store a run of blocks of a stream
				s := rng.IntN(len(streams))
				from := rng.IntN(8)
				to := from + 1 + rng.IntN(8-from)
				tier := kvfleet.Tier(rng.IntN(len(media)))
				var ev kvevents.Event
				hashes := make([]uint64, 0, to-from)
				for b := from; b < to; b++ {
					hashes = append(hashes, engID(s, b))
				}
				var parent *uint64
				if from > 0 {
					// The parent may be known or not; the model decides.
					parent = ptr(engID(s, from-1))
				}
				ev = store(hashes, parent, streams[s][from*bs:to*bs], media[tier], loras[s])
				parentOK := parent == nil
				if parent != nil {
					seq, ok := identity[*parent]
					parentOK = ok && seq == chains[s][from-1]
					if ok && !parentOK {
						// The parent id stands for another prefix; the
						// worker chains onto that, the model cannot.
						continue
					}
				}
				apply(t, wk, batch(ev))
				if !parentOK {
					continue // rejected: unknown parent
				}
				for i, h := range hashes {
					seq := chains[s][from+i]
					if old, ok := identity[h]; ok && old != seq {
						for k := range held {
							if k.eng == h {
								delete(held, k)
							}
						}
					}
					identity[h] = seq
					hd := held[key{h, tier}]
					hd.seq, hd.n = seq, hd.n+1
					held[key{h, tier}] = hd
				}
			case op < 9: // remove some engine ids from a tier
				tier := kvfleet.Tier(rng.IntN(len(media)))
				var hashes []uint64
				for n := rng.IntN(4) + 1; n > 0; n-- {
					hashes = append(hashes, engID(rng.IntN(len(streams)), rng.IntN(8)))
				}
				apply(t, wk, batch(remove(media[tier], hashes...)))
				for _, h := range hashes {
					if hd, ok := held[key{h, tier}]; ok && hd.n > 1 {
						hd.n--
						held[key{h, tier}] = hd
						continue
					}
					delete(held, key{h, tier})
					still := false
					for k := range held {
						still = still || k.eng == h
					}
					if !still {
						delete(identity, h)
					}
				}
			default:
				if rng.IntN(5) == 0 {
					apply(t, wk, batch(kvevents.Event{Kind: kvevents.AllBlocksCleared}))
					clear(held)
					clear(identity)
				}
			}
		}

		s := wk.Stats()
		total.HashConflicts += s.HashConflicts
		total.Rejected[RejectUnknownParent] += s.Rejected[RejectUnknownParent]
		total.RemovedUnknown += s.RemovedUnknown
		total.ClearedEvents += s.ClearedEvents

		want := map[uint64]uint8{} // sequence hash -> tier mask
		for k, hd := range held {
			want[hd.seq] |= 1 << k.tier
		}
		entries := 0
		for _, m := range want {
			for ; m != 0; m &= m - 1 {
				entries++
			}
		}
		st, _ := idx.Stats(ctx)
		if st.Entries != int64(entries) {
			t.Fatalf("seed %d: index holds %d entries, model %d", seed, st.Entries, entries)
		}
		if s := wk.Stats(); s.SequenceEntries != int64(entries) || s.EngineHashes != int64(len(identity)) {
			t.Fatalf("seed %d: stats %+v, model %d entries, %d engine ids", seed, s, entries, len(identity))
		}
		for seq, mask := range want {
			got := depths(t, idx, w, []uint64{seq})
			for tier := kvfleet.Tier(0); tier < kvfleet.NumTiers; tier++ {
				wantD := 0
				if mask&(1<<(tier+1)-1) != 0 {
					wantD = 1
				}
				if got[tier] != wantD {
					t.Fatalf("seed %d: seq %#x tier mask %04b, depths %v", seed, seq, mask, got)
				}
			}
		}
	}
	// The stream must have exercised the interesting paths.
	if total.HashConflicts == 0 || total.Rejected[RejectUnknownParent] == 0 || total.RemovedUnknown == 0 || total.ClearedEvents == 0 {
		t.Fatalf("random streams missed a path: %+v", total)
	}
	t.Logf("conflicts %d, unknown parents %d, unknown removals %d, clears %d",
		total.HashConflicts, total.Rejected[RejectUnknownParent], total.RemovedUnknown, total.ClearedEvents)
}
