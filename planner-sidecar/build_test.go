package planner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/planner-sidecar/actuate"
	"github.com/kvgate/kvgate/planner-sidecar/collect"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

func writeProfile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(p, []byte(`{"prefill":[{"input_tokens":100,"concurrency":1,"ttft_seconds":0.05,"tokens_per_second":5000}],
"decode":[{"context_tokens":100,"batch":4,"itl_seconds":0.01,"tokens_per_second":400}]}`), 0o644)
	return p
}

func TestPoolsDerivedFromEngineRoles(t *testing.T) {
	cfg := config.Default()
	cfg.Engines = []config.Engine{{Endpoint: "a:1", Role: "prefill"}, {Endpoint: "b:1", Role: "decode"}, {Endpoint: "c:1", Role: "decode"}}
	got := poolsOf(cfg)
	if len(got) != 2 || got[0].Name != plan.PoolPrefill || got[0].Max != 1 || got[1].Name != plan.PoolDecode || got[1].Max != 2 || got[1].Min != 1 {
		t.Fatalf("%+v", got)
	}
	l, err := New(cfg, Options{Profile: writeProfile(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Collector.(*collect.Scraper); !ok || !l.Advisory {
		t.Fatalf("collector %T advisory %v", l.Collector, l.Advisory)
	}
	cfg.Engines = append(cfg.Engines, config.Engine{Endpoint: "d:1", Role: "both"})
	if _, err := New(cfg, Options{Profile: writeProfile(t)}); err == nil || !strings.Contains(err.Error(), "list planner.pools") {
		t.Fatalf("mixed roles: %v", err)
	}
}

func TestNewFromConfig(t *testing.T) {
	cfg := config.Default()
	cfg.Planner.Pools = []config.PlannerPool{{Name: "aggregated", Min: 1, Max: 4, GPUsPerReplica: 1, Selector: `job="vllm"`}}
	cfg.Planner.Prometheus.URL = "http://prometheus:9090"
	cfg.Planner.Actuator = config.PlannerActuator{Kind: "http", URL: "http://fleet/scale", Timeout: cfg.Planner.Actuator.Timeout}
	cfg.Planner.Profile = writeProfile(t)
	l, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Collector.(*collect.Prometheus); !ok || l.Advisory {
		t.Fatalf("collector %T advisory %v", l.Collector, l.Advisory)
	}
	if _, ok := l.Actuator.(*actuate.HTTP); !ok {
		t.Fatalf("actuator %T", l.Actuator)
	}
	// --advisory wins over the configured actuator.
	if l, _ = New(cfg, Options{Advisory: true}); !l.Advisory {
		t.Fatal("advisory ignored")
	}
	cfg.Planner.Profile = ""
	if _, err := New(cfg, Options{}); err == nil || !strings.Contains(err.Error(), "planner.profile: required") {
		t.Fatal(err)
	}
	if _, err := New(config.Default(), Options{}); err == nil || !strings.Contains(err.Error(), "no pools") {
		t.Fatal(err)
	}
	cfg.Planner.Profile = filepath.Join(t.TempDir(), "none.json")
	if _, err := New(cfg, Options{}); err == nil || !strings.Contains(err.Error(), "none.json") {
		t.Fatal(err)
	}
}
