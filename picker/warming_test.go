package picker

import "testing"

// A worker the caller's slow-start draw left out of this pick is not
// chosen, not even as a fallback, though it is idle and holds the prefix;
// the Terms say why.
func TestWarmingWorkerIsLeftOut(t *testing.T) {
	cands := []Candidate{cand(1, depth(8), Load{}), cand(2, depth(0), Load{InflightRequests: 3}), cand(3, depth(0), Load{InflightRequests: 4})}
	cands[0].Worker.Warming = true
	cfg := DefaultConfig()
	cfg.Fallbacks = 2
	d, err := Pick(req16(8), cands, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Primary == 0 || d.Terms[0].Eligible || d.Terms[0].Reason != ReasonWarming {
		t.Fatalf("primary %d, terms[0] %+v", d.Primary, d.Terms[0])
	}
	for _, f := range d.Fallbacks {
		if f == 0 {
			t.Fatalf("warming worker offered as a fallback: %v", d.Fallbacks)
		}
	}
	cands[0].Worker.Warming = false
	if d, err = Pick(req16(8), cands, cfg, nil); err != nil || d.Primary != 0 {
		t.Fatalf("not warming: primary %d (%v), want the idle prefix holder", d.Primary, err)
	}
}

// An ejected worker is excluded like an unhealthy one, and says so.
func TestEjectedWorkerIsExcluded(t *testing.T) {
	cands := []Candidate{cand(1, depth(8), Load{}), cand(2, depth(0), Load{InflightRequests: 3})}
	cands[0].Worker.Ejected = true
	cfg := DefaultConfig()
	cfg.Fallbacks = 1
	d, err := Pick(req16(8), cands, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Primary != 1 || len(d.Fallbacks) != 0 || d.Terms[0].Reason != ReasonEjected {
		t.Fatalf("primary %d fallbacks %v terms[0] %+v", d.Primary, d.Fallbacks, d.Terms[0])
	}
}
