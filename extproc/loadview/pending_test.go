package loadview

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

func newPending(t *testing.T) *Pending {
	t.Helper()
	p, err := NewPending(RecentConfig{TTL: PendingTTL, MaxEntries: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	wa = kvfleet.WorkerID{Endpoint: "a:8000"}
	wb = kvfleet.WorkerID{Endpoint: "b:8000"}
	wW = kvfleet.WorkerID{Endpoint: "w:8000"}
)

func dev(d kvfleet.Depths) int { return d[kvfleet.TierDevice] }

// merge runs p.Merge on a Match holding index (the index's answer) and
// returns the result.
func merge(p *Pending, index map[kvfleet.WorkerID]kvfleet.Depths, chain []uint64, now time.Time) *kvindex.Match {
	m := new(kvindex.Match)
	for w, d := range index {
		m.Add(w, d)
	}
	p.Merge(m, chain, now)
	return m
}

// at is w's depths in m (zero when absent).
func at(m *kvindex.Match, w kvfleet.WorkerID) kvfleet.Depths {
	d, _ := m.Lookup(w)
	return d
}

func TestPendingCreditsARoutedPrefixTheIndexHasNotSeen(t *testing.T) {
	p := newPending(t)
	now := time.Unix(1000, 0)
	p.Record(wa, []uint64{1, 2, 3, 4}, now)
	m := merge(p, nil, []uint64{1, 2, 3, 9}, now.Add(time.Second))
	if got := dev(at(m, wa)); got != 3 {
		t.Fatalf("pending depth of a = %d, want 3 (blocks 1,2,3 routed there)", got)
	}
	for tier, d := range at(m, wa) {
		if d != 3 {
			t.Fatalf("tier %d depth %d, want 3: a pending prefix counts on every tier", tier, d)
		}
	}
	if m.Len() != 1 {
		t.Fatalf("match %v, want only a", m.Map())
	}
}

func TestPendingContinuesWhereTheIndexDepthEnds(t *testing.T) {
	p := newPending(t)
	now := time.Unix(1000, 0)
	chain := []uint64{1, 2, 3, 4, 5}
	p.Record(wa, chain, now)
	// Events for the first two blocks arrived, with a host copy of three.
	m := merge(p, map[kvfleet.WorkerID]kvfleet.Depths{wa: {2, 3, 3, 3}, wb: {4, 4, 4, 4}}, chain, now)
	if got := at(m, wa); got != (kvfleet.Depths{5, 5, 5, 5}) {
		t.Fatalf("a = %v, want 5 on every tier (2 confirmed + 3 pending)", got)
	}
	if got := at(m, wb); got != (kvfleet.Depths{4, 4, 4, 4}) {
		t.Fatalf("b = %v, want its index depths unchanged", got)
	}
	// The two confirmed pairs are forgotten: the index owns them now.
	if got := p.Stats().Entries; got != 3 {
		t.Fatalf("entries after confirming 2 of 5 = %d, want 3", got)
	}
}

func TestPendingConfirmedPrefixFollowsTheIndexAfterwards(t *testing.T) {
	p := newPending(t)
	now := time.Unix(1000, 0)
	chain := []uint64{1, 2, 3}
	p.Record(wa, chain, now)
	m := merge(p, map[kvfleet.WorkerID]kvfleet.Depths{wa: {3, 3, 3, 3}}, chain, now)
	if dev(at(m, wa)) != 3 {
		t.Fatalf("a = %v, want 3", at(m, wa))
	}
	if got := p.Stats().Entries; got != 0 {
		t.Fatalf("entries after full confirmation = %d, want 0", got)
	}
	// The worker then evicted (or reset): the index no longer lists it, and
	// no stale credit remains although the TTL has not passed.
	m = merge(p, nil, chain, now.Add(time.Second))
	if _, ok := m.Lookup(wa); ok {
		t.Fatalf("a still credited after the index removed a confirmed prefix: %v", m.Map())
	}
}

func TestPendingExpiresAndForgetsWorkers(t *testing.T) {
	p := newPending(t)
	now := time.Unix(1000, 0)
	chain := []uint64{7, 8}
	p.Record(wa, chain, now)
	p.Record(wb, chain, now)
	if m := merge(p, nil, chain, now.Add(PendingTTL)); m.Len() != 0 {
		t.Fatalf("credits past the TTL: %v", m.Map())
	}
	p.Record(wa, chain, now.Add(time.Minute))
	p.Record(wb, chain, now.Add(time.Minute))
	p.ForgetWorker(wa)
	m := merge(p, nil, chain, now.Add(time.Minute+time.Second))
	if _, ok := m.Lookup(wa); ok || dev(at(m, wb)) != 2 {
		t.Fatalf("after forgetting a: %v, want only b at 2", m.Map())
	}
}

func TestPendingStaysWithinItsBound(t *testing.T) {
	p, err := NewPending(RecentConfig{TTL: PendingTTL, MaxEntries: 8})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	for i := range 100 {
		p.Record(wW, []uint64{uint64(3 * i), uint64(3*i + 1), uint64(3*i + 2)}, now)
	}
	if got := p.Stats().Entries; got > 8 {
		t.Fatalf("entries %d beyond the bound 8", got)
	}
	if m := merge(p, nil, []uint64{297, 298, 299}, now); dev(at(m, wW)) != 3 {
		t.Fatalf("latest prompt = %v, want 3 (most recent pairs kept)", m.Map())
	}
	if _, err := NewPending(RecentConfig{TTL: 0, MaxEntries: 8}); err == nil {
		t.Fatal("zero TTL accepted")
	}
}

func TestPendingEmptyChain(t *testing.T) {
	p := newPending(t)
	p.Record(wa, []uint64{1}, time.Unix(1, 0))
	if m := merge(p, nil, nil, time.Unix(1, 0)); m.Len() != 0 {
		t.Fatalf("empty chain match %v, want none", m.Map())
	}
}

// Merge against a model of its definition, with enough workers that the
// match's lookup by worker is indexed (more than 8 entries): random
// routed prefixes of a few shared chains, random index answers (some
// workers deeper on slower tiers, some absent), and the pairs the index
// confirms forgotten.
func TestPendingMergeMatchesModel(t *testing.T) {
	const workers, chains, chainLen = 40, 4, 12
	rng := rand.New(rand.NewPCG(3, 9))
	ids := make([]kvfleet.WorkerID, workers)
	for i := range ids {
		ids[i] = kvfleet.WorkerID{Endpoint: fmt.Sprintf("10.2.0.%d:8000", i)}
	}
	shared := make([][]uint64, chains)
	for c := range shared {
		shared[c] = make([]uint64, chainLen)
		for i := range shared[c] {
			shared[c][i] = uint64(c*1000 + i)
		}
	}
	type pair struct {
		h uint64
		w kvfleet.WorkerID
	}
	p, err := NewPending(RecentConfig{TTL: PendingTTL, MaxEntries: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	pending := map[pair]bool{} // the model: pairs credited (none expire: time stays within the TTL)
	now := time.Unix(1000, 0)
	indexed, merged := 0, 0
	for round := range 300 {
		for range 1 + rng.IntN(6) {
			w, c := ids[rng.IntN(workers)], shared[rng.IntN(chains)]
			n := 1 + rng.IntN(chainLen)
			p.Record(w, c[:n], now)
			for _, h := range c[:n] {
				pending[pair{h, w}] = true
			}
		}
		chain := shared[rng.IntN(chains)]
		index := map[kvfleet.WorkerID]kvfleet.Depths{}
		for _, w := range ids {
			if rng.IntN(3) == 0 {
				continue
			}
			dev := rng.IntN(chainLen + 1)
			host := min(chainLen, dev+rng.IntN(3))
			index[w] = kvfleet.Depths{dev, host, host, host}
		}
		// The model, as Merge's comment defines it.
		want := map[kvfleet.WorkerID]kvfleet.Depths{}
		run := func(w kvfleet.WorkerID, from int) int {
			d := from
			for d < len(chain) && pending[pair{chain[d], w}] {
				d++
			}
			return d
		}
		for w, d := range index {
			if end := run(w, d[kvfleet.TierDevice]); end > d[kvfleet.TierDevice] {
				for i := range d {
					d[i] = max(d[i], end)
				}
			}
			want[w] = d
		}
		for w, d := range index {
			for _, h := range chain[:d[kvfleet.TierDevice]] {
				delete(pending, pair{h, w})
			}
		}
		for _, w := range ids {
			if _, known := index[w]; !known && pending[pair{chain[0], w}] {
				want[w] = depthsOf(run(w, 0))
			}
		}
		got := merge(p, index, chain, now)
		if got.Len() != len(want) || !reflect.DeepEqual(got.Map(), want) {
			t.Fatalf("round %d: Merge = %v\nwant %v", round, got.Map(), want)
		}
		if e := p.Stats().Entries; e != len(pending) {
			t.Fatalf("round %d: %d pairs credited, model %d", round, e, len(pending))
		}
		if len(index) > 8 {
			indexed++
		}
		if len(want) > len(index) {
			merged++
		}
		now = now.Add(time.Millisecond)
	}
	if indexed < 250 || merged < 50 {
		t.Fatalf("coverage: %d rounds with an indexed lookup, %d adding pending-only workers", indexed, merged)
	}
}
