package plannersim

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// A planner-like result (scaling up at 1 min) and a static fleet, as
// Compare would report them: every series of every chart has data, and the
// latency charts carry their SLA target.
func TestReportChartsEverySeriesHasDataAndTargets(t *testing.T) {
	l := steady(t, 4, 3*time.Minute, 1000, 40)
	cfg := Config{}.withDefaults()
	scaling := simulateOne(t, Config{}, l, &scripted{at: map[time.Duration]map[string]int{
		time.Minute: {plan.PoolPrefill: 2, plan.PoolDecode: 1}}})
	static := simulateOne(t, Config{}, l, disagg(2, 1))
	rep := &Report{Load: "steady", Results: []*Result{scaling, static}, Cheapest: static, TTFTTarget: cfg.TTFT, ITLTarget: cfg.ITL}

	charts := reportCharts(rep)
	targets := map[string]float64{}
	for _, c := range charts {
		if len(c.series) == 0 {
			t.Errorf("%s: no series", c.file)
		}
		for _, s := range c.series {
			if len(s.xy) == 0 {
				t.Errorf("%s: series %q has no points", c.file, s.name)
				continue
			}
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, p := range s.xy {
				if math.IsNaN(p.X) || math.IsInf(p.X, 0) || math.IsNaN(p.Y) || math.IsInf(p.Y, 0) {
					t.Errorf("%s: series %q has point %v", c.file, s.name, p)
				}
				lo, hi = min(lo, p.X), max(hi, p.X)
			}
			if hi <= lo {
				t.Errorf("%s: series %q spans x %v..%v", c.file, s.name, lo, hi)
			}
			if s.dashed {
				targets[c.file] = s.xy[0].Y
			}
		}
	}
	if len(charts) != 4 {
		t.Fatalf("%d charts, want 4", len(charts))
	}
	if targets["ttft_p90.png"] != 2000 || targets["itl_p90.png"] != 50 || len(targets) != 2 {
		t.Errorf("target lines %v, want TTFT 2000 ms and ITL 50 ms only", targets)
	}

	dir := t.TempDir()
	if err := WritePlots(dir, rep); err != nil {
		t.Fatal(err)
	}
	for _, c := range charts {
		b, err := os.ReadFile(filepath.Join(dir, c.file))
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s: not a PNG (%v)", c.file, err)
		}
	}
}
