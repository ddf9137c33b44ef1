package picker

import (
	"errors"
	"testing"
)

// Envoy's panic threshold (load_balancer_impl.cc isHostSetInPanic): below
// HealthyPanicThreshold percent healthy, the pick chooses among every
// worker that can serve the stage, health ignored; at or above it the
// unhealthy stay out. Draining workers are neither counted nor chosen.
func TestHealthyPanic(t *testing.T) {
	four := func() []Candidate {
		return []Candidate{cand(0, depth(8), Load{}), cand(1, depth(0), Load{}), cand(2, depth(0), Load{}), cand(3, depth(0), Load{})}
	}
	cases := []struct {
		name      string
		mut       func([]Candidate)
		threshold float64
		panic     bool
		healthy   int
		hosts     int
		primary   int // -1: ErrNoEligible
	}{
		{"all healthy", func([]Candidate) {}, 50, false, 4, 4, 0},
		{"half healthy is not panic", func(c []Candidate) { c[0].Worker.Unhealthy, c[1].Worker.Ejected = true, true }, 50, false, 2, 4, 2},
		{"one of four healthy", func(c []Candidate) {
			c[0].Worker.Unhealthy, c[1].Worker.Ejected, c[2].Worker.Unhealthy = true, true, true
		}, 50, true, 1, 4, 0},
		{"every worker unhealthy", func(c []Candidate) {
			for i := range c {
				c[i].Worker.Unhealthy = true
			}
		}, 50, true, 0, 4, 0},
		{"every worker ejected or slow-starting", func(c []Candidate) {
			c[0].Worker.Ejected, c[1].Worker.Ejected, c[2].Worker.Ejected, c[3].Worker.Ejected = true, true, true, true
			c[0].Worker.Warming = true
		}, 50, true, 0, 4, 0},
		{"disabled", func(c []Candidate) {
			for i := range c {
				c[i].Worker.Unhealthy = true
			}
		}, 0, false, 0, 4, -1},
		{"draining leaves the count and the pick", func(c []Candidate) {
			c[0].Worker.Draining = true
			c[1].Worker.Unhealthy, c[2].Worker.Unhealthy, c[3].Worker.Unhealthy = true, true, true
		}, 50, true, 0, 3, 1},
		{"every worker draining", func(c []Candidate) {
			for i := range c {
				c[i].Worker.Draining = true
			}
		}, 50, false, 0, 0, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cands := four()
			tc.mut(cands)
			cfg := DefaultConfig()
			cfg.HealthyPanicThreshold = tc.threshold
			d, err := Pick(req16(8), cands, cfg, nil)
			if d.Panic != tc.panic || d.Healthy != tc.healthy || d.Hosts != tc.hosts {
				t.Fatalf("panic %v healthy %d of %d, want %v %d of %d", d.Panic, d.Healthy, d.Hosts, tc.panic, tc.healthy, tc.hosts)
			}
			if tc.primary < 0 {
				if !errors.Is(err, ErrNoEligible) {
					t.Fatalf("err %v, want ErrNoEligible", err)
				}
				return
			}
			if err != nil || d.Primary != tc.primary {
				t.Fatalf("primary %d (%v), want %d", d.Primary, err, tc.primary)
			}
		})
	}
	bad := DefaultConfig()
	bad.HealthyPanicThreshold = 101
	if bad.Validate() == nil {
		t.Error("a threshold of 101 % validated")
	}
}
