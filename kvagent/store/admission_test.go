package store

import "testing"

func TestFrequencySketchCountsAndAges(t *testing.T) {
	f := newFrequencySketch(64)
	hot, cold := Key{"m", 1}, Key{"m", 2}
	for range 4 {
		f.add(hot)
	}
	f.add(cold)
	// Count-min never under-counts (no halving yet: 5 additions < 640).
	if f.estimate(hot) < 4 || f.estimate(cold) < 1 {
		t.Fatalf("estimates hot %d cold %d, want >= 4 and >= 1", f.estimate(hot), f.estimate(cold))
	}
	if f.estimate(Key{"m", 3}) > 1 {
		t.Fatalf("unseen key estimated %d", f.estimate(Key{"m", 3}))
	}
	// After resetAfter more additions every counter has been halved: old
	// popularity fades (4 → 2, 1 → 0 unless other keys collided).
	for i := range f.resetAfter {
		f.add(Key{"other", uint64(i)})
	}
	if got := f.estimate(hot); got >= 4 {
		t.Fatalf("hot estimate %d after a halving, want < 4", got)
	}
	if f.additions >= f.resetAfter {
		t.Fatalf("additions %d not reset below %d", f.additions, f.resetAfter)
	}
}
