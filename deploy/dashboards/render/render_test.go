package main

import (
	"context"
	"fmt"
	"image/png"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"

	"github.com/kvgate/kvgate/deploy/inventory"
)

// page serves a counter that grows by 10 per scrape and a histogram with
// one observation of 0.2 s per scrape, so the expected query results
// follow from the scrape times alone.
func page(n int64) string {
	return fmt.Sprintf(`# TYPE kvgate_extproc_requests_total counter
kvgate_extproc_requests_total{model="m",outcome="routed"} %d
# TYPE kvgate_extproc_decision_duration_seconds histogram
kvgate_extproc_decision_duration_seconds_bucket{le="0.1"} 0
kvgate_extproc_decision_duration_seconds_bucket{le="0.4"} %d
kvgate_extproc_decision_duration_seconds_bucket{le="+Inf"} %d
kvgate_extproc_decision_duration_seconds_sum %g
kvgate_extproc_decision_duration_seconds_count %d
`, 10*n, n, n, 0.2*float64(n), n)
}

func scrapedStore(t *testing.T, scrapes int, start time.Time) *memStore {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(page(n.Add(1) - 1)))
	}))
	defer srv.Close()
	st := newMemStore()
	tg := target{url: srv.URL, job: "kvgate-extproc", instance: "x", namespace: "ns"}
	for i := range scrapes {
		if _, err := scrapeOnce(context.Background(), st, tg, start.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func TestScrapedSamplesAnswerPromQL(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	st := scrapedStore(t, 30, start)
	eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Second})
	at := start.Add(29 * time.Second)
	for _, c := range []struct {
		expr string
		want float64
	}{
		// 10 per scrape, one scrape per second.
		{`sum(rate(kvgate_extproc_requests_total{job="kvgate-extproc",namespace="ns"}[10s]))`, 10},
		// Every observation is 0.2 s, in the (0.1, 0.4] bucket: linear
		// interpolation puts the median at 0.1 + 0.5 × 0.3.
		{`histogram_quantile(0.5, sum by (le) (rate(kvgate_extproc_decision_duration_seconds_bucket[10s])))`, 0.25},
		{`sum(rate(kvgate_extproc_decision_duration_seconds_sum[10s])) / sum(rate(kvgate_extproc_decision_duration_seconds_count[10s]))`, 0.2},
	} {
		q, err := eng.NewInstantQuery(context.Background(), st, nil, c.expr, at)
		if err != nil {
			t.Fatal(err)
		}
		res := q.Exec(context.Background())
		if res.Err != nil {
			t.Fatalf("%s: %v", c.expr, res.Err)
		}
		v, err := res.Vector()
		if err != nil || len(v) != 1 {
			t.Fatalf("%s: %v %v", c.expr, v, err)
		}
		if math.Abs(v[0].F-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.expr, v[0].F, c.want)
		}
		q.Close()
	}
}

func TestRenderDashboardWritesAPanelGrid(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	st := scrapedStore(t, 30, start)
	d, err := inventory.ReadDashboard(strings.NewReader(`{"uid": "t", "title": "T", "schemaVersion": 39,
	  "templating": {"list": [{"name": "datasource", "type": "datasource"}]},
	  "panels": [
	    {"id": 1, "type": "row", "title": "r", "gridPos": {"h": 1, "w": 24, "x": 0, "y": 0}},
	    {"id": 2, "type": "timeseries", "title": "Requests", "gridPos": {"h": 8, "w": 8, "x": 0, "y": 1},
	     "fieldConfig": {"defaults": {"unit": "reqps"}},
	     "targets": [{"refId": "A", "expr": "sum by (outcome) (rate(kvgate_extproc_requests_total[$__rate_interval]))", "legendFormat": "{{outcome}}"}]},
	    {"id": 3, "type": "timeseries", "title": "Nothing", "gridPos": {"h": 8, "w": 8, "x": 8, "y": 1},
	     "targets": [{"refId": "A", "expr": "sum(rate(kvgate_extproc_fallbacks_used_total[$__rate_interval]))"}]}
	  ]}`))
	if err != nil {
		t.Fatal(err)
	}
	eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Second})
	w := window{start: start, end: start.Add(29 * time.Second), step: time.Second, rateInterval: 10 * time.Second}
	path := filepath.Join(t.TempDir(), "t.png")
	panels, withData, err := renderDashboard(context.Background(), eng, st, d, w, path)
	if err != nil {
		t.Fatal(err)
	}
	if panels != 2 || withData != 1 {
		t.Errorf("panels %d with data %d, want 2 and 1 (the row is not a panel; fallbacks were never scraped)", panels, withData)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 300 {
		t.Errorf("picture %v is too small for a panel grid", b)
	}
}

func TestEngineTargetsFromWorkerLabels(t *testing.T) {
	st := newMemStore()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("# TYPE kvgate_extproc_worker_inflight_requests gauge\n" +
			"kvgate_extproc_worker_inflight_requests{worker=\"127.0.0.1:8001#0\"} 1\n" +
			"kvgate_extproc_worker_inflight_requests{worker=\"127.0.0.1:8002#1\"} 0\n"))
	}))
	defer srv.Close()
	fams, err := scrapeOnce(context.Background(), st, target{url: srv.URL}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := engineTargets(fams)
	if strings.Join(got, ",") != "127.0.0.1:8001,127.0.0.1:8002" && strings.Join(got, ",") != "127.0.0.1:8002,127.0.0.1:8001" {
		t.Errorf("engine targets %v", got)
	}
}
