package flowcontrol

import (
	"errors"
	"testing"
	"time"
)

// Admit refuses an arrival the queue ahead cannot drain for within its
// wait limit and changes nothing then; otherwise it queues the arrival
// (marking the drain rate's start), and on full bounds pushes out the
// heaviest flow's newest item for a lighter flow's arrival.
func TestAdmit(t *testing.T) {
	q := mustNew(t, Bounds{MaxRequests: 4, MaxBytes: 1 << 20})
	var d DrainRate
	for _, name := range []string{"noisy-1", "noisy-2", "noisy-3", "noisy-4"} {
		if pushed, err := Admit(q, &d, item(0, "noisy", time.Second, name)); err != nil || len(pushed) != 0 {
			t.Fatalf("admit %s: %v pushed, %v", name, pushed, err)
		}
	}
	// Queued marked t0: a dispatch 100 ms later teaches a 100 ms interval.
	d.Dispatched(t0.Add(100*time.Millisecond), q.Len())
	if it := q.Pop(); it == nil {
		t.Fatal("nothing to pop")
	}

	// Three ahead of a noisy arrival at 100 ms each: 400 ms, past a 350 ms limit.
	var u *ErrUnreachable
	if _, err := Admit(q, &d, item(0, "noisy", 350*time.Millisecond, "late")); !errors.As(err, &u) || u.Estimate != 400*time.Millisecond {
		t.Fatalf("an unreachable limit: %v, want ErrUnreachable of 400ms", err)
	}
	if q.Len() != 3 {
		t.Fatalf("%d waiting after a refusal, want 3: a refused arrival holds no place", q.Len())
	}

	// A quiet arrival (its turn comes next) fits its limit and fills the
	// bound; the next quiet one then pushes out the noisy flow's newest
	// (noisy holds two more waiting than quiet).
	if pushed, err := Admit(q, &d, item(0, "quiet", time.Second, "quiet-1")); err != nil || len(pushed) != 0 {
		t.Fatalf("quiet-1: %v pushed, %v", pushed, err)
	}
	pushed, err := Admit(q, &d, item(0, "quiet", time.Second, "quiet-2"))
	if err != nil || len(pushed) != 1 || pushed[0].Value != "noisy-4" {
		t.Fatalf("quiet-2 on a full queue: pushed %v, %v; want noisy-4 pushed out", pushed, err)
	}
}
