package flowcontrol

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvgate/kvgate/picker"
)

var t0 = time.Unix(1_700_000_000, 0)

func item(prio int, flow string, deadline time.Duration, name string) *Item {
	return &Item{Priority: prio, Flow: flow, Bytes: 100, Deadline: t0.Add(deadline), Arrived: t0, Value: name}
}

func mustNew(t *testing.T, b Bounds) *Queue {
	t.Helper()
	q, err := New(b)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func drain(q *Queue) []string {
	var out []string
	for it := q.Pop(); it != nil; it = q.Pop() {
		out = append(out, it.Value.(string))
	}
	return out
}

func add(t *testing.T, q *Queue, items ...*Item) {
	t.Helper()
	for _, it := range items {
		if err := q.Add(it); err != nil {
			t.Fatal(err)
		}
	}
}

// Higher bands leave first, whatever their flows and deadlines.
func TestBandOrder(t *testing.T) {
	q := mustNew(t, Bounds{})
	add(t, q, item(-1, "a", time.Second, "sheddable"), item(0, "a", 5*time.Second, "standard"), item(10, "b", 9*time.Second, "critical"))
	if got, want := fmt.Sprint(drain(q)), "[critical standard sheddable]"; got != want {
		t.Fatalf("dispatch order %s, want %s", got, want)
	}
}

// A noisy flow with many waiting requests gets one turn in each round,
// like every other flow: the quiet flows' requests are not behind all of
// the noisy one's.
func TestFairnessAcrossFlows(t *testing.T) {
	q := mustNew(t, Bounds{})
	for i := range 5 {
		add(t, q, item(0, "noisy", time.Duration(i)*time.Millisecond, fmt.Sprintf("n%d", i)))
	}
	add(t, q, item(0, "quiet1", time.Hour, "q1a"), item(0, "quiet2", time.Hour, "q2a"), item(0, "quiet1", time.Hour, "q1b"))
	if got, want := fmt.Sprint(drain(q)), "[n0 q1a q2a n1 q1b n2 n3 n4]"; got != want {
		t.Fatalf("dispatch order %s, want %s", got, want)
	}
}

// A flow that arrives while others wait takes its turn after them.
func TestLateFlowWaitsItsTurn(t *testing.T) {
	q := mustNew(t, Bounds{})
	add(t, q, item(0, "a", 0, "a1"), item(0, "a", 0, "a2"), item(0, "b", 0, "b1"), item(0, "b", 0, "b2"))
	first := q.Pop().Value.(string) // a1: b's turn next
	add(t, q, item(0, "c", 0, "c1"))
	if got, want := fmt.Sprint(append([]string{first}, drain(q)...)), "[a1 b1 a2 c1 b2]"; got != want {
		t.Fatalf("dispatch order %s, want %s", got, want)
	}
}

// Inside a flow the earliest deadline leaves first; equal deadlines keep
// their arrival order.
func TestDeadlineOrderInsideFlow(t *testing.T) {
	q := mustNew(t, Bounds{})
	add(t, q, item(0, "a", 3*time.Second, "late"), item(0, "a", time.Second, "soon"), item(0, "a", 2*time.Second, "mid1"), item(0, "a", 2*time.Second, "mid2"))
	if got, want := fmt.Sprint(drain(q)), "[soon mid1 mid2 late]"; got != want {
		t.Fatalf("dispatch order %s, want %s", got, want)
	}
}

// The count and byte bounds refuse the item that would cross them, and
// say which; removing items makes room again.
func TestBounds(t *testing.T) {
	q := mustNew(t, Bounds{MaxRequests: 2, MaxBytes: 250})
	a, b := item(0, "a", 0, "a"), item(0, "b", 0, "b")
	add(t, q, a, b)
	err := q.Add(item(0, "c", 0, "c"))
	if f, ok := err.(*ErrFull); !ok || f.Reason != "max_requests" || !isFull(err) {
		t.Fatalf("third item: %v, want max_requests", err)
	}
	q.Remove(a)
	big := item(0, "c", 0, "big")
	big.Bytes = 151
	if err := q.Add(big); !isFull(err) || err.(*ErrFull).Reason != "max_bytes" {
		t.Fatalf("item over the byte bound: %v, want max_bytes", err)
	}
	big.Bytes = 150
	add(t, q, big)
	if q.Len() != 2 || q.Bytes() != 250 {
		t.Fatalf("len %d bytes %d, want 2 and 250", q.Len(), q.Bytes())
	}
	if _, err := New(Bounds{MaxRequests: -1}); err == nil {
		t.Fatal("negative bound accepted")
	}
}

// Remove and Expired leave nothing behind: an emptied queue has no band,
// no flow, no bytes, and orders new items as a fresh one would.
func TestRemoveAndExpireLeaveNothing(t *testing.T) {
	q := mustNew(t, Bounds{})
	a, b, c := item(0, "a", time.Second, "a"), item(5, "b", 3*time.Second, "b"), item(0, "c", 2*time.Second, "c")
	add(t, q, a, b, c)
	if d, ok := q.NextDeadline(); !ok || !d.Equal(t0.Add(time.Second)) {
		t.Fatalf("next deadline %v %v", d, ok)
	}
	if !q.Remove(c) || q.Remove(c) || c.Queued() {
		t.Fatal("Remove reported wrongly")
	}
	exp := q.Expired(t0.Add(2 * time.Second))
	if len(exp) != 1 || exp[0] != a || a.Queued() {
		t.Fatalf("expired %v, want only a", exp)
	}
	q.Remove(b)
	if q.Len() != 0 || q.Bytes() != 0 || len(q.bands) != 0 || q.Peek() != nil {
		t.Fatalf("queue not empty: len %d bytes %d bands %d", q.Len(), q.Bytes(), len(q.bands))
	}
	if _, ok := q.NextDeadline(); ok {
		t.Fatal("deadline of an empty queue")
	}
	add(t, q, item(0, "x", 0, "x1"), item(0, "y", 0, "y1"), item(0, "x", 0, "x2"))
	if got, want := fmt.Sprint(drain(q)), "[x1 y1 x2]"; got != want {
		t.Fatalf("after emptying: %s, want %s", got, want)
	}
}

// A worker is saturated at any bound that applies; engine bounds only with
// engine metrics; the pool only when every usable worker is.
func TestSaturation(t *testing.T) {
	s := Saturation{MaxQueuedPrefillTokens: 1000, MaxInflight: 4, MaxEngineWaiting: 5, MaxKVUsage: 0.8}
	for _, c := range []struct {
		load picker.Load
		want bool
	}{
		{picker.Load{PrefillTokens: 999, InflightRequests: 3}, false},
		{picker.Load{PrefillTokens: 1000}, true},
		{picker.Load{InflightRequests: 4}, true},
		{picker.Load{Waiting: 9, KVUsage: 0.99}, false}, // no engine metrics
		{picker.Load{HaveEngine: true, Waiting: 5}, true},
		{picker.Load{HaveEngine: true, KVUsage: 0.8}, true},
		{picker.Load{HaveEngine: true, Waiting: 4, KVUsage: 0.79}, false},
		// With engine metrics, queued prefill saturates only with a request
		// waiting behind it: one long prompt in prefill leaves room.
		{picker.Load{HaveEngine: true, PrefillTokens: 20000}, false},
		{picker.Load{HaveEngine: true, PrefillTokens: 20000, Waiting: 1}, true},
		{picker.Load{HaveEngine: true, PrefillTokens: 20000, InflightRequests: 1, Running: 1}, false},
		// Routed since the engine's last scrape: more in flight than it runs.
		{picker.Load{HaveEngine: true, PrefillTokens: 20000, InflightRequests: 2, Running: 1}, true},
	} {
		if got := s.WorkerSaturated(c.load); got != c.want {
			t.Errorf("%+v: saturated %v, want %v", c.load, got, c.want)
		}
	}
	full := picker.Load{InflightRequests: 4}
	cands := []picker.Candidate{{Load: full}, {Load: picker.Load{}, Worker: picker.Worker{Unhealthy: true}}}
	if !s.PoolSaturated(cands, false) {
		t.Error("an unhealthy idle worker counted as room")
	}
	cands = append(cands, picker.Candidate{})
	if s.PoolSaturated(cands, false) {
		t.Error("an idle usable worker not counted as room")
	}
	if s.PoolSaturated([]picker.Candidate{{Worker: picker.Worker{Draining: true}, Load: full}}, false) {
		t.Error("a pool with no usable worker reported saturated")
	}
	pd := []picker.Candidate{{Load: full, Worker: picker.Worker{Role: picker.RoleDecode}}, {Worker: picker.Worker{Role: picker.RolePrefill}}}
	if !s.PoolSaturated(pd, false) || s.PoolSaturated(pd, true) {
		t.Error("an idle prefill worker counts as room only with disaggregation on")
	}
	half := Saturation{MaxInflight: 4, PoolFraction: 0.5}
	idle := picker.Candidate{}
	busy := picker.Candidate{Load: full}
	if half.PoolSaturated([]picker.Candidate{busy, idle, idle}, false) || !half.PoolSaturated([]picker.Candidate{busy, idle}, false) ||
		!half.PoolSaturated([]picker.Candidate{busy, busy, idle}, false) {
		t.Error("pool fraction 0.5: saturated from half of the usable workers")
	}
	if (Saturation{PoolFraction: 1.5}).Validate() == nil {
		t.Error("pool fraction over 1 accepted")
	}
	if (Saturation{MaxKVUsage: 1.5}).Validate() == nil {
		t.Error("KV usage over 1 accepted")
	}
}

// isFull reports whether err is an ErrFull.
func isFull(err error) bool {
	var f *ErrFull
	return errors.As(err, &f)
}

// PopAt keeps arrival (deadline) order while the flow's head has used at
// most half of its wait, and serves the flow's newest first once it has
// used more (adaptive LIFO); the turn still passes across flows.
func TestPopAtAdaptiveLIFO(t *testing.T) {
	q := mustNew(t, Bounds{})
	at := func(flow string, arrived time.Duration, name string) *Item {
		return &Item{Flow: flow, Bytes: 1, Arrived: t0.Add(arrived), Deadline: t0.Add(arrived + time.Second), Value: name}
	}
	add(t, q, at("a", 0, "a0"), at("a", 100*time.Millisecond, "a1"), at("a", 200*time.Millisecond, "a2"), at("b", 300*time.Millisecond, "b0"), at("a", 400*time.Millisecond, "a3"))
	var got []string
	for _, now := range []time.Duration{400 * time.Millisecond, 600 * time.Millisecond, 700 * time.Millisecond, 700 * time.Millisecond} {
		got = append(got, q.PopAt(t0.Add(now)).Value.(string))
	}
	// At 400 ms a0 has waited 0.4 of its second: FIFO. At 600 ms b0 (its
	// flow's only item) leaves. At 700 ms a1, a's head, has waited 0.6:
	// a's newest, a3, leaves; then a2 (b's turn is empty, a again; a1
	// still past half).
	if want := "[a0 b0 a3 a2]"; fmt.Sprint(got) != want {
		t.Fatalf("PopAt order %v, want %s", got, want)
	}
	if it := q.PopAt(t0.Add(10 * time.Second)); it == nil || it.Value != "a1" || q.Len() != 0 || q.PopAt(t0) != nil {
		t.Fatalf("last %v, %d left", it, q.Len())
	}
}
