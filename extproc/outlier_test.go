package extproc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

func outlierConfig() extprocconfig.Outlier {
	c := extprocconfig.Outlier{}
	c.Consecutive5xx = 3
	c.ConsecutiveGatewayFailure = 2
	c.BaseEjectionTime = yamlconf.Duration(10 * time.Second)
	c.MaxEjectionTime = yamlconf.Duration(25 * time.Second)
	c.MaxEjectionPercent = 50
	c.SlowStart = yamlconf.Duration(20 * time.Second)
	c.SlowStartMinWeightPercent = 10
	return c
}

func fourHostDetector(cfg extprocconfig.Outlier) *outlierDetector {
	d := newOutlierDetector(cfg)
	d.setTargets(map[string]string{"a:1": "m", "b:1": "m", "c:1": "m", "d:1": "m"})
	return d
}

func TestOutlierConsecutiveCountsAndReset(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := fourHostDetector(outlierConfig())
	// 500 counts towards consecutive_5xx only (threshold 3).
	d.observe("a:1", 500, t0)
	d.observe("a:1", 500, t0)
	if ej, _ := d.state("a:1", t0); ej {
		t.Fatal("ejected after 2 of 3 consecutive 5xx")
	}
	d.observe("a:1", 200, t0) // a success resets the streak
	d.observe("a:1", 500, t0)
	d.observe("a:1", 500, t0)
	if ej, _ := d.state("a:1", t0); ej {
		t.Fatal("a success did not reset the 5xx streak")
	}
	d.observe("a:1", 500, t0)
	if ej, _ := d.state("a:1", t0); !ej {
		t.Fatal("not ejected after 3 consecutive 5xx")
	}
	// 503 is a gateway failure: threshold 2.
	d.observe("b:1", 503, t0)
	if ej, _ := d.state("b:1", t0); ej {
		t.Fatal("ejected after one gateway failure")
	}
	d.observe("b:1", 0, t0) // a local-origin failure (connect refused) is one too
	if ej, _ := d.state("b:1", t0); !ej {
		t.Fatal("not ejected after 2 consecutive gateway failures")
	}
	// 4xx are the client's fault: never counted.
	for range 10 {
		d.observe("c:1", 429, t0)
	}
	if ej, _ := d.state("c:1", t0); ej {
		t.Fatal("ejected for 4xx")
	}
	if n := testutil.ToFloat64(d.ejections.WithLabelValues("a:1")); n != 1 {
		t.Fatalf("ejections_total{a:1} = %v", n)
	}
}

// Ejection time is base × ejections, capped at max; the multiplier decays
// by one per base time spent un-ejected.
func TestOutlierEjectionTimeGrowsAndCaps(t *testing.T) {
	cfg := outlierConfig()
	d := fourHostDetector(cfg)
	now := time.Unix(1000, 0)
	ejectAt := func(at time.Time) {
		t.Helper()
		d.observe("a:1", 503, at)
		d.observe("a:1", 503, at)
		if ej, _ := d.state("a:1", at); !ej {
			t.Fatalf("not ejected at %v", at)
		}
	}
	wantBack := func(from time.Time, after time.Duration) time.Time {
		t.Helper()
		if ej, _ := d.state("a:1", from.Add(after-time.Millisecond)); !ej {
			t.Fatalf("back before %v", after)
		}
		back := from.Add(after)
		if ej, _ := d.state("a:1", back); ej {
			t.Fatalf("still ejected after %v", after)
		}
		return back
	}
	ejectAt(now)
	back := wantBack(now, 10*time.Second) // 1 × base
	ejectAt(back)
	back = wantBack(back, 20*time.Second) // 2 × base
	ejectAt(back)
	back = wantBack(back, 25*time.Second) // 3 × base = 30s, capped at 25s
	// 25 s un-ejected = two base times: the multiplier drops from 3 to 1,
	// so the next ejection is 2 × base.
	later := back.Add(25 * time.Second)
	ejectAt(later)
	wantBack(later, 20*time.Second)
}

