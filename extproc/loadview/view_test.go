package loadview

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

var (
	w1 = kvfleet.WorkerID{Endpoint: "10.0.0.1:8000"}
	w2 = kvfleet.WorkerID{Endpoint: "10.0.0.2:8000", DPRank: 1}
	t0 = time.Unix(1_700_000_000, 0)
)

// drained checks that the view holds nothing and its counters balance.
func drained(t *testing.T, v *View) {
	t.Helper()
	if all := v.SnapshotAll(); len(all) != 0 {
		t.Errorf("loads left over: %v", all)
	}
	for _, w := range []kvfleet.WorkerID{w1, w2} {
		if l := v.Snapshot(w); l != (picker.Load{}) {
			t.Errorf("%v: load left over %+v", w, l)
		}
	}
	s := v.Stats()
	var fin uint64
	for _, n := range s.Finished {
		fin += n
	}
	if s.Open != 0 || s.Workers != 0 || fin != s.Begun {
		t.Errorf("stats %+v: want nothing open and finished == begun", s)
	}
	if v.open.head != nil || v.open.tail != nil {
		t.Error("open-ticket list not empty")
	}
}

func TestTicketPaths(t *testing.T) {
	cases := []struct {
		name string
		run  func(v *View)
	}{
		{"begin, finish", func(v *View) {
			v.Begin(w1, 100, 7, t0).Finish(OutcomeCompleted)
		}},
		{"begin, prefill, finish", func(v *View) {
			tk := v.Begin(w1, 100, 7, t0)
			tk.PrefillDone()
			tk.Finish(OutcomeCompleted)
		}},
		{"double finish", func(v *View) {
			tk := v.Begin(w1, 100, 7, t0)
			tk.Finish(OutcomeCanceled)
			tk.Finish(OutcomeCompleted)
			tk.PrefillDone()
		}},
		{"double prefill", func(v *View) {
			tk := v.Begin(w1, 100, 7, t0)
			tk.PrefillDone()
			tk.PrefillDone()
			tk.Finish(OutcomeTimeout)
		}},
		{"finish without prefill", func(v *View) {
			v.Begin(w1, 100, 7, t0).Finish(OutcomeUpstreamError)
		}},
		{"unknown outcome still finishes", func(v *View) {
			v.Begin(w1, 100, 7, t0).Finish(Outcome(200))
		}},
		{"negative amounts clamp", func(v *View) {
			v.Begin(w1, -5, -1<<62, t0).Finish(OutcomeCompleted)
		}},
		{"nil ticket", func(v *View) {
			var tk *Ticket
			tk.PrefillDone()
			tk.Finish(OutcomeCompleted)
		}},
		{"interleaved on two workers", func(v *View) {
			a := v.Begin(w1, 10, 1, t0)
			b := v.Begin(w2, 20, 2, t0)
			c := v.Begin(w1, 30, 3, t0)
			b.PrefillDone()
			a.Finish(OutcomeCompleted)
			c.PrefillDone()
			b.Finish(OutcomeCompleted)
			c.Finish(OutcomeCompleted)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := New()
			tc.run(v)
			drained(t, v)
		})
	}
}

func TestLoadAccounting(t *testing.T) {
	v := New()
	a := v.Begin(w1, 100, 7, t0)
	b := v.Begin(w1, 50, 3, t0)
	if got, want := v.Snapshot(w1), (picker.Load{InflightRequests: 2, PrefillTokens: 150, DecodeBlocks: 10}); got != want {
		t.Fatalf("after two begins %+v, want %+v", got, want)
	}
	a.PrefillDone()
	if got, want := v.Snapshot(w1), (picker.Load{InflightRequests: 2, PrefillTokens: 50, DecodeBlocks: 10}); got != want {
		t.Fatalf("after prefill %+v, want %+v", got, want)
	}
	a.Finish(OutcomeCompleted)
	if got, want := v.Snapshot(w1), (picker.Load{InflightRequests: 1, PrefillTokens: 50, DecodeBlocks: 3}); got != want {
		t.Fatalf("after finish %+v, want %+v", got, want)
	}
	if got := v.Snapshot(w2); got != (picker.Load{}) {
		t.Fatalf("untouched worker %+v", got)
	}
	all := v.SnapshotAll()
	if len(all) != 1 || all[w1] != v.Snapshot(w1) {
		t.Fatalf("SnapshotAll %v", all)
	}
	b.Finish(OutcomeCanceled)
	s := v.Stats()
	if s.Begun != 2 || s.PrefillDone != 1 || s.Finished[OutcomeCompleted] != 1 || s.Finished[OutcomeCanceled] != 1 {
		t.Errorf("stats %+v", s)
	}
	drained(t, v)

	v.Begin(w2, -1, 1<<50, t0).Finish(OutcomeCompleted)
	if s := v.Stats(); s.ClampedInputs != 2 {
		t.Errorf("clamped %d, want 2", s.ClampedInputs)
	}
}

