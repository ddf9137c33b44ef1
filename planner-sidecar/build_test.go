package plannersidecar

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/planner-sidecar/actuate"
	"github.com/kvgate/kvgate/planner-sidecar/collect"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
	"github.com/kvgate/kvgate/planner-sidecar/plannerconfig"
)

func writeProfile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(p, []byte(`{"prefill":[{"input_tokens":100,"concurrency":1,"ttft_seconds":0.05,"tokens_per_second":5000}],
"decode":[{"context_tokens":100,"batch":4,"itl_seconds":0.01,"tokens_per_second":400}]}`), 0o644)
	return p
}

// engineWorkers expands engines the way the file does (validated, then
// config.Config.Workers), as `kvgate planner` passes them to New.
func engineWorkers(t *testing.T, engines ...config.Engine) []kvfleet.Worker {
	t.Helper()
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: "m", BlockSize: 16}}
	for i := range engines {
		engines[i].Model = "m"
	}
	cfg.Engines = engines
	for i := range cfg.Engines {
		if cfg.Engines[i].DPRanks == 0 {
			cfg.Engines[i].DPRanks = 1
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	w, err := cfg.Workers()
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestPoolsDerivedFromEngineRoles(t *testing.T) {
	pc := config.Default().Planner
	// 10.0.0.2:1 has two data-parallel ranks (two workers): still one engine of
	// the decode pool.
	workers := engineWorkers(t, config.Engine{Endpoint: "10.0.0.1:1", Role: "prefill"},
		config.Engine{Endpoint: "10.0.0.2:1", Role: "decode", DPRanks: 2}, config.Engine{Endpoint: "10.0.0.3:1", Role: "decode"})
	got := poolsOf(pc.Pools, workers)
	if len(got) != 2 || got[0].Name != plan.PoolPrefill || got[0].Max != 1 || got[1].Name != plan.PoolDecode || got[1].Max != 2 || got[1].Min != 1 {
		t.Fatalf("%+v", got)
	}
	l, err := New(pc, workers, Options{Profile: writeProfile(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Collector.(*collect.Scraper); !ok || !l.Advisory {
		t.Fatalf("collector %T advisory %v", l.Collector, l.Advisory)
	}
	mixed := engineWorkers(t, config.Engine{Endpoint: "10.0.0.1:1", Role: "prefill"},
		config.Engine{Endpoint: "10.0.0.2:1", Role: "decode"}, config.Engine{Endpoint: "10.0.0.4:1", Role: "both"})
	if _, err := New(pc, mixed, Options{Profile: writeProfile(t)}); err == nil || !strings.Contains(err.Error(), "list planner.pools") {
		t.Fatalf("mixed roles: %v", err)
	}
}

func TestEngineEndpointsFoldRanksInFileOrder(t *testing.T) {
	workers := engineWorkers(t, config.Engine{Endpoint: "10.0.0.2:1", Role: "decode", DPRanks: 3},
		config.Engine{Endpoint: "10.0.0.1:1", Role: "prefill", DPRanks: 2}, config.Engine{Endpoint: "10.0.0.3:1"})
	if len(workers) != 6 {
		t.Fatalf("%d workers, want 6", len(workers))
	}
	got := engineEndpoints(workers)
	want := []engineEndpoint{{"10.0.0.2:1", kvfleet.RoleDecode}, {"10.0.0.1:1", kvfleet.RolePrefill}, {"10.0.0.3:1", kvfleet.RoleBoth}}
	if !slices.Equal(got, want) {
		t.Fatalf("engines %+v, want %+v", got, want)
	}
}

func TestNewFromConfig(t *testing.T) {
	pc := config.Default().Planner
	pc.Pools = []plannerconfig.Pool{{Name: "aggregated", Min: 1, Max: 4, GPUsPerReplica: 1, Selector: `job="vllm"`}}
	pc.Prometheus.URL = "http://prometheus:9090"
	pc.Actuator = plannerconfig.Actuator{Kind: "http", URL: "http://fleet/scale", Timeout: pc.Actuator.Timeout}
	pc.Profile = writeProfile(t)
	l, err := New(pc, nil, Options{})
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
	if l, _ = New(pc, nil, Options{Advisory: true}); !l.Advisory {
		t.Fatal("advisory ignored")
	}
	pc.Profile = ""
	if _, err := New(pc, nil, Options{}); err == nil || !strings.Contains(err.Error(), "planner.profile: required") {
		t.Fatal(err)
	}
	if _, err := New(config.Default().Planner, nil, Options{}); err == nil || !strings.Contains(err.Error(), "no pools") {
		t.Fatal(err)
	}
	pc.Profile = filepath.Join(t.TempDir(), "none.json")
	if _, err := New(pc, nil, Options{}); err == nil || !strings.Contains(err.Error(), "none.json") {
		t.Fatal(err)
	}
}
