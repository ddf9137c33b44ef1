package picker

import (
	"math"
	"testing"
)

func TestThroughputEstimator(t *testing.T) {
	e, err := NewThroughputEstimator(0.5, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if e.Rate() != 1000 || e.Samples() != 0 {
		t.Fatalf("prior: rate %v samples %d", e.Rate(), e.Samples())
	}
	if err := e.Observe(8000, 1); err != nil { // first sample replaces the prior
		t.Fatal(err)
	}
	if e.Rate() != 8000 {
		t.Errorf("after one sample rate %v, want 8000", e.Rate())
	}
	// tokens avg 0.5·8000+0.5·2000 = 5000; seconds avg 0.5·1+0.5·0.5 = 0.75
	if err := e.Observe(2000, 0.5); err != nil {
		t.Fatal(err)
	}
	if want := 5000 / 0.75; math.Abs(e.Rate()-want) > 1e-9 {
		t.Errorf("rate %v, want %v", e.Rate(), want)
	}
	// Converges to a steady rate.
	for range 100 {
		if err := e.Observe(3000, 0.1); err != nil {
			t.Fatal(err)
		}
	}
	if math.Abs(e.Rate()-30000) > 1e-6 {
		t.Errorf("steady rate %v, want 30000", e.Rate())
	}

	before := e.Rate()
	bad := []struct {
		tokens  int64
		seconds float64
	}{{0, 1}, {-5, 1}, {100, 0}, {100, -1}, {100, math.NaN()}, {100, math.Inf(1)}, {1 << 31, 1}, {100, 1e6}, {1 << 29, 1e-9}}
	for _, b := range bad {
		if err := e.Observe(b.tokens, b.seconds); err == nil {
			t.Errorf("sample (%d, %v) accepted", b.tokens, b.seconds)
		}
	}
	if e.Rate() != before || e.Samples() != 102 {
		t.Errorf("rejected samples changed the estimate: %v (was %v), %d samples", e.Rate(), before, e.Samples())
	}

	for _, a := range []float64{0, -0.1, 1.5, math.NaN()} {
		if _, err := NewThroughputEstimator(a, 0); err == nil {
			t.Errorf("alpha %v accepted", a)
		}
	}
	var zero ThroughputEstimator
	if zero.Rate() != 0 {
		t.Error("zero value should report unknown (0)")
	}
	if err := zero.Observe(100, 0.01); err != nil || zero.Rate() != 10000 {
		t.Errorf("zero value: err %v rate %v", err, zero.Rate())
	}
}