func TestSweep(t *testing.T) {
	v := New()
	old := v.Begin(w1, 100, 7, t0)
	oldPrefilled := v.Begin(w2, 100, 7, t0.Add(time.Second))
	oldPrefilled.PrefillDone()
	young := v.Begin(w1, 40, 2, t0.Add(50*time.Second))
	done := v.Begin(w1, 1, 1, t0)
	done.Finish(OutcomeCompleted)

	now := t0.Add(70 * time.Second)
	if n := v.Sweep(now, 60*time.Second); n != 2 {
		t.Fatalf("swept %d, want 2", n)
	}
	if got, want := v.Snapshot(w1), (picker.Load{InflightRequests: 1, PrefillTokens: 40, DecodeBlocks: 2}); got != want {
		t.Fatalf("after sweep w1 %+v, want %+v", got, want)
	}
	if n := v.Sweep(now, 60*time.Second); n != 0 {
		t.Fatalf("second sweep took %d more", n)
	}
	// Late calls on swept tickets are no-ops.
	old.PrefillDone()
	old.Finish(OutcomeCompleted)
	oldPrefilled.Finish(OutcomeCompleted)
	if s := v.Stats(); s.Finished[OutcomeSwept] != 2 || s.Finished[OutcomeCompleted] != 1 || s.Open != 1 {
		t.Fatalf("stats %+v", s)
	}
	young.Finish(OutcomeCompleted)
	drained(t, v)
}

// Run with -race: many goroutines open and close tickets on a few workers
// by every path, while others snapshot and sweep with a huge maxAge (so it
// only walks the list). Everything must return to zero.
func TestConcurrentTickets(t *testing.T) {
	v := New()
	workers := []kvfleet.WorkerID{w1, w2, {Endpoint: "10.0.0.3:8000"}}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 2000 {
				tk := v.Begin(workers[rnd.IntN(len(workers))], rnd.Int64N(5000), rnd.Int64N(100), t0.Add(time.Duration(i)))
				switch rnd.IntN(4) {
				case 0:
					tk.Finish(OutcomeCompleted)
				case 1:
					tk.PrefillDone()
					tk.Finish(OutcomeCompleted)
				case 2:
					tk.PrefillDone()
					wg.Add(1)
					go func() { defer wg.Done(); tk.Finish(OutcomeCanceled) }()
					tk.Finish(OutcomeCompleted)
				case 3:
					tk.Finish(OutcomeTimeout)
					tk.Finish(OutcomeTimeout)
				}
			}
		}()
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, l := range v.SnapshotAll() {
				if l.InflightRequests < 0 || l.PrefillTokens < 0 || l.DecodeBlocks < 0 {
					panic(fmt.Sprintf("negative load %+v", l))
				}
			}
			v.Sweep(t0, time.Hour)
			_ = v.Stats()
		}
	}()
	wg.Wait()
	close(stop)
	readers.Wait()
	if s := v.Stats(); s.Begun != 16*2000 {
		t.Fatalf("begun %d", s.Begun)
	}
	drained(t, v)
}

func BenchmarkTicket(b *testing.B) {
	v := New()
	b.ReportAllocs()
	for b.Loop() {
		tk := v.Begin(w1, 4096, 64, t0)
		tk.PrefillDone()
		tk.Finish(OutcomeCompleted)
	}
}