// At most max_ejection_percent of a pool is out at once, counted as Envoy
// does: (ejected + 1) / hosts must stay within the bound.
func TestOutlierMaxEjectionPercent(t *testing.T) {
	now := time.Unix(1000, 0)
	d := fourHostDetector(outlierConfig()) // 50 % of 4 hosts: 2
	for _, ep := range []string{"a:1", "b:1", "c:1"} {
		d.observe(ep, 503, now)
		d.observe(ep, 503, now)
	}
	e, _ := d.counts(now)
	if e != 2 {
		t.Fatalf("%d ejected, want 2 (50 %% of 4)", e)
	}
	if ej, _ := d.state("c:1", now); ej {
		t.Fatal("third host ejected past the bound")
	}
	// Pools count separately, and a pool of one host is never emptied.
	d.setTargets(map[string]string{"a:1": "m", "b:1": "m", "c:1": "m", "d:1": "m", "solo:1": "other"})
	d.observe("solo:1", 503, now)
	d.observe("solo:1", 503, now)
	if ej, _ := d.state("solo:1", now); ej {
		t.Fatal("the only host of a pool was ejected")
	}
}

// After an ejection, and after a health check passes again, the weight
// ramps linearly from min_weight_percent to 1 over slow_start.
func TestOutlierSlowStartRampsLinearly(t *testing.T) {
	now := time.Unix(1000, 0)
	d := fourHostDetector(outlierConfig())
	d.observe("a:1", 503, now)
	d.observe("a:1", 503, now)
	back := now.Add(10 * time.Second)
	cases := []struct {
		after time.Duration
		want  float64
	}{{0, 0.1}, {time.Second, 0.1}, {5 * time.Second, 0.25}, {10 * time.Second, 0.5}, {15 * time.Second, 0.75}, {20 * time.Second, 1}, {time.Hour, 1}}
	for _, c := range cases {
		ej, w := d.state("a:1", back.Add(c.after))
		if ej || w < c.want-1e-9 || w > c.want+1e-9 {
			t.Errorf("%v after un-ejection: ejected %v weight %v, want %v", c.after, ej, w, c.want)
		}
	}
	d.recovered("b:1", now)
	if _, w := d.state("b:1", now.Add(10*time.Second)); w < 0.5-1e-9 || w > 0.5+1e-9 {
		t.Errorf("half way through a health-check recovery: weight %v, want 0.5", w)
	}
	cfg := outlierConfig()
	cfg.SlowStartDisabled = true
	d = fourHostDetector(cfg)
	d.recovered("b:1", now)
	if _, w := d.state("b:1", now); w != 1 {
		t.Errorf("slow start disabled: weight %v", w)
	}
}

// A health check passing again ends an ejection at once (a restarted
// engine), then slow-starts the endpoint.
func TestOutlierHealthCheckRecoveryUnejects(t *testing.T) {
	now := time.Unix(1000, 0)
	d := fourHostDetector(outlierConfig())
	d.observe("a:1", 503, now)
	d.observe("a:1", 503, now)
	if ej, _ := d.state("a:1", now.Add(time.Second)); !ej {
		t.Fatal("two 503s in a row did not eject a:1")
	}
	back := now.Add(2 * time.Second)
	d.recovered("a:1", back)
	if ej, w := d.state("a:1", back); ej || w < 0.1-1e-9 || w > 0.1+1e-9 {
		t.Fatalf("right after the health check passed: ejected %v weight %v, want not ejected, weight 0.1", ej, w)
	}
	if _, w := d.state("a:1", back.Add(10*time.Second)); w < 0.5-1e-9 || w > 0.5+1e-9 {
		t.Errorf("half way through the slow start: weight %v, want 0.5", w)
	}
}

// The proxy walking past the primary to a fallback means the primary
// failed locally (connect refused); the fallback's answer counts for it.
func TestOutlierAttributesFallbackWalk(t *testing.T) {
	now := time.Unix(1000, 0)
	d := fourHostDetector(outlierConfig())
	d.observeRequest("a:1", []string{"b:1", "c:1"}, "c:1", 200, now)
	d.observeRequest("a:1", []string{"b:1", "c:1"}, "c:1", 200, now)
	for _, ep := range []string{"a:1", "b:1"} {
		if ej, _ := d.state(ep, now); !ej {
			t.Errorf("%s walked past twice (gateway threshold 2) but not ejected", ep)
		}
	}
	if ej, _ := d.state("c:1", now); ej {
		t.Error("the fallback that served 200 was ejected")
	}
	// No response seen (client cancel): nothing counted.
	d = fourHostDetector(outlierConfig())
	for range 5 {
		d.observeRequest("a:1", nil, "", 0, now)
	}
	if ej, _ := d.state("a:1", now); ej {
		t.Error("client cancels ejected a worker")
	}
}

