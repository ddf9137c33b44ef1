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
				tab.slots[i].set = holderSet{head: holder{w: 7, seq: seq}}
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

// A worker's number goes back once its last queue record leaves, and the
// next new worker takes it: the new worker's pairs must not read as the old
// one's, and the table holds only workers with records in the queue.
func TestRecentReusesWorkerNumbers(t *testing.T) {
	r := newRecent(t, 10e9, 1<<16)
	chain := []uint64{1, 2, 3}
	r.Record(w1, chain, t0)
	r.Expire(t0.Add(11e9)) // w1's records leave; its number is free
	if len(r.workers.ids) != 0 || len(r.workers.free) != 1 {
		t.Fatalf("after w1 expired: %d numbered, %d free", len(r.workers.ids), len(r.workers.free))
	}
	r.Record(w2, chain[:2], t0.Add(12e9)) // takes w1's old number
	m := match(r, chain, t0.Add(12e9))
	if m.Len() != 1 || depthOf(m, w2) != 2 || depthOf(m, w1) != 0 {
		t.Fatalf("after w2 took w1's number: match %v", m.Map())
	}
	// A thousand workers, each recording and expiring in turn: the table
	// stays at the workers with records in the queue.
	now := t0.Add(12e9)
	for i := range 1000 {
		now = now.Add(1e9)
		r.Record(kvfleet.WorkerID{Endpoint: "10.9.0.1:8000", DPRank: i}, chain, now)
	}
	if n := len(r.workers.byID); n > 12 {
		t.Fatalf("1,000 workers with a 10 s TTL, one a second: %d numbers, want at most 12", n)
	}
	m = match(r, chain, now)
	last := kvfleet.WorkerID{Endpoint: "10.9.0.1:8000", DPRank: 999}
	if m.Len() != 10 || depthOf(m, last) != 3 {
		t.Fatalf("after the churn: match %v", m.Map())
	}
}

// Evictions at a small bound with workers coming and going, against a
// model that replays the same bound: every block's holders agree.
func TestRecentEvictionAndChurnMatchModel(t *testing.T) {
	const max = 64
	r := newRecent(t, 1e12, max)
	type pair struct {
		h uint64
		w kvfleet.WorkerID
	}
	var queue []pair // the model: pairs recorded and not forgotten, in record order
	rnd := rand.New(rand.NewPCG(8, 1))
	for step := range 5000 {
		w := kvfleet.WorkerID{Endpoint: "10.8.0.1:8000", DPRank: rnd.IntN(40)}
		if rnd.IntN(10) == 0 {
			r.ForgetWorker(w)
			kept := queue[:0]
			for _, p := range queue {
				if p.w != w {
					kept = append(kept, p)
				}
			}
			queue = kept
			continue
		}
		chain := make([]uint64, 1+rnd.IntN(6))
		for i := range chain {
			chain[i] = rnd.Uint64N(50)
		}
		r.Record(w, chain, t0)
		for _, h := range chain {
			for i, p := range queue {
				if p == (pair{h, w}) {
					queue = append(queue[:i], queue[i+1:]...)
					break
				}
			}
			queue = append(queue, pair{h, w})
		}
		// The ring holds max records, stale ones included: the model does
		// not say which pairs an eviction drops, so it checks that every
		// pair Recent holds (its worker read back through the numbers) is
		// one the model has, and the count against the bound.
		held := map[pair]bool{}
		for _, p := range queue {
			held[p] = true
		}
		n := 0
		for i := range r.entries.slots {
			s := &r.entries.slots[i]
			for k := range s.set.len() {
				p := pair{s.key, r.workers.worker(s.set.at(k).w)}
				if !held[p] {
					t.Fatalf("step %d: Recent holds %v, which the model forgot", step, p)
				}
				n++
			}
		}
		if n != r.Stats().Entries || n > max {
			t.Fatalf("step %d: %d pairs in the table, stats %d, bound %d", step, n, r.Stats().Entries, max)
		}
		if len(r.workers.ids) > 40 {
			t.Fatalf("step %d: %d numbered workers of 40", step, len(r.workers.ids))
		}
	}
}
