package loadview

import (
	"math/rand/v2"
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// The table against a map, through 40,000 random inserts and deletions of
// 300 keys: at up to half full, probe runs collide, chain and wrap past
// the table's end, so backward-shift deletion is exercised in every case.
// Every key the map holds must be found with its value, and no other.
func TestBlockSetsMatchesMap(t *testing.T) {
	for _, seed := range []uint64{0, 1, 0xdeadbeef} {
		rnd := rand.New(rand.NewPCG(seed, 9))
		tab := blockSets{seed: seed}
		model := map[uint64]uint64{} // key → the holder seq stored
		var seq uint64
		for step := range 40000 {
			key := rnd.Uint64N(300) * 0x9e3779b97f4a7c15 // 300 keys, grown to 1,024 slots
			if rnd.IntN(3) == 0 {
				if i := tab.find(key); i >= 0 {
					tab.removeAt(i)
				}
				delete(model, key)
			} else {
				seq++
				i := tab.slot(key)
				tab.slots[i].set = holderSet{head: holder{w: kvfleet.WorkerID{Endpoint: "w"}, seq: seq}}
				model[key] = seq
			}
			if step%97 != 0 {
				continue
			}
			if tab.n != len(model) {
				t.Fatalf("step %d: %d keys, model %d", step, tab.n, len(model))
			}
			occupied := 0
			for i := range tab.slots {
				if s := &tab.slots[i]; s.set.len() > 0 {
					occupied++
					if model[s.key] != s.set.head.seq {
						t.Fatalf("step %d: slot %d holds key %x seq %d, model %d", step, i, s.key, s.set.head.seq, model[s.key])
					}
				}
			}
			if occupied != len(model) {
				t.Fatalf("step %d: %d occupied slots, model %d", step, occupied, len(model))
			}
			for k, v := range model {
				if hs := tab.get(k); hs.head.seq != v {
					t.Fatalf("step %d: key %x seq %d, model %d", step, k, hs.head.seq, v)
				}
			}
		}
	}
}

// ForgetWorker collects keys before dropping (a drop moves slots): every
// pair of the worker goes, every pair of others stays.
func TestRecentForgetWorkerAmongManyKeys(t *testing.T) {
	r := newRecent(t, 120e9, 1<<16)
	chain := make([]uint64, 3000)
	for i := range chain {
		chain[i] = uint64(i)
	}
	r.Record(w1, chain, t0)
	r.Record(w2, chain[:1000], t0)
	r.ForgetWorker(w1)
	if s := r.Stats(); s.Entries != 1000 || r.entries.n != 1000 {
		t.Fatalf("after forgetting w1: stats %+v, %d keys, want 1000 of w2", s, r.entries.n)
	}
	m := match(r, chain, t0)
	if m.Len() != 1 || depthOf(m, w2) != 1000 {
		t.Fatalf("after forgetting w1: match %v", m.Map())
	}
}
