package replay

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWritePlotsEverySeriesHasData(t *testing.T) {
	reqs, err := LoadTrace("testdata/conversation_head300.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), "slice", reqs, Options{Workers: 4, Seed: 3, Policies: []string{PolicyRoundRobin, PolicyKvgate}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	paths, err := WritePlots(dir, res)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "ttft_cdf.svg"), filepath.Join(dir, "hit_ratio.svg")}; strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Fatalf("paths %v, want %v", paths, want)
	}
	for _, p := range paths {
		svg, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckSVGSeries(svg); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// The live replay's bug: a hit-ratio chart whose series had no points and
// whose x ticks all read "0". The check must catch the first, and ticks must
// be distinct numbers of the unit the axis names.
func TestHitRatioChartTicksAndEmptySeries(t *testing.T) {
	empty := &Result{Order: []string{"live"}, Policies: map[string]*PolicyResult{"live": {}}, IdealHitRatio: 0.5, WallClock: true}
	var b strings.Builder
	drawHitOverTime(&b, empty)
	if err := CheckSVGSeries([]byte(b.String())); err == nil {
		t.Errorf("a chart with an empty series passed the check:\n%s", b.String())
	}

	live := &Result{Order: []string{"live"}, IdealHitRatio: 0.5, WallClock: true, Policies: map[string]*PolicyResult{"live": {HitOverTime: []HitPoint{
		{At: 0, HitRatio: 0.1}, {At: 20 * time.Second, HitRatio: 0.3}, {At: 43 * time.Second, HitRatio: 0.4}}}}}
	b.Reset()
	drawHitOverTime(&b, live)
	svg := b.String()
	if err := CheckSVGSeries([]byte(svg)); err != nil {
		t.Errorf("%v:\n%s", err, svg)
	}
	if !strings.Contains(svg, "arrival time (s, wall clock)") {
		t.Errorf("x label does not say seconds, wall clock:\n%s", svg)
	}
	// 43 s over about five ticks: every 10 s up to 50.
	for _, tick := range []string{">0<", ">10<", ">20<", ">30<", ">40<", ">50<"} {
		if !strings.Contains(svg, `text-anchor="middle"`+tick) && !strings.Contains(svg, tick+"/text>") {
			t.Errorf("no x tick %s:\n%s", tick, svg)
		}
	}
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct{ raw, want float64 }{{8.6, 10}, {0.3, 0.5}, {1, 1}, {1.5, 2}, {0.0002, 0.0002}, {42, 50}, {22, 25}} {
		if got := niceStep(c.raw); got < c.want*(1-1e-9) || got > c.want*(1+1e-9) {
			t.Errorf("niceStep(%v) = %v, want %v", c.raw, got, c.want)
		}
	}
}