// Through the real request path: upstream 503s observed on the response
// path eject the worker, which then gets no traffic at all (not even as a
// fallback), and the metrics say so.
func TestRouterEjectsFailingWorker(t *testing.T) {
	r := newRig(t, func(c *config.Config) {
		c.Extproc.HealthCheck.Disabled = true
		c.Extproc.Outlier = outlierConfig()
	}, envoyharness.DefaultConfig())
	clock := time.Unix(5000, 0)
	r.router.now = func() time.Time { return clock }
	bad := ""
	for i := 0; i < 40 && bad == ""; i++ {
		// A prompt shorter than one block: no prefix to hold, so load alone
		// spreads the requests and the failing worker gets its share (with
		// chatBody's shared system prompt, the pending credit of the first
		// request's worker would draw them all there).
		x, err := r.harness.Start(context.Background(), post(shortBody(i)))
		if err != nil {
			t.Fatal(err)
		}
		if x.Forward == nil {
			t.Fatalf("not routed: %+v", x.Local)
		}
		up := x.Forward.Upstream
		code := 200
		if up == workers[1] {
			code = 503 // this worker fails every request
		}
		if _, err := x.RespondHeaders(code, []envoyharness.Header{{Name: "x-envoy-upstream-service-time", Value: "3"}}, true); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := x.Close(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		waitIdle(t, r.router)
		if ej, _ := r.router.outlier.state(workers[1], clock); ej {
			bad = workers[1]
		}
	}
	if bad == "" {
		t.Fatal("the failing worker was never ejected")
	}
	for i := 0; i < 20; i++ {
		x, err := r.harness.Start(context.Background(), post(chatBody("qwen3", "after ejection "+strings.Repeat("y", i))))
		if err != nil {
			t.Fatal(err)
		}
		if x.Forward == nil {
			t.Fatalf("not routed: %+v", x.Local)
		}
		dest, _ := envoyharness.Get(x.Forward.Headers, "x-gateway-destination-endpoint")
		for _, ep := range strings.Split(dest, ",") {
			if ep == bad {
				t.Fatalf("ejected worker %s offered (destination %s)", bad, dest)
			}
		}
		x.Cancel()
		<-x.Done()
	}
	reg := prometheus.NewRegistry()
	if err := r.router.Register(reg); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(r.router.outlier.ejections.WithLabelValues(bad)); n != 1 {
		t.Fatalf("kvgate_extproc_outlier_ejections_total{worker=%q} = %v", bad, n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP kvgate_extproc_workers_ejected Worker endpoints ejected by passive outlier detection now.
# TYPE kvgate_extproc_workers_ejected gauge
kvgate_extproc_workers_ejected 1
`), "kvgate_extproc_workers_ejected"); err != nil {
		t.Fatal(err)
	}
	// Past the ejection (base 10 s) it is back, slow-starting: at 10 %
	// weight it is left out of most picks but not all.
	clock = clock.Add(10 * time.Second)
	picked := 0
	for i := 0; i < 200; i++ {
		cands := candidates(r.router, r.router.fleet.Load().pools["qwen3"], nil)
		for _, c := range cands {
			if c.Worker.Endpoint == bad && !c.Worker.Warming {
				picked++
			}
		}
	}
	// Binomial(200, 0.1): mean 20, P(outside [4, 45]) < 1e-6.
	if picked < 4 || picked > 45 {
		t.Fatalf("slow-starting worker eligible in %d of 200 picks at weight 0.1", picked)
	}
	clock = clock.Add(20 * time.Second)
	for _, c := range candidates(r.router, r.router.fleet.Load().pools["qwen3"], nil) {
		if c.Worker.Warming {
			t.Fatalf("still warming after slow_start: %+v", c.Worker)
		}
	}
}

// shortBody is a chat request under one block of the rig's model.
func shortBody(i int) []byte {
	return []byte(fmt.Sprintf(`{"model":"qwen3","stream":true,"messages":[{"role":"user","content":"q%d"}]}`, i))
}
