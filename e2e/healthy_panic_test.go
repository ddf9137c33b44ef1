package e2e

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// Issue 31, finding 4: an intermittent 503 no_eligible_worker with every
// engine up, in `make run` and against three idle engines, only on a loaded
// machine. The cause: extproc's health checker marks an engine unhealthy
// after unhealthy_after (2) probes in a row that did not answer within
// timeout (1 s); a starved machine delays every probe alike, so every
// engine went unhealthy at once and the picker had no one to pick (the
// demo's round-robin fleet has one "engine", the balancer, so one slow
// pair of probes was enough). Here the probe timeout (1 µs) stands in for
// the load: every probe of three real, idle enginesim processes times out
// while they serve. Requests through the gateway playing envoy.yaml must
// still be answered — Envoy's panic threshold (below 50 % healthy, route
// to all) — and the panic counted and logged by the real extproc process.
func TestEveryEngineFailingProbesStillServes(t *testing.T) {
	f := startFleet(t, fleetOptions{engines: 3, extproc: map[string]any{
		"health_check": map[string]any{"interval": "100ms", "timeout": "1us", "unhealthy_after": 2},
	}})
	poll.Until(t, "every engine marked unhealthy by its timed-out probes", 30*time.Second, func() error {
		m, err := scrape("http://" + f.admin + "/metrics")
		if err != nil {
			return err
		}
		for _, e := range f.engines {
			if m[`kvgate_extproc_worker_marked_unhealthy_total{endpoint="`+e.endpoint+`"}`] < 1 {
				return fmt.Errorf("%s not marked unhealthy yet (probes: %v failed)", e.endpoint, m[`kvgate_extproc_health_probes_total{result="failed"}`])
			}
		}
		return nil
	})
	rng := rand.New(rand.NewPCG(31, 4))
	const n = 12
	for i := range n {
		if _, err := f.complete(randomTokens(rng, 48), 2, false); err != nil {
			t.Fatalf("request %d with every engine up and failing only its probes: %v", i, err)
		}
	}
	m, err := scrape("http://" + f.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if got := m["kvgate_extproc_healthy_panic_total"]; got < n {
		t.Errorf("kvgate_extproc_healthy_panic_total = %v, want >= %d", got, n)
	}
	if out := f.extproc.Output(); !strings.Contains(out, "healthy panic") {
		t.Errorf("the extproc logged no healthy panic line:\n%s", out)
	}
}
