package replay

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tinySweep is a sweep cheap enough for a unit test: 60 requests of the
// conversation slice on 2 workers.
func tinySweep(t *testing.T, policies []string, sla time.Duration) *SweepResult {
	t.Helper()
	reqs, err := LoadTrace("testdata/conversation_head300.jsonl", 60)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	res, err := Sweep(context.Background(), "slice", reqs, SweepOptions{
		Replay:    Options{Workers: 2, Seed: 1, Policies: policies},
		TTFTSLA:   sla,
		Tolerance: 0.2,
		Progress:  func(l string) { lines = append(lines, l) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 {
		t.Fatal("no progress lines")
	}
	return res
}

func TestSweepFindsTheKneeOfEachPolicy(t *testing.T) {
	res := tinySweep(t, []string{PolicyRoundRobin, PolicyKvgate}, 2*time.Second)
	if len(res.Policies) != 2 || res.Requests != 60 || res.TTFTSLAMs != 2000 {
		t.Fatalf("sweep result %+v", res)
	}
	if !(res.PooledLRUHitRatio > 0 && res.PooledLRUHitRatio <= res.IdealHitRatio+1e-12) {
		t.Errorf("pooled-LRU bound %v outside (0, ideal %v]", res.PooledLRUHitRatio, res.IdealHitRatio)
	}
	for _, p := range res.Policies {
		if p.Capacity <= 0 {
			t.Fatalf("%s: capacity %v", p.Policy, p.Capacity)
		}
		// The answer is bracketed: a replayed rate at the capacity meets
		// the SLA and, unless the ceiling was hit, one within the
		// tolerance above it misses.
		var at, above *SweepPoint
		for i := range p.Points {
			pt := &p.Points[i]
			if pt.Rate == p.Capacity {
				at = pt
			}
			if pt.Rate > p.Capacity && pt.Rate <= p.Capacity*1.2+1e-9 && (above == nil || pt.Rate < above.Rate) {
				above = pt
			}
			if i > 0 && p.Points[i-1].Rate >= pt.Rate {
				t.Errorf("%s: points not sorted by rate: %v then %v", p.Policy, p.Points[i-1].Rate, pt.Rate)
			}
		}
		if at == nil || !at.MeetsSLA || at.TTFTP90Ms > 2000 {
			t.Errorf("%s: no replay at capacity %v meeting the SLA: %+v", p.Policy, p.Capacity, p.Points)
		}
		if !p.CapacityAtLeast && (above == nil || above.MeetsSLA) {
			t.Errorf("%s: no replay within 20%% above capacity %v missing the SLA: %+v", p.Policy, p.Capacity, p.Points)
		}
		// Every point above a miss misses too, in this queueing model.
		if p.Overloaded.Rate <= p.Capacity || p.Overloaded.TTFTP90Ms < p.AtCapacity.TTFTP90Ms {
			t.Errorf("%s: overload point %+v vs capacity point %+v", p.Policy, p.Overloaded, p.AtCapacity)
		}
		if p.Nominal.Rate != 1 || p.Nominal.ThroughputRPS <= 0 {
			t.Errorf("%s: nominal point %+v", p.Policy, p.Nominal)
		}
	}
	ref := res.Policy(PolicyKvgate)
	if len(res.OverloadRates) != 1 || res.OverloadRates[0] != (SubjectRate{PolicyKvgate, ref.Overloaded.Rate}) {
		t.Errorf("overload rates %+v, want kvgate's %v", res.OverloadRates, ref.Overloaded.Rate)
	}
	for _, p := range res.Policies {
		if a := p.AtOverloadOf[PolicyKvgate]; a.Rate != ref.Overloaded.Rate || a.ThroughputRPS <= 0 {
			t.Errorf("%s at kvgate's overload rate: %+v", p.Policy, a)
		}
	}
	var b strings.Builder
	if err := WriteSweepTable(&b, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"round-robin", "kvgate", "pooled LRU", "SLA TTFT p90 ≤ 2000 ms", "every policy at kvgate's overload rate"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	dir := t.TempDir()
	paths, err := WriteSweepPlots(dir, "x_", res)
	if err != nil || len(paths) != 2 {
		t.Fatalf("plots %v: %v", paths, err)
	}
	for _, p := range paths {
		svg, err := os.ReadFile(p)
		if err != nil || !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "<polyline") || !strings.HasPrefix(filepath.Base(p), "x_") {
			t.Errorf("%s: %v, %d bytes", p, err, len(svg))
		}
		if err := CheckSVGSeries(svg); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

func TestSweepLooserSLAGivesHigherCapacity(t *testing.T) {
	tight := tinySweep(t, []string{PolicyKvgate}, 500*time.Millisecond)
	loose := tinySweep(t, []string{PolicyKvgate}, 5*time.Second)
	if tc, lc := tight.Policies[0].Capacity, loose.Policies[0].Capacity; !(lc > tc) {
		t.Errorf("capacity at 5 s SLA %v not above capacity at 0.5 s SLA %v", lc, tc)
	}
}

func TestSweepRejectsBadOptions(t *testing.T) {
	reqs, err := LoadTrace("testdata/conversation_head300.jsonl", 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []SweepOptions{
		{TTFTSLA: -time.Second},
		{MinRate: 2},
		{Tolerance: 5},
		{Replay: Options{RateScale: 3}},
		{Overload: 0.5},
	} {
		if _, err := Sweep(context.Background(), "x", reqs, o); err == nil || !strings.Contains(err.Error(), "sweep:") {
			t.Errorf("options %+v: error %v", o, err)
		}
	}
}

func TestPooledLRUBoundsByCapacity(t *testing.T) {
	reqs, err := LoadTrace("testdata/conversation_head300.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	ideal := IdealHitRatio(reqs, TraceBlockSize)
	// A cache larger than every block of the trace evicts nothing: it is
	// the ideal.
	if got := PooledLRUHitRatio(reqs, TraceBlockSize, 1<<22); got != ideal {
		t.Errorf("unbounded pooled LRU %v, ideal %v", got, ideal)
	}
	prev := -1.0
	for _, c := range []int{1, 16, 128, 1024} {
		got := PooledLRUHitRatio(reqs, TraceBlockSize, c)
		if got < prev || got > ideal {
			t.Errorf("capacity %d: %v (previous %v, ideal %v)", c, got, prev, ideal)
		}
		prev = got
	}
}

func TestPooledLRUEvictsLeastRecentlyUsedTailFirst(t *testing.T) {
	// Block ids stand for 512 tokens each. Request 2 is a fresh block that
	// evicts one of request 1's from the 3-block cache; request 3 extends
	// request 1's prompt: its root survived (touched last) and only the
	// tail block 3 was evicted, so it hits blocks 1 and 2. Touching in
	// prompt order would have evicted the root and hit nothing.
	reqs := []TraceRequest{
		{InputLength: 3 * 512, HashIDs: []uint64{1, 2, 3}},
		{InputLength: 512, HashIDs: []uint64{9}},
		{InputLength: 4 * 512, HashIDs: []uint64{1, 2, 3, 4}},
	}
	got := PooledLRUHitRatio(reqs, TraceBlockSize, 3)
	if want := 1024.0 / (3*512 + 512 + 4*512); got != want {
		t.Errorf("hit ratio %v, want %v", got, want)
	}
}
