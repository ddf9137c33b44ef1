package inventory

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvgate/kvgate/indexer"
	"github.com/kvgate/kvgate/lab/enginesim"
)

var (
	builtOnce sync.Once
	built     *Inventory
	buildErr  error
)

// buildInventory builds the inventory once per test binary (it starts a
// kvagent and an engine simulator core; the result does not change).
func buildInventory(t *testing.T) *Inventory {
	t.Helper()
	builtOnce.Do(func() {
		mfs, err := enginesim.MetricFamilies("m")
		if err != nil {
			buildErr = fmt.Errorf("enginesim metrics: %w", err)
			return
		}
		built, buildErr = Build(mfs)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// scrape reads a real /metrics page over HTTP, as Prometheus would.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// matchesPage checks every family a real endpoint serves against the
// inventory: the same type and the same label names. An endpoint is an
// oracle independent of the Describe-based inventory (it goes through
// the text exposition).
func matchesPage(t *testing.T, inv *Inventory, page map[string]*dto.MetricFamily) {
	t.Helper()
	if len(page) == 0 {
		t.Fatal("empty /metrics page")
	}
	for name, mf := range page {
		f, ok := inv.Family(name)
		if !ok {
			t.Errorf("%s is served but not in the inventory", name)
			continue
		}
		want := map[dto.MetricType]string{dto.MetricType_COUNTER: TypeCounter, dto.MetricType_GAUGE: TypeGauge,
			dto.MetricType_HISTOGRAM: TypeHistogram, dto.MetricType_SUMMARY: TypeSummary}[mf.GetType()]
		if f.Type != want {
			t.Errorf("%s: served as %v, inventory says %s", name, mf.GetType(), f.Type)
		}
		for _, m := range mf.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetName())
			}
			sort.Strings(got)
			if !slices.Equal(got, f.Labels) {
				t.Errorf("%s: served with labels %v, inventory says %v", name, got, f.Labels)
			}
		}
	}
}

func TestInventoryMatchesIndexerEndpoint(t *testing.T) {
	inv := buildInventory(t)
	cfg := fleetConfig()
	idx, err := indexer.OpenIndex(context.Background(), cfg.Index)
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	workers, err := cfg.Workers()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := indexer.New(indexer.ServiceConfig{Index: cfg.Index, Indexer: cfg.Indexer, Models: cfg.Models, Workers: workers}, idx, quiet)
	if err != nil {
		t.Fatal(err)
	}
	page := scrape(t, svc.Handler())
	matchesPage(t, inv, page)
	for _, name := range []string{"kvgate_indexer_lag_seconds", "kvgate_index_up", "process_cpu_seconds_total"} {
		if page[name] == nil {
			t.Errorf("indexer endpoint does not serve %s", name)
		}
	}
}

func TestInventoryMatchesEngineSimulatorEndpoint(t *testing.T) {
	inv := buildInventory(t)
	dir := t.TempDir()
	if err := writeTinyModel(dir); err != nil {
		t.Fatal(err)
	}
	s, err := enginesim.NewServer(enginesim.ServerConfig{Model: "m", TokenizerDir: dir, Logger: quiet,
		Engine: enginesim.Config{BlockSize: 16, NumGPUBlocks: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	page := scrape(t, s.Handler())
	matchesPage(t, inv, page)
	for _, name := range []string{"vllm:num_requests_waiting", "vllm:time_to_first_token_seconds", "vllm:kv_cache_usage_perc"} {
		if page[name] == nil {
			t.Errorf("engine simulator does not serve %s", name)
		}
	}
}

func TestInventoryExpandsHistograms(t *testing.T) {
	inv := buildInventory(t)
	b, ok := inv.Lookup("kvgate_extproc_decision_duration_seconds_bucket")
	if !ok || !slices.Contains(b.Labels, "le") {
		t.Fatalf("decision histogram buckets: %+v %v", b, ok)
	}
	for _, n := range []string{"kvgate_extproc_decision_duration_seconds_sum", "kvgate_extproc_decision_duration_seconds_count"} {
		s, ok := inv.Lookup(n)
		if !ok || slices.Contains(s.Labels, "le") {
			t.Errorf("%s: %+v %v", n, s, ok)
		}
	}
	if _, ok := inv.Lookup("kvgate_extproc_decision_duration_seconds"); ok {
		t.Error("a histogram's bare family name is not a series")
	}
	if s, ok := inv.Lookup("go_gc_duration_seconds"); !ok || !slices.Contains(s.Labels, "quantile") {
		t.Errorf("summary go_gc_duration_seconds: %+v %v", s, ok)
	}
}

func TestInventoryRejectsConflicts(t *testing.T) {
	_, err := New([]Family{
		{Name: "x", Type: TypeGauge, Labels: []string{"a"}, Source: "one"},
		{Name: "x", Type: TypeGauge, Labels: []string{"b"}, Source: "two"},
	})
	if err == nil {
		t.Fatal("accepted one metric name with two label sets")
	}
	_, err = New([]Family{{Name: "h", Type: TypeHistogram}, {Name: "h_count", Type: TypeCounter}})
	if err == nil {
		t.Fatal("accepted a counter colliding with a histogram's _count")
	}
}

// TestKvgateMetricNaming holds kvgate's own metrics to Prometheus' naming
// rules (https://prometheus.io/docs/practices/naming/): the kvgate_ prefix,
// counters ending in _total and nothing else ending in it, and base units
// (seconds, bytes) rather than milliseconds or kilobytes.
func TestKvgateMetricNaming(t *testing.T) {
	inv := buildInventory(t)
	n := 0
	for _, f := range inv.Families() {
		if !strings.HasPrefix(f.Source, "kvgate ") {
			continue
		}
		n++
		if !strings.HasPrefix(f.Name, "kvgate_") {
			t.Errorf("%s (%s): no kvgate_ prefix", f.Name, f.Source)
		}
		if (f.Type == TypeCounter) != strings.HasSuffix(f.Name, "_total") {
			t.Errorf("%s is a %s: only counters end in _total, and every counter does", f.Name, f.Type)
		}
		for _, bad := range []string{"_ms", "_milliseconds", "_kb", "_mb", "_percent"} {
			if strings.Contains(f.Name, bad) {
				t.Errorf("%s: use base units (seconds, bytes, ratio), not %s", f.Name, bad)
			}
		}
	}
	if n < 50 {
		t.Errorf("only %d kvgate families: a component is missing from the inventory", n)
	}
}
