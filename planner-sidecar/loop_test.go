package plannersidecar

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvgate/kvgate/lab/testkit/profiletest"
	"github.com/kvgate/kvgate/planner-sidecar/actuate"
	"github.com/kvgate/kvgate/planner-sidecar/collect"
	"github.com/kvgate/kvgate/planner-sidecar/forecast"
	"github.com/kvgate/kvgate/planner-sidecar/journal"
	"github.com/kvgate/kvgate/planner-sidecar/perfmodel"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// scriptedFleet is a collector that plays a fleet following the
// actuator: it reports what the file actuator last asked for, with
// drained replicas idle one interval later.
type scriptedFleet struct {
	rate     float64
	ready    []string
	errs     []error
	sawDrain map[string]string
}

func (f *scriptedFleet) Collect(_ context.Context, now time.Time, draining map[string]string) (plan.Observation, []error) {
	f.sawDrain = draining
	o := plan.PoolObservation{RequestRate: f.rate, MeanInputTokens: 1000, MeanOutputTokens: 100,
		Attainment: &plan.Attainment{TTFT: 0.97, ITL: 0.99}}
	for _, r := range f.ready {
		if draining[r] != "" {
			o.Draining++
			o.Idle = append(o.Idle, r)
		} else {
			o.Ready = append(o.Ready, r)
		}
	}
	o.Replicas = len(o.Ready)
	return plan.Observation{Time: now, Pools: map[string]plan.PoolObservation{plan.PoolPrefill: o}}, f.errs
}

func testModel() *perfmodel.Model {
	return profiletest.Model(perfmodel.Profile{
		Prefill: []perfmodel.PrefillPoint{{InputTokens: 1000, Concurrency: 1, TTFTSeconds: 0.1, TokensPerSecond: 10000}},
		Decode:  []perfmodel.DecodePoint{{ContextTokens: 1000, Batch: 8, ITLSeconds: 0.02, TokensPerSecond: 400}},
	})
}

func gauge(t *testing.T, m *Metrics, name string, labels ...string) float64 {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, mm := range f.GetMetric() {
			if labelsMatch(mm, labels) {
				if mm.Gauge != nil {
					return mm.GetGauge().GetValue()
				}
				return mm.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s %v", name, labels)
	return 0
}

func labelsMatch(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			found = found || (l.GetName() == kv[i] && l.GetValue() == kv[i+1])
		}
		if !found {
			return false
		}
	}
	return true
}

