package flowcontrol

import (
	"testing"
	"time"
)

// The drain rate is learnt from dispatches while items wait: none seen,
// no estimate; idle gaps do not count; later intervals move the mean by
// an eighth of their difference.
func TestDrainRate(t *testing.T) {
	var d DrainRate
	if _, ok := d.Wait(10); ok {
		t.Fatal("an estimate before any dispatch")
	}
	d.Dispatched(t0, 0) // the fast path's first: nothing was waiting
	if _, ok := d.Wait(1); ok {
		t.Fatal("an estimate from a dispatch nobody waited for")
	}
	d.Queued(t0.Add(time.Hour)) // an idle hour, then one waits 100 ms
	d.Queued(t0.Add(time.Hour + 50*time.Millisecond))
	d.Dispatched(t0.Add(time.Hour+100*time.Millisecond), 1)
	if w, ok := d.Wait(2); !ok || w != 300*time.Millisecond {
		t.Fatalf("after one 100 ms interval: Wait(2) = %v %v, want 300ms", w, ok)
	}
	d.Dispatched(t0.Add(time.Hour+900*time.Millisecond), 0) // an 800 ms interval
	if w, _ := d.Wait(1); w != 2*(100*time.Millisecond+(700*time.Millisecond)/8) {
		t.Fatalf("mean after 100 and 800 ms: %v, want 2 × 187.5ms", w)
	}
	if _, ok := d.Wait(0); ok {
		t.Fatal("an estimate for the head of the queue")
	}
	d.Queued(t0.Add(2 * time.Hour))
	d.Emptied() // it left by its deadline: the next arrival's gap starts anew
	d.Queued(t0.Add(3 * time.Hour))
	d.Dispatched(t0.Add(3*time.Hour+187500*time.Microsecond), 0)
	if w, _ := d.Wait(1); w != 375*time.Millisecond {
		t.Fatalf("Wait(1) %v, want unchanged 2 × 187.5ms", w)
	}
}
