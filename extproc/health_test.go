package extproc

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/enginemetrics"
	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/lab/testkit/poll"
	"github.com/kvgate/kvgate/picker"
)

// A worker whose health probes fail gets no requests until it recovers.
func TestUnhealthyWorkerGetsNoRequests(t *testing.T) {
	var down atomic.Bool
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" || down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer engine.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer other.Close()
	flaky, healthy := strings.TrimPrefix(engine.URL, "http://"), strings.TrimPrefix(other.URL, "http://")

	h := newHealthChecker(extprocconfig.HealthCheck{Interval: yamlconf.Duration(10 * time.Millisecond), Timeout: yamlconf.Duration(time.Second), UnhealthyAfter: 2, Path: "/health"})
	h.setTargets([]string{flaky, healthy})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.probeAll(ctx)
	if !h.healthy(flaky) || !h.healthy(healthy) {
		t.Fatal("healthy engines marked unhealthy")
	}
	down.Store(true)
	h.probeAll(ctx)
	if !h.healthy(flaky) {
		t.Fatal("one failed probe must not eject (unhealthy_after 2)")
	}
	h.probeAll(ctx)
	if h.healthy(flaky) || !h.healthy(healthy) {
		t.Fatal("two failed probes must eject the engine, and only it")
	}
	down.Store(false)
	h.probeAll(ctx)
	if !h.healthy(flaky) {
		t.Fatal("one good probe must bring the engine back")
	}
	if !h.healthy("198.51.100.1:80") {
		t.Fatal("unprobed endpoints count as healthy")
	}
}

// Through the router: candidates from an ejected engine are ineligible.
func TestRouterSkipsUnhealthyWorkers(t *testing.T) {
	r := newRig(t, func(c *config.Config) {
		c.Extproc.HealthCheck = extprocconfig.HealthCheck{Interval: yamlconf.Duration(time.Hour), Timeout: yamlconf.Duration(time.Second), UnhealthyAfter: 1, Path: "/health"}
	}, defaultHarnessConfig())
	// One of the three workers fails its health probe. (With two of three
	// failing, fewer than half are healthy and the pick panics, as
	// Envoy's does: healthypanic_test.go.)
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer ok.Close()
	alive := strings.TrimPrefix(ok.URL, "http://")
	ok2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer ok2.Close()
	alive2 := strings.TrimPrefix(ok2.URL, "http://")
	members := []kvfleet.Worker{memberAt(alive), memberAt(alive2), memberAt("127.0.0.1:2")}
	if err := r.router.SetMembers(members); err != nil {
		t.Fatal(err)
	}
	r.withWorkers(t, alive, alive2, "127.0.0.1:2")
	r.router.health.probeAll(context.Background())
	for i := 0; i < 10; i++ {
		x, err := r.harness.Start(context.Background(), post(chatBody("qwen3", "route me")))
		if err != nil {
			t.Fatal(err)
		}
		if x.Forward == nil {
			t.Fatalf("not routed: %+v", x.Local)
		}
		if x.Forward.Upstream != alive && x.Forward.Upstream != alive2 {
			t.Fatalf("routed to %q, want only the healthy %s or %s", x.Forward.Upstream, alive, alive2)
		}
		finishResponse(t, x, x.Forward.Upstream)
	}
}

// fakeVLLMMetrics serves vLLM's /metrics page for model qwen3 with the
// engine's waiting and running requests and KV usage as waiting reads
// them at each scrape; it returns the engine's endpoint (host:port).
func fakeVLLMMetrics(t *testing.T, waiting func() int, running int, kvUsage float64) string {
	t.Helper()
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"qwen3\"} %d\n"+
			"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"qwen3\"} %d\n"+
			"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"qwen3\"} %g\n", waiting(), running, kvUsage)
	}))
	t.Cleanup(engine.Close)
	return strings.TrimPrefix(engine.URL, "http://")
}

// Engine-reported queue depths and KV usage reach the picker's inputs.
func TestEngineMetricsReachCandidates(t *testing.T) {
	ep := fakeVLLMMetrics(t, func() int { return 7 }, 3, 0.5)
	r := newRig(t, func(c *config.Config) {
		c.Extproc.EngineMetrics = enginemetrics.Config{Interval: yamlconf.Duration(20 * time.Millisecond), Staleness: yamlconf.Duration(time.Minute)}
	}, defaultHarnessConfig())
	if err := r.router.SetMembers([]kvfleet.Worker{memberAt(ep)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.router.engines.Run(ctx)
	var l picker.Load
	poll.True(t, "engine metrics to reach the candidates", 10*time.Second, func() bool {
		l = candidates(r.router, r.router.fleet.Load().pools["qwen3"], nil)[0].Load
		return l.HaveEngine
	})
	if l.Waiting != 7 || l.Running != 3 || l.KVUsage != 0.5 {
		t.Fatalf("engine signals %+v", l)
	}
}
