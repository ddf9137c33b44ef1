package picker

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// randomPick is a random request, fleet and configuration (either policy,
// random weights, some terms switched off), picked.
func randomPick(t *testing.T, rnd interface {
	IntN(int) int
	Int64N(int64) int64
	Float64() float64
}) (Config, Decision) {
	t.Helper()
	cfg, d, _, _ := randomPickWith(t, rnd)
	return cfg, d
}

// randomPickWith is randomPick that also returns the request and the
// candidates.
func randomPickWith(t *testing.T, rnd interface {
	IntN(int) int
	Int64N(int64) int64
	Float64() float64
}) (Config, Decision, Request, []Candidate) {
	t.Helper()
	blocks := rnd.IntN(64)
	req := Request{PromptTokens: blocks*16 + rnd.IntN(16), BlockSize: 16, Blocks: blocks,
		ExpectedOutputTokens: rnd.IntN(2000), Stage: Stage(rnd.IntN(3))}
	cfg := DefaultConfig()
	if rnd.IntN(2) == 0 {
		cfg.Policy = PolicyKvgate
	}
	cfg.Kvgate.ThroughputAware = rnd.IntN(2) == 0
	cfg.Kvgate.HerdTieBlocks = float64(rnd.IntN(4))
	for id := range NumTerms {
		cfg.TermsOff[id] = rnd.IntN(4) == 0
		if !termTable[id].FixedWeight {
			if err := cfg.SetTermWeight(id, float64(rnd.IntN(40))/4); err != nil {
				t.Fatal(err)
			}
		}
	}
	var cands []Candidate
	for i := range 1 + rnd.IntN(12) {
		var d kvfleet.Depths
		v := 0
		for tier := range kvfleet.NumTiers {
			v += rnd.IntN(blocks/2 + 1)
			d[tier] = v
		}
		cands = append(cands, cand(i, d, Load{
			InflightRequests: rnd.IntN(20), PrefillTokens: rnd.Int64N(10000), DecodeBlocks: rnd.Int64N(5000),
			PrefillTokensPerSec: float64(rnd.IntN(3)) * 10000 * rnd.Float64(), KVCapacityBlocks: rnd.Int64N(3) * 2000,
			HaveEngine: rnd.IntN(2) == 0, Waiting: rnd.IntN(9), Running: rnd.IntN(9), KVUsage: rnd.Float64(),
		}))
		cands[i].Worker.Draining = rnd.IntN(8) == 0
	}
	d, err := Pick(req, cands, cfg, nil)
	if err != nil && err != ErrNoEligible {
		t.Fatal(err)
	}
	return cfg, d, req, cands
}

// The cost is exactly the sum of the listed terms' columns, in the list's
// order; a term switched off, or outside the policy, has a zero column.
func TestCostIsTheSumOfTheListedTerms(t *testing.T) {
	rnd := seeded(28)
	nonZero := map[TermID]int{}
	for range 2000 {
		cfg, d := randomPick(t, rnd)
		for i, tm := range d.Terms {
			sum := 0.0
			for id := range NumTerms {
				sum += tm.Parts[id]
				if tm.Parts[id] != 0 {
					nonZero[id]++
					if !cfg.TermEnabled(id) {
						t.Fatalf("candidate %d: term %s is off under %s (off=%v) but its column is %v", i, id, cfg.Policy, cfg.TermsOff, tm.Parts[id])
					}
				}
			}
			if sum != tm.Cost {
				t.Fatalf("candidate %d: terms %v sum to %v, cost %v", i, tm.Parts, sum, tm.Cost)
			}
		}
	}
	// Every term was exercised, or the sums above prove little.
	for id := range NumTerms {
		if nonZero[id] == 0 {
			t.Errorf("term %s never had a non-zero column", id)
		}
	}
}

// Switching a term off is the same pick as weighing it 0 (not for
// prefill: its weight, prefill_load_scale, also scales the recompute term,
// as Dynamo's scale does every prefill block).
func TestTermOffEqualsWeightZero(t *testing.T) {
	cands := []Candidate{
		cand(1, depth(8), Load{InflightRequests: 6, PrefillTokens: 4000, DecodeBlocks: 50}),
		cand(2, depth(0), Load{InflightRequests: 1, DecodeBlocks: 10}),
	}
	for _, id := range []TermID{TermRequests, TermHerd, TermRecompute} {
		off := kvgateConfig(nil)
		off.ActiveRequestWeight = 1
		zero := off
		off.TermsOff[id] = true
		if err := zero.SetTermWeight(id, 0); err != nil {
			t.Fatal(err)
		}
		a, err1 := Pick(req16(10), cands, off, nil)
		b, err2 := Pick(req16(10), cands, zero, nil)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		for i := range cands {
			if a.Terms[i] != b.Terms[i] {
				t.Errorf("%s off %+v, weight 0 %+v", id, a.Terms[i], b.Terms[i])
			}
		}
	}
}

