package loadview

import (
	"math"
	"sync"
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

func TestThroughputKnowsOnlyObservedWorkers(t *testing.T) {
	tp := NewThroughput()
	a, b := kvfleet.WorkerID{Endpoint: "10.0.0.1:8000"}, kvfleet.WorkerID{Endpoint: "10.0.0.2:8000"}
	if _, ok := tp.Rate(a); ok {
		t.Fatal("a rate before any sample")
	}
	tp.Observe(a, 0, 1) // refused by the estimator: no tokens
	if _, ok := tp.Rate(a); ok {
		t.Fatal("a refused sample made a rate")
	}
	tp.Observe(a, 4000, 0.5)
	if r, ok := tp.Rate(a); !ok || math.Abs(r-8000) > 1e-9 {
		t.Fatalf("rate %v %v, want 8000 tokens/s", r, ok)
	}
	if _, ok := tp.Rate(b); ok {
		t.Fatal("b has a rate from a's sample")
	}
}

// Written at first bytes while every request reads it: run with -race.
func TestThroughputConcurrentUse(t *testing.T) {
	tp := NewThroughput()
	ws := []kvfleet.WorkerID{{Endpoint: "10.0.0.1:8000"}, {Endpoint: "10.0.0.2:8000", DPRank: 1}}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := ws[i%len(ws)]
			for range 200 {
				tp.Observe(w, 1000, 0.1)
				tp.Rate(ws[(i+1)%len(ws)])
			}
		}()
	}
	wg.Wait()
	for _, w := range ws {
		if r, ok := tp.Rate(w); !ok || math.Abs(r-10000) > 1e-6 {
			t.Errorf("%v: rate %v %v, want 10000 tokens/s", w, r, ok)
		}
	}
}
