package extproc

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// slowHealthEngine answers /health only after delay, everything else at
// once: an engine that serves while its probes, on a starved machine, come
// back later than extproc.health_check.timeout.
func slowHealthEngine(t *testing.T, delay time.Duration) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// Issue 31, finding 4: the intermittent 503 no_eligible_worker with every
// engine up. Cause: the health checker marks an engine unhealthy after
// unhealthy_after probes in a row that did not answer within timeout (1 s
// and 2 by default), and a loaded machine delays every probe alike, so all
// engines went unhealthy together and the picker had no one left. Here the
// probes of three idle engines answer after 300 ms against a 50 ms
// timeout; a BUFFERED request must still be routed (Envoy's panic
// threshold: fewer than half healthy → choose among all), counted and
// logged.
func TestSlowProbesOnEveryEngineDoNotStopRouting(t *testing.T) {
	eps := []string{slowHealthEngine(t, 300*time.Millisecond), slowHealthEngine(t, 300*time.Millisecond), slowHealthEngine(t, 300*time.Millisecond)}
	r := newRig(t, func(c *config.Config) {
		// A default extproc but for the probe timeout, which stands in for
		// the load (interval: probes run when the test says).
		c.Extproc.HealthCheck = extprocconfig.HealthCheck{Interval: yamlconf.Duration(time.Hour), Timeout: yamlconf.Duration(50 * time.Millisecond), UnhealthyAfter: 2, Path: "/health"}
	}, bufferedConfig())
	members := []kvfleet.Worker{memberAt(eps[0]), memberAt(eps[1]), memberAt(eps[2])}
	if err := r.router.SetMembers(members); err != nil {
		t.Fatal(err)
	}
	r.withWorkers(t, eps...)
	for range 2 {
		r.router.health.probeAll(context.Background())
	}
	for _, ep := range eps {
		if r.router.health.healthy(ep) {
			t.Fatalf("%s still healthy after two probes past the timeout: the test does not reproduce the cause", ep)
		}
	}
	for i := range 6 {
		x, err := r.harness.Start(context.Background(), post(chatBody("qwen3", "route me")))
		if err != nil {
			t.Fatal(err)
		}
		if x.Forward == nil {
			t.Fatalf("request %d with every engine up but its probes slow: local reply %d %q (%s)", i, x.Local.Status, x.Local.Body, x.Local.Cause)
		}
		finishResponse(t, x, x.Forward.Upstream)
	}
	if got := testutil.ToFloat64(r.router.panics.counter.WithLabelValues("qwen3")); got != 6 {
		t.Errorf("kvgate_extproc_healthy_panic_total{model=qwen3} = %v, want 6", got)
	}
	waitIdle(t, r.router)
}

// Above the threshold nothing changes: with two of three engines healthy
// (67 % ≥ 50 %) the unhealthy one gets no request.
func TestUnhealthyEngineStaysOutAboveThePanicThreshold(t *testing.T) {
	// A generous timeout: the two healthy engines must pass on a loaded
	// machine; the third answers long after it.
	eps := []string{slowHealthEngine(t, 0), slowHealthEngine(t, 0), slowHealthEngine(t, time.Minute)}
	r := newRig(t, func(c *config.Config) {
		c.Extproc.HealthCheck = extprocconfig.HealthCheck{Interval: yamlconf.Duration(time.Hour), Timeout: yamlconf.Duration(time.Second), UnhealthyAfter: 2, Path: "/health"}
	}, defaultHarnessConfig())
	if err := r.router.SetMembers([]kvfleet.Worker{memberAt(eps[0]), memberAt(eps[1]), memberAt(eps[2])}); err != nil {
		t.Fatal(err)
	}
	r.withWorkers(t, eps...)
	for range 2 {
		r.router.health.probeAll(context.Background())
	}
	for i := range 10 {
		x, err := r.harness.Start(context.Background(), post(chatBody("qwen3", "route me")))
		if err != nil {
			t.Fatal(err)
		}
		if x.Forward == nil {
			t.Fatalf("request %d not routed: %+v", i, x.Local)
		}
		if x.Forward.Upstream == eps[2] {
			t.Fatalf("request %d routed to the unhealthy %s with two healthy engines left", i, eps[2])
		}
		finishResponse(t, x, x.Forward.Upstream)
	}
	if got := testutil.ToFloat64(r.router.panics.counter.WithLabelValues("qwen3")); got != 0 {
		t.Errorf("panic counted %v times above the threshold", got)
	}
}