func TestTermTable(t *testing.T) {
	seen := map[string]bool{}
	for i, term := range TermList() {
		if term.ID != TermID(i) || term.Name == "" || term.Computes == "" || seen[term.Name] {
			t.Errorf("entry %d: %+v", i, term)
		}
		seen[term.Name] = true
		if id, ok := LookupTerm(term.Name); !ok || id != term.ID || id.String() != term.Name {
			t.Errorf("LookupTerm(%q) = %v, %v", term.Name, id, ok)
		}
		if (term.weight == nil) != term.FixedWeight {
			t.Errorf("term %s: a weight field iff not fixed", term.Name)
		}
		// Row terms are summed in the pass that sets the inputs, before
		// any cross term (applyTerms): a row term after a cross term
		// would change the order each cost is summed in.
		if i > 0 && term.row && !termTable[i-1].row {
			t.Errorf("row term %s listed after the cross term %s", term.Name, termTable[i-1].Name)
		}
	}
	if _, ok := LookupTerm("credit"); ok {
		t.Error("credit is an input, not a term")
	}
	cfg := DefaultConfig()
	for _, tc := range []struct {
		id   TermID
		w    float64
		want string
	}{
		{TermDecode, 2, "term decode has a fixed weight of 1"},
		{TermHerd, -1, "term herd weight -1 outside [0, 1e+06]"},
		{NumTerms, 1, "unknown term"},
	} {
		if err := cfg.SetTermWeight(tc.id, tc.w); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetTermWeight(%v, %v) = %v, want %q", tc.id, tc.w, err, tc.want)
		}
	}
	if err := cfg.SetTermWeight(TermRecompute, 3); err != nil || cfg.Kvgate.RecomputeWeight != 3 || cfg.TermWeight(TermRecompute) != 3 || cfg.TermWeight(TermDecode) != 1 {
		t.Errorf("SetTermWeight(recompute, 3): %v, config %+v", err, cfg.Kvgate)
	}
}

// The list costs no allocation: PickInto into a reused Decision allocates
// nothing under either policy (extproc keeps one Decision per request
// goroutine; the terms' inputs stay on the stack).
func TestPickIntoDoesNotAllocate(t *testing.T) {
	cands := benchCandidates(16)
	req := Request{PromptTokens: 1024 + 7, BlockSize: 64, Blocks: 16, ExpectedOutputTokens: 256}
	for _, policy := range []string{PolicyDynamo, PolicyKvgate} {
		cfg := DefaultConfig()
		cfg.Policy = policy
		var d Decision
		if err := PickInto(&d, req, cands, cfg, nil); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(20, func() { _ = PickInto(&d, req, cands, cfg, nil) }); n != 0 {
			t.Errorf("%s: %v allocations per pick", policy, n)
		}
		k, err := cfg.Check()
		if err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(20, func() { _ = k.PickInto(&d, req, cands, nil) }); n != 0 {
			t.Errorf("%s: %v allocations per checked pick", policy, n)
		}
	}
}

// A Checked configuration picks exactly as Pick does with the same
// Config; Check refuses what Validate refuses, and the zero Checked
// refuses to pick.
func TestCheckedPicksAsPick(t *testing.T) {
	rnd := seeded(29)
	for n := range 500 {
		cfg, want, req, cands := randomPickWith(t, rnd)
		k, err := cfg.Check()
		if err != nil {
			t.Fatal(err)
		}
		if k.cfg != cfg || !k.ok {
			t.Fatalf("checked %+v (ok %v), config %+v", k.cfg, k.ok, cfg)
		}
		got, err := k.Pick(req, cands, nil)
		if err != nil && err != ErrNoEligible {
			t.Fatal(err)
		}
		if got.Primary != want.Primary || !slices.Equal(got.Fallbacks, want.Fallbacks) || !slices.Equal(got.Terms, want.Terms) {
			t.Fatalf("pick %d: checked %+v, Pick %+v", n, got, want)
		}
	}
	bad := DefaultConfig()
	bad.Temperature = -1
	if _, err := bad.Check(); err == nil || !strings.Contains(err.Error(), "temperature -1") {
		t.Errorf("Check of temperature -1: %v", err)
	}
	var zero Checked
	if _, err := zero.Pick(req16(1), benchCandidates(2), nil); err == nil || !strings.Contains(err.Error(), "not checked") {
		t.Errorf("zero Checked picked: %v", err)
	}
}
