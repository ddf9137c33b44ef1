package inventory

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const dashboardsDir = "../dashboards"

func dashboardFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dashboardsDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("%d dashboards in %s, want at least routing, index and engines", len(files), dashboardsDir)
	}
	return files
}

func readDashboardFile(t *testing.T, path string) *Dashboard {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := ReadDashboard(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

func TestDashboardsMatchInventory(t *testing.T) {
	inv := buildInventory(t)
	uids := map[string]string{}
	for _, path := range dashboardFiles(t) {
		d := readDashboardFile(t, path)
		for _, p := range inv.CheckDashboard(d) {
			t.Errorf("%s: %s", filepath.Base(path), p)
		}
		if other, ok := uids[d.UID]; ok {
			t.Errorf("%s and %s share uid %s", path, other, d.UID)
		}
		uids[d.UID] = path
		queries := 0
		for _, p := range d.AllPanels() {
			queries += len(p.Targets)
		}
		if queries < 8 {
			t.Errorf("%s: %d queries; a dashboard this thin is a stub", path, queries)
		}
	}
}

// mutated loads the routing dashboard and changes its first query.
func mutated(t *testing.T, edit func(d *Dashboard)) *Dashboard {
	t.Helper()
	d := readDashboardFile(t, filepath.Join(dashboardsDir, "kvgate-routing.json"))
	edit(d)
	return d
}

func firstQuery(d *Dashboard) *Target {
	for i := range d.Panels {
		if len(d.Panels[i].Targets) > 0 {
			return &d.Panels[i].Targets[0]
		}
	}
	return nil
}

func TestDashboardMistakesAreCaught(t *testing.T) {
	inv := buildInventory(t)
	cases := []struct {
		name string
		edit func(d *Dashboard)
		want string
	}{
		{"misspelt metric", func(d *Dashboard) {
			q := firstQuery(d)
			q.Expr = strings.Replace(q.Expr, "kvgate_extproc_requests_total", "kvgate_extproc_request_total", 1)
		}, "metric kvgate_extproc_request_total is exported by no"},
		{"misspelt label matcher", func(d *Dashboard) {
			firstQuery(d).Expr = `sum(rate(kvgate_extproc_requests_total{outcom="routed"}[$__rate_interval]))`
		}, `label "outcom" is not a label of kvgate_extproc_requests_total`},
		{"grouping by a label the metric lacks", func(d *Dashboard) {
			firstQuery(d).Expr = `sum by (worker) (rate(kvgate_extproc_requests_total[$__rate_interval]))`
		}, `by(worker): label "worker"`},
		{"legend naming a label the result lacks", func(d *Dashboard) {
			firstQuery(d).LegendFormat = "{{worker}}"
		}, `legend {{worker}}`},
		{"undefined template variable", func(d *Dashboard) {
			firstQuery(d).Expr = `sum(rate(kvgate_extproc_requests_total{job=~"$jobs"}[$__rate_interval]))`
		}, "variable $jobs is not defined"},
		{"histogram quantile over sums", func(d *Dashboard) {
			firstQuery(d).Expr = `histogram_quantile(0.99, sum(rate(kvgate_extproc_decision_duration_seconds_sum[5m])))`
		}, `histogram_quantile: label "le"`},
		{"hard-coded data source", func(d *Dashboard) {
			d.Panels[1].Datasource = &DatasourceRef{Type: "prometheus", UID: "prom-prod"}
		}, "datasource must be the ${datasource} variable"},
		{"old schema", func(d *Dashboard) { d.SchemaVersion = 30 }, "schemaVersion 30"},
		{"variable query on a missing label", func(d *Dashboard) {
			for i := range d.Templating.List {
				if d.Templating.List[i].Name == "job" {
					d.Templating.List[i].Query = "label_values(kvgate_extproc_requests_total, jobname)"
				}
			}
		}, `carries no label "jobname"`},
		{"panel off the grid", func(d *Dashboard) { d.Panels[1].GridPos.X = 20 }, "outside the 24-column grid"},
	}
	if p := inv.CheckDashboard(mutated(t, func(*Dashboard) {})); len(p) > 0 {
		t.Fatalf("unmutated dashboard: %v", p)
	}
	for _, c := range cases {
		problems := inv.CheckDashboard(mutated(t, c.edit))
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }) {
			t.Errorf("%s: problems %q, want one containing %q", c.name, problems, c.want)
		}
	}
}
