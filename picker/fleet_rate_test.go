package picker

import (
	"slices"
	"testing"
)

// selectNth puts at k the value a sort puts there, with nothing greater
// before it and nothing smaller after it, on random, sorted, reversed and
// constant inputs, ties included; newFleetView's median is the sort's.
func TestSelectNthAsSort(t *testing.T) {
	rnd := seeded(31)
	for trial := range 3000 {
		n := 1 + rnd.IntN(70)
		v := make([]float64, n)
		for i := range v {
			switch trial % 4 {
			case 0:
				v[i] = float64(rnd.IntN(8)) // many ties
			case 1:
				v[i] = float64(i) // sorted
			case 2:
				v[i] = float64(n - i) // reversed
			default:
				v[i] = 1 + rnd.Float64()*1e5
			}
		}
		sorted := slices.Clone(v)
		slices.Sort(sorted)
		k := rnd.IntN(n)
		got := selectNth(v, k)
		if got != sorted[k] || v[k] != got {
			t.Fatalf("trial %d: selectNth(k=%d) = %v (v[k] %v), sort has %v", trial, k, got, v[k], sorted[k])
		}
		for i := range v {
			if (i < k && v[i] > got) || (i > k && v[i] < got) {
				t.Fatalf("trial %d: v[%d] = %v on the wrong side of v[%d] = %v", trial, i, v[i], k, got)
			}
		}
		want := sorted[n/2]
		if n%2 == 0 {
			want = (sorted[n/2-1] + sorted[n/2]) / 2
		}
		if f := newFleetView(slices.Clone(sorted), 1); f.fallback != want {
			t.Fatalf("trial %d: median %v, want %v", trial, f.fallback, want)
		}
		rnd.Shuffle(n, func(i, j int) { sorted[i], sorted[j] = sorted[j], sorted[i] })
		if f := newFleetView(sorted, 1); f.fallback != want {
			t.Fatalf("trial %d: median of shuffled %v, want %v", trial, f.fallback, want)
		}
	}
}