func TestLoopAppliesDrainsAndRemoves(t *testing.T) {
	dir := t.TempDir()
	fileAct, err := actuate.NewFile(filepath.Join(dir, "fleet.json"))
	if err != nil {
		t.Fatal(err)
	}
	jw, _ := journal.Open(filepath.Join(dir, "j.jsonl"))
	defer jw.Close()
	cfg := plan.SLAConfig{TTFT: time.Second, ITL: time.Second, Pools: map[string]plan.PoolLimits{plan.PoolPrefill: {Min: 1, Max: 8}},
		UpUtilization: 1, DownUtilization: 1, DownAfter: 1, CorrectionAlpha: -1}
	fleet := &scriptedFleet{rate: 30, ready: []string{"a:1"}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := &Loop{
		Policy:    plan.NewSLA(cfg, testModel(), func() forecast.Forecaster { return &forecast.Constant{} }),
		Collector: fleet, Actuator: fileAct, Journal: jw, Metrics: NewMetrics(), Interval: 10 * time.Second,
		Now: func() time.Time { return now },
	}
	ctx := context.Background()
	// 30 req/s × 1000 tokens ÷ 10000/s = 3 replicas; 1 ready → up to 3.
	e, err := l.Step(ctx)
	if err != nil || !e.Applied || e.Decision.Desired[plan.PoolPrefill] != 3 {
		t.Fatalf("%+v %v", e.Decision, err)
	}
	// Next interval: the file actuator says 3, one is seen: 2 pending, so
	// the policy holds instead of asking again.
	now = now.Add(10 * time.Second)
	e, _ = l.Step(ctx)
	if o := e.Observation.Pools[plan.PoolPrefill]; o.Pending != 2 || e.Decision.Action[plan.PoolPrefill] != "hold" {
		t.Fatalf("pending: %+v %s", o, e.Decision.Reason)
	}
	if gauge(t, l.Metrics, "kvgate_planner_current_replicas", "pool", "prefill") != 3 ||
		gauge(t, l.Metrics, "kvgate_planner_sla_attainment_ratio", "pool", "prefill") != 0.97 ||
		gauge(t, l.Metrics, "kvgate_planner_decisions_total", "pool", "prefill", "action", "hold") != 1 {
		t.Fatal("metrics")
	}
	// The three are up; load falls to 10 req/s → 1 replica: drain b and c.
	now = now.Add(10 * time.Second)
	fleet.ready, fleet.rate = []string{"a:1", "b:1", "c:1"}, 10
	e, _ = l.Step(ctx)
	if !slices.Equal(e.Decision.Drain[plan.PoolPrefill], []string{"b:1", "c:1"}) || !slices.Equal(draining(l), []string{"b:1", "c:1"}) {
		t.Fatalf("drain: %+v %v", e.Decision, draining(l))
	}
	// They are idle now (the fleet sees the draining set): removed.
	now = now.Add(10 * time.Second)
	e, _ = l.Step(ctx)
	if fleet.sawDrain["b:1"] != plan.PoolPrefill || !slices.Equal(e.Decision.Remove[plan.PoolPrefill], []string{"b:1", "c:1"}) ||
		e.Decision.Desired[plan.PoolPrefill] != 1 || len(draining(l)) != 0 {
		t.Fatalf("remove: %+v", e.Decision)
	}
	if gauge(t, l.Metrics, "kvgate_planner_desired_replicas", "pool", "prefill") != 1 ||
		gauge(t, l.Metrics, "kvgate_planner_observed_request_rate", "pool", "prefill") != 10 ||
		gauge(t, l.Metrics, "kvgate_planner_forecast_request_rate", "pool", "prefill") != 10 ||
		gauge(t, l.Metrics, "kvgate_planner_last_decision_timestamp_seconds") != float64(now.Unix()) {
		t.Fatal("metrics after remove")
	}
	entries, err := journal.ReadFile(filepath.Join(dir, "j.jsonl"))
	if err != nil || len(entries) != 4 {
		t.Fatalf("%d entries %v", len(entries), err)
	}
}

type failingActuator struct{ actuate.Advisory }

func (failingActuator) Apply(context.Context, plan.Decision) error { return errors.New("API down") }

func TestLoopCountsErrorsAndAdvisoryAppliesNothing(t *testing.T) {
	cfg := plan.SLAConfig{TTFT: time.Second, ITL: time.Second, Pools: map[string]plan.PoolLimits{plan.PoolPrefill: {Min: 1, Max: 8}}}
	fleet := &scriptedFleet{rate: 30, ready: []string{"a:1"}, errs: []error{&collect.SourceError{Source: "engine", Target: "x:1", Err: errors.New("refused")}}}
	l := &Loop{Policy: plan.NewSLA(cfg, testModel(), func() forecast.Forecaster { return &forecast.Constant{} }),
		Collector: fleet, Actuator: failingActuator{}, Metrics: NewMetrics(), Interval: time.Second}
	e, err := l.Step(context.Background())
	if err != nil || e.Applied || e.Error != "API down" {
		t.Fatalf("%+v %v", e, err)
	}
	if gauge(t, l.Metrics, "kvgate_planner_collect_errors_total", "source", "engine") != 1 ||
		gauge(t, l.Metrics, "kvgate_planner_collect_errors_total", "source", "actuator") != 1 {
		t.Fatal("error counters")
	}
	l.Advisory = true
	e, _ = l.Step(context.Background())
	if e.Applied || e.Error != "" || !e.Advisory {
		t.Fatalf("advisory: %+v", e)
	}
	// Health and metrics over HTTP.
	srv := httptest.NewServer(l.AdminHandler())
	defer srv.Close()
	for path, want := range map[string]string{"/healthz": "ok", "/metrics": "kvgate_planner_desired_replicas{pool=\"prefill\"}"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		buf := make([]byte, 1<<16)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(b.String(), want) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b.String())
		}
	}
	if err := l.Healthy(time.Now().Add(time.Hour)); err == nil {
		t.Error("stale loop reported healthy")
	}
	if err := (&Loop{Interval: time.Second}).Healthy(time.Now()); err == nil {
		t.Error("loop without decisions reported healthy")
	}
}

// draining lists the replicas the loop has had drained and not yet removed.
func draining(l *Loop) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.draining))
}
