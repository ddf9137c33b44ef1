package flowcontrol

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func names(items []*Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Value.(string))
	}
	return out
}

// A full queue makes room for a light flow's arrival by pushing out the
// heaviest flow's newest request; an arrival from the heaviest flow, or
// from a flow as heavy as the others, is refused instead, and nothing
// changes.
func TestPushOutHeaviestFlowsNewest(t *testing.T) {
	q := mustNew(t, Bounds{MaxRequests: 4})
	add(t, q, item(0, "noisy", time.Second, "n1"), item(0, "noisy", time.Second, "n2"), item(0, "noisy", time.Second, "n3"), item(0, "quiet", time.Second, "q1"))
	pushed, err := q.AddPushingOut(item(0, "quiet", time.Second, "q2"))
	if err != nil || fmt.Sprint(names(pushed)) != "[n3]" {
		t.Fatalf("quiet arrival into a full queue: pushed %v, err %v; want [n3]", names(pushed), err)
	}
	if q.Len() != 4 || q.FlowLen("noisy") != 2 || q.FlowLen("quiet") != 2 {
		t.Fatalf("after the push-out: %d waiting, noisy %d, quiet %d", q.Len(), q.FlowLen("noisy"), q.FlowLen("quiet"))
	}
	// Now equal: neither pushes the other out.
	for _, it := range []*Item{item(0, "quiet", time.Second, "q3"), item(0, "noisy", time.Second, "n4")} {
		pushed, err := q.AddPushingOut(it)
		var full *ErrFull
		if !errors.As(err, &full) || full.Reason != "max_requests" || len(pushed) != 0 {
			t.Fatalf("%s into a queue of equal flows: pushed %v, err %v; want refused (max_requests)", it.Value, names(pushed), err)
		}
	}
	if got, want := fmt.Sprint(drain(q)), "[n1 q1 n2 q2]"; got != want {
		t.Fatalf("what is left, in dispatch order: %s, want %s", got, want)
	}
}

// A higher band's arrival pushes out a lower band's request, the lowest
// band first and there the heaviest flow's newest, whatever its own flow
// holds; a lower band's arrival never pushes out a higher band's.
func TestPushOutLowerBandsFirst(t *testing.T) {
	q := mustNew(t, Bounds{MaxRequests: 4})
	add(t, q, item(0, "c", time.Second, "c0"), item(-1, "a", time.Second, "a-1"), item(-1, "b", time.Second, "b-1"), item(-1, "b", 2*time.Second, "b-1'"))
	pushed, err := q.AddPushingOut(item(5, "b", time.Second, "b5"))
	if err != nil || fmt.Sprint(names(pushed)) != "[b-1']" {
		t.Fatalf("high-band arrival: pushed %v, err %v; want [b-1']", names(pushed), err)
	}
	if _, err := q.AddPushingOut(item(-2, "c", time.Second, "c-2")); err == nil {
		t.Fatal("a lower band's arrival pushed a higher band's request out")
	}
	if got, want := fmt.Sprint(drain(q)), "[b5 c0 a-1 b-1]"; got != want {
		t.Fatalf("dispatch order %s, want %s", got, want)
	}
}

// The byte bound may take several victims; when even all allowed victims
// would not make room the arrival is refused and nothing is pushed out.
func TestPushOutForBytes(t *testing.T) {
	q := mustNew(t, Bounds{MaxBytes: 500})
	for i := range 5 {
		add(t, q, item(0, "noisy", time.Second, fmt.Sprintf("n%d", i)))
	}
	big := item(0, "quiet", time.Second, "big")
	big.Bytes = 250
	pushed, err := q.AddPushingOut(big)
	if err != nil || fmt.Sprint(names(pushed)) != "[n4 n3 n2]" {
		t.Fatalf("pushed %v, err %v; want [n4 n3 n2]", names(pushed), err)
	}
	if q.Bytes() != 450 {
		t.Fatalf("bytes %d, want 450", q.Bytes())
	}
	huge := item(0, "other", time.Second, "huge")
	huge.Bytes = 480
	if pushed, err := q.AddPushingOut(huge); err == nil || len(pushed) != 0 || q.Len() != 3 {
		t.Fatalf("an arrival that cannot fit: pushed %v, err %v, %d left", names(pushed), err, q.Len())
	}
}

// Ahead counts, for round robin across flows, the items that leave before
// a new one: all of the higher bands, one more than the flow holds from
// each other flow of its band, all of its own flow's, none of lower bands.
func TestAhead(t *testing.T) {
	q := mustNew(t, Bounds{})
	for i := range 6 {
		add(t, q, item(0, "noisy", time.Second, fmt.Sprintf("n%d", i)))
	}
	add(t, q, item(0, "quiet", time.Second, "q0"), item(3, "x", time.Second, "hi"), item(-1, "y", time.Second, "lo"))
	for _, tc := range []struct {
		prio int
		flow string
		want int
	}{
		{0, "new", 1 + 1 + 1},   // hi, then one turn each of noisy and quiet
		{0, "quiet", 1 + 1 + 2}, // hi, quiet's own, then noisy's turns up to quiet's second
		{0, "noisy", 1 + 6 + 1}, // hi, all of noisy's, quiet's one
		{3, "z", 1},             // only hi's band counts
		{-1, "y", 1 + 7 + 1},    // every higher band, and its own
		{9, "any", 0},
	} {
		if got := q.Ahead(tc.prio, tc.flow); got != tc.want {
			t.Errorf("Ahead(%d, %q) = %d, want %d", tc.prio, tc.flow, got, tc.want)
		}
	}
	// It is what Pop does: a new quiet item leaves after 4.
	add(t, q, item(0, "quiet", time.Second, "q1"))
	order := drain(q)
	for i, n := range order {
		if n == "q1" && i != 4 {
			t.Fatalf("q1 left %d-th (%v), Ahead said 4", i, order)
		}
	}
}
