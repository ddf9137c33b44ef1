package inventory

import (
	"slices"
	"strings"
	"testing"
)

// testInventory is a small hand-made inventory, so that the expected
// results below follow from PromQL's rules alone.
func testInventory(t *testing.T) *Inventory {
	t.Helper()
	inv, err := New([]Family{
		{Name: "req_total", Type: TypeCounter, Labels: []string{"model", "outcome"}},
		{Name: "lat_seconds", Type: TypeHistogram, Labels: []string{"worker"}},
		{Name: "up_ratio", Type: TypeGauge, Labels: []string{"worker", "model"}},
		{Name: "info", Type: TypeGauge, Labels: []string{"worker", "zone"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestCheckAcceptsValidExpressions(t *testing.T) {
	inv := testInventory(t)
	cases := []struct {
		expr   string
		labels []string // the result's label set (nil: not checked)
	}{
		{`sum by (outcome) (rate(req_total{model="a"}[5m]))`, []string{"outcome"}},
		{`histogram_quantile(0.99, sum by (le, worker) (rate(lat_seconds_bucket[5m])))`, []string{"worker"}},
		{`sum(rate(lat_seconds_sum[1m])) / sum(rate(lat_seconds_count[1m]))`, []string{}},
		{`sum without (outcome) (req_total{job="x", instance=~"a.*", namespace!="", pod="p"})`, []string{"instance", "job", "model", "namespace", "pod", "container", "endpoint", "service"}},
		{`up_ratio * on (worker) group_left (zone) info`, nil},
		{`up_ratio / on (worker, model) up_ratio`, []string{"model", "worker"}},
		{`label_replace(up_ratio, "w", "$1", "worker", "(.*)")`, nil},
		{`(max by (worker) (up_ratio) > 0.5) and on (worker) (sum by (worker) (rate(lat_seconds_count[5m])) > 0)`, []string{"worker"}},
		{`topk(3, req_total)`, nil},
		{`count_values("v", up_ratio)`, []string{"v"}},
		{`vector(1)`, []string{}},
		{`1 - up_ratio`, nil},
	}
	for _, c := range cases {
		got, problems := inv.Check(c.expr)
		if len(problems) > 0 {
			t.Errorf("%s: %v", c.expr, problems)
			continue
		}
		if c.labels != nil {
			want := slices.Sorted(slices.Values(c.labels))
			if !slices.Equal(got, want) {
				t.Errorf("%s: result labels %v, want %v", c.expr, got, want)
			}
		}
	}
}

func TestCheckReportsMistakes(t *testing.T) {
	inv := testInventory(t)
	cases := []struct{ expr, want string }{
		{`rate(req_totl[5m])`, "metric req_totl is exported by no"},
		{`rate(req_total{modle="a"}[5m])`, `label "modle" is not a label of req_total`},
		{`sum by (worker) (rate(req_total[5m]))`, `by(worker): label "worker" is not a label`},
		{`sum without (wrker) (up_ratio)`, `without(wrker): label "wrker"`},
		{`histogram_quantile(0.9, sum by (worker) (rate(lat_seconds_bucket[5m])))`, `histogram_quantile: label "le"`},
		{`histogram_quantile(0.9, rate(lat_seconds_count[5m]))`, `histogram_quantile: label "le"`},
		{`rate(lat_seconds[5m])`, "metric lat_seconds is exported by no"},
		{`up_ratio / on (outcome) req_total`, `on(outcome): label "outcome" is not on both sides`},
		{`up_ratio * on (worker) group_left (region) info`, `group_left(region): label "region"`},
		{`label_replace(up_ratio, "w", "$1", "wrkr", "(.*)")`, `label_replace source: label "wrkr"`},
		{`{__name__=~"req.*"}`, "names no metric"},
		{`sum(rate(req_total[5m])`, "does not parse"},
		{`sum by (outcome) (sum by (model) (req_total))`, `by(outcome): label "outcome"`},
	}
	for _, c := range cases {
		_, problems := inv.Check(c.expr)
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }) {
			t.Errorf("%s: problems %q, want one containing %q", c.expr, problems, c.want)
		}
	}
}

// FuzzCheck: any expression, parseable or not, gets an answer (problems
// or a label set) and never a panic.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`sum by (outcome) (rate(req_total{model="a"}[5m]))`,
		`histogram_quantile(0.99, sum by (le) (rate(lat_seconds_bucket[5m])))`,
		`up_ratio * on (worker) group_left (zone) info`,
		`label_join(up_ratio, "x", ",", "worker", "model")`,
		`count_values("v", up_ratio) or vector(1)`,
		`max_over_time(up_ratio[5m:1m]) offset 1m`,
		`absent(req_total{outcome="x"})`,
	} {
		f.Add(s)
	}
	inv, err := New([]Family{
		{Name: "req_total", Type: TypeCounter, Labels: []string{"model", "outcome"}},
		{Name: "lat_seconds", Type: TypeHistogram, Labels: []string{"worker"}},
		{Name: "up_ratio", Type: TypeGauge, Labels: []string{"worker", "model"}},
		{Name: "info", Type: TypeGauge, Labels: []string{"worker", "zone"}},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		if len(expr) > 4096 {
			return
		}
		inv.Check(expr)
	})
}
