package collect

import (
	"math"
	"testing"
)

func TestQuantilePrometheusSemantics(t *testing.T) {
	inf := math.Inf(1)
	bs := []bucket{{0.1, 10}, {0.5, 60}, {1, 90}, {inf, 100}}
	cases := []struct{ q, want float64 }{
		// rank 5 in the first bucket: interpolated from 0: 0.1 × 5/10.
		{0.05, 0.05},
		// rank 50 in (0.1, 0.5]: 0.1 + 0.4 × (50−10)/(60−10) = 0.42.
		{0.5, 0.42},
		// rank 90 = the count at 1.0: the bucket's upper bound.
		{0.9, 1},
		// rank 95 falls in +Inf: the highest finite bound.
		{0.95, 1},
	}
	for _, c := range cases {
		if got := quantile(c.q, bs); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("q%v = %v, want %v", c.q, got, c.want)
		}
	}
	if !math.IsNaN(quantile(0.9, []bucket{{0.1, 0}, {inf, 0}})) {
		t.Error("empty histogram must be NaN")
	}
	if !math.IsNaN(quantile(0.9, []bucket{{0.1, 3}})) {
		t.Error("histogram without +Inf must be NaN")
	}
	// Non-monotonic counts (a jittery difference) are evened out.
	if got := quantile(0.5, []bucket{{1, 4}, {2, 3}, {inf, 8}}); math.IsNaN(got) || got < 1 {
		t.Errorf("non-monotonic: %v", got)
	}
}

func TestFractionBelow(t *testing.T) {
	inf := math.Inf(1)
	bs := []bucket{{0.1, 10}, {0.5, 60}, {1, 90}, {inf, 100}}
	cases := []struct{ x, want float64 }{
		{0.05, 0.05}, // 10 × 0.5 of the first bucket, of 100
		{0.42, 0.5},  // quantile's inverse: 10 + 50 × 0.32/0.4 = 50
		{1, 0.9},
		{5, 0.9}, // beyond the last finite bound: only what is known
		{0.1, 0.1},
	}
	for _, c := range cases {
		if got := fractionBelow(c.x, bs); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("fractionBelow(%v) = %v, want %v", c.x, got, c.want)
		}
	}
	if !math.IsNaN(fractionBelow(1, nil)) {
		t.Error("empty must be NaN")
	}
}

func TestP90BelowResolutionIsUnmeasured(t *testing.T) {
	inf := math.Inf(1)
	// All of 10 gaps under vLLM's lowest ITL bound (10 ms): unknowable.
	if v := p90([]bucket{{0.01, 10}, {0.025, 10}, {inf, 10}}); !math.IsNaN(v) {
		t.Errorf("got %v, want NaN", v)
	}
	// At the lowest bound exactly (rank 9 of 10 = its count): measured.
	if v := p90([]bucket{{0.01, 9}, {0.025, 10}, {inf, 10}}); v != 0.01 {
		t.Errorf("got %v, want 0.01", v)
	}
}
