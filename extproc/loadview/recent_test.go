package loadview

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

func newRecent(t *testing.T, ttl time.Duration, max int) *Recent {
	t.Helper()
	r, err := NewRecent(RecentConfig{TTL: ttl, MaxEntries: max})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// match is r.Match into a buffer of its own.
func match(r *Recent, chain []uint64, now time.Time) *kvindex.Match {
	m := new(kvindex.Match)
	r.Match(chain, now, m)
	return m
}

func depthOf(m *kvindex.Match, w kvfleet.WorkerID) int {
	d, ok := m.Lookup(w)
	if !ok {
		return 0
	}
	for _, v := range d {
		if v != d[0] {
			panic("tiers differ in an approximate match")
		}
	}
	return d[0]
}

func TestRecentMatchAndTTL(t *testing.T) {
	r := newRecent(t, 120*time.Second, 1000)
	r.Record(w1, []uint64{1, 2, 3, 4}, t0)
	r.Record(w2, []uint64{1, 2, 9}, t0.Add(60*time.Second))

	m := match(r, []uint64{1, 2, 3, 4, 5}, t0.Add(61*time.Second))
	if m.Len() != 2 || depthOf(m, w1) != 4 || depthOf(m, w2) != 2 {
		t.Fatalf("match %v", m.Map())
	}
	if m := match(r, []uint64{7, 1, 2}, t0); m.Len() != 0 {
		t.Fatalf("chain not starting at a recorded block matched %v", m.Map())
	}
	if m := match(r, nil, t0); m.Len() != 0 {
		t.Fatalf("empty chain matched %v", m.Map())
	}
	// At exactly 120 s w1's blocks are gone; w2's live until 180 s.
	m = match(r, []uint64{1, 2, 3}, t0.Add(120*time.Second))
	if m.Len() != 1 || depthOf(m, w2) != 2 {
		t.Fatalf("after w1's TTL: %v", m.Map())
	}
	r.Expire(t0.Add(120 * time.Second))
	if s := r.Stats(); s.Entries != 3 || s.Expired != 4 || s.Recorded != 7 {
		t.Fatalf("stats %+v", s)
	}
	r.Expire(t0.Add(180 * time.Second))
	if s := r.Stats(); s.Entries != 0 || r.entries.n != 0 {
		t.Fatalf("after all TTLs: stats %+v, %d hashes", s, r.entries.n)
	}
}

func TestRecentRefreshExtendsTTL(t *testing.T) {
	r := newRecent(t, 10*time.Second, 1000)
	r.Record(w1, []uint64{1, 2}, t0)
	r.Record(w1, []uint64{1}, t0.Add(8*time.Second))
	r.Expire(t0.Add(12 * time.Second)) // block 2 expires, block 1 was refreshed
	m := match(r, []uint64{1, 2}, t0.Add(12*time.Second))
	if depthOf(m, w1) != 1 {
		t.Fatalf("match %v, want depth 1", m.Map())
	}
	if s := r.Stats(); s.Entries != 1 {
		t.Fatalf("stats %+v, want 1 entry", s)
	}
	r.Expire(t0.Add(18 * time.Second))
	if s := r.Stats(); s.Entries != 0 {
		t.Fatalf("stats %+v, want 0 entries", s)
	}
}

func TestRecentBound(t *testing.T) {
	const max = 64
	r := newRecent(t, time.Hour, max)
	for i := range 1000 {
		w := kvfleet.WorkerID{Endpoint: "w", DPRank: i % 3}
		r.Record(w, []uint64{uint64(i), uint64(i + 1), uint64(i + 2)}, t0.Add(time.Duration(i)*time.Millisecond))
		if s := r.Stats(); s.Entries > max || r.size > max {
			t.Fatalf("after %d records: %d entries, %d queued, bound %d", i, s.Entries, r.size, max)
		}
	}
	s := r.Stats()
	if s.Evicted == 0 || s.Entries == 0 || s.Recorded != 3000 {
		t.Fatalf("stats %+v", s)
	}
	// The newest prompt survives eviction.
	last := kvfleet.WorkerID{Endpoint: "w", DPRank: 999 % 3}
	if d := depthOf(match(r, []uint64{999, 1000, 1001}, t0.Add(time.Second)), last); d != 3 {
		t.Errorf("newest prompt depth %d, want 3", d)
	}
	// A chain longer than the bound keeps its leading blocks.
	long := make([]uint64, 5*max)
	for i := range long {
		long[i] = uint64(1_000_000 + i)
	}
	r.Record(w1, long, t0.Add(2*time.Second))
	if d := depthOf(match(r, long, t0.Add(2*time.Second)), w1); d != max {
		t.Errorf("long chain depth %d, want %d", d, max)
	}
}

func TestRecentForgetWorker(t *testing.T) {
	r := newRecent(t, time.Hour, 100)
	r.Record(w1, []uint64{1, 2, 3}, t0)
	r.Record(w2, []uint64{1, 2}, t0)
	r.ForgetWorker(w1)
	m := match(r, []uint64{1, 2, 3}, t0)
	if m.Len() != 1 || depthOf(m, w2) != 2 {
		t.Fatalf("match %v", m.Map())
	}
	if s := r.Stats(); s.Entries != 2 {
		t.Fatalf("stats %+v", s)
	}
	// Re-recording after forgetting, then draining the stale records, keeps
	// the count right.
	r.Record(w1, []uint64{1}, t0.Add(time.Minute))
	r.Expire(t0.Add(2 * time.Hour))
	if s := r.Stats(); s.Entries != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRecentConfig(t *testing.T) {
	for _, c := range []RecentConfig{{TTL: 0, MaxEntries: 10}, {TTL: time.Second, MaxEntries: 0}, {TTL: -time.Second, MaxEntries: 10}, {TTL: time.Second, MaxEntries: 1 << 27}} {
		if _, err := NewRecent(c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	if _, err := NewRecent(RecentConfig{TTL: 120 * time.Second, MaxEntries: DefaultRecentMaxEntries}); err != nil {
		t.Error(err)
	}
}

// Against a brute-force model (every record kept with its time, no bound):
// with a bound large enough never to evict, Match must agree exactly.
func TestRecentMatchesModel(t *testing.T) {
	const ttl = 30 * time.Second
	r := newRecent(t, ttl, 1<<16)
	type key struct {
		h uint64
		w kvfleet.WorkerID
	}
	model := map[key]time.Time{}
	workers := []kvfleet.WorkerID{w1, w2, {Endpoint: "10.0.0.3:8000"}}
	rnd := rand.New(rand.NewPCG(3, 4))
	now := t0
	prefixes := [][]uint64{}
	for range 50 {
		p := make([]uint64, 1+rnd.IntN(20))
		for i := range p {
			p[i] = rnd.Uint64N(200)
		}
		prefixes = append(prefixes, p)
	}
	for step := range 3000 {
		now = now.Add(time.Duration(rnd.IntN(200)) * time.Millisecond)
		p := prefixes[rnd.IntN(len(prefixes))]
		chain := p[:1+rnd.IntN(len(p))]
		if rnd.IntN(2) == 0 {
			w := workers[rnd.IntN(len(workers))]
			r.Record(w, chain, now)
			for _, h := range chain {
				model[key{h, w}] = now
			}
			continue
		}
		got := match(r, chain, now)
		for _, w := range workers {
			want := 0
			for _, h := range chain {
				at, ok := model[key{h, w}]
				if !ok || !now.Before(at.Add(ttl)) {
					break
				}
				want++
			}
			if d := depthOf(got, w); d != want {
				t.Fatalf("step %d worker %v: depth %d, model %d", step, w, d, want)
			}
		}
	}
}

func BenchmarkRecent(b *testing.B) {
	r, _ := NewRecent(RecentConfig{TTL: 120 * time.Second, MaxEntries: DefaultRecentMaxEntries})
	chain := make([]uint64, 64)
	for i := range chain {
		chain[i] = uint64(i * 7919)
	}
	workers := []kvfleet.WorkerID{w1, w2, {Endpoint: "10.0.0.3:8000"}, {Endpoint: "10.0.0.4:8000"}}
	for i, w := range workers {
		r.Record(w, chain[:16*(i+1)], t0)
	}
	b.Run("match64", func(b *testing.B) {
		b.ReportAllocs()
		var m kvindex.Match
		for b.Loop() {
			r.Match(chain, t0, &m)
		}
	})
	b.Run("record64", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			r.Record(workers[i%4], chain, t0.Add(time.Duration(i)))
		}
	})
}
