package extproc

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/enginemetrics"
	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/extproc/loadview"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// flowRig is a router whose pool is saturated at one request in flight
// (admission.max_inflight 1): with flow control on, the rest wait. The
// recheck is an hour: only a booking's end can wake a waiting request, so
// the tests show the wake-up, not a poll.
func flowRig(t *testing.T, mutate func(c *config.Config)) *rig {
	t.Helper()
	return newRig(t, func(c *config.Config) {
		c.Extproc.Admission.MaxInflight = 1
		c.Extproc.Admission.PriorityHeader = "x-prio"
		c.Extproc.FlowControl.Recheck = yamlconf.Duration(time.Minute)
		c.Extproc.FlowControl.Tenant = "header:x-tenant"
		if mutate != nil {
			mutate(c)
		}
	}, envoyharness.DefaultConfig())
}

func waitQueued(t *testing.T, r *Router, n int) {
	t.Helper()
	poll.Until(t, fmt.Sprintf("%d requests to wait", n), 10*time.Second, func() error {
		if got := r.flow.queued("qwen3"); got != n {
			return fmt.Errorf("%d waiting", got)
		}
		return nil
	})
}

type harnessResult struct {
	x   *envoyharness.Exchange
	err error
}

// startHeld sends one request through the harness (a real ext_proc
// stream) and returns once it waits in the queue, as the n-th.
func startHeld(t *testing.T, r *rig, ctx context.Context, body []byte, n int) <-chan harnessResult {
	t.Helper()
	ch := make(chan harnessResult, 1)
	go func() {
		x, err := r.harness.Start(ctx, post(body))
		ch <- harnessResult{x, err}
	}()
	waitQueued(t, r.router, n)
	return ch
}

// The flow-control behaviours that share one configuration share one rig
// (loading the tokenizer is most of a rig's cost); each leaves the pool
// idle and the queue empty.
func TestFlowControl(t *testing.T) {
	r := flowRig(t, nil)
	for name, f := range map[string]func(*testing.T, *rig){
		"held request routed when capacity frees": flowHeldRequestRoutedWhenCapacityFrees,
		"cancel while queued":                     flowCancelWhileQueued,
		"fairness across tenants":                 flowFairnessAcrossTenants,
		"band order":                              flowBandOrder,
	} {
		t.Run(name, func(t *testing.T) {
			f(t, r)
			waitQueued(t, r.router, 0)
			if st := r.router.Load().Stats(); st.Open != 0 {
				t.Fatalf("%d tickets left open", st.Open)
			}
		})
	}
}

// A request of a saturated pool is held on its stream, not refused, and
// answered with a route once the request in flight ends.
func flowHeldRequestRoutedWhenCapacityFrees(t *testing.T, r *rig) {
	dispatched := r.router.metrics.flow.requests.WithLabelValues("standard", flowDispatched)
	before := testutil.ToFloat64(dispatched)
	holder, rerr := decideWith(t, r.router, 0, nil)
	if rerr != nil {
		t.Fatalf("first request: %d %s", rerr.Status, rerr.Body)
	}
	held := startHeld(t, r, context.Background(), chatBody("qwen3", "A question that has to wait its turn."), 1)
	select {
	case res := <-held:
		t.Fatalf("answered while the pool was saturated: %+v %v", res.x, res.err)
	default:
	}
	holder.Ticket.Finish(server.OutcomeOK) // the wake-up
	res := <-held
	if res.err != nil || res.x.Forward == nil {
		t.Fatalf("held request not routed: %v %+v", res.err, res.x)
	}
	if got := testutil.ToFloat64(dispatched) - before; got != 1 {
		t.Errorf("dispatched %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.router.metrics.flow.depth.WithLabelValues("standard")); got != 0 {
		t.Errorf("queue depth gauge %v after dispatch, want 0", got)
	}
	res.x.Cancel()
	<-res.x.Done()
	waitIdle(t, r.router) // the dispatched request's ticket closes
}

// A client that leaves while its request waits takes it out of the
// queue: nothing is left behind, and nothing is dispatched for it.
func flowCancelWhileQueued(t *testing.T, r *rig) {
	cancelled := r.router.metrics.flow.requests.WithLabelValues("standard", flowCancelled)
	dispatched := r.router.metrics.flow.requests.WithLabelValues("standard", flowDispatched)
	beforeC, beforeD := testutil.ToFloat64(cancelled), testutil.ToFloat64(dispatched)
	holder, rerr := decideWith(t, r.router, 0, nil)
	if rerr != nil {
		t.Fatal(rerr.Status)
	}
	ctx, cancel := context.WithCancel(context.Background())
	held := startHeld(t, r, ctx, chatBody("qwen3", "A question whose asker gives up."), 1)
	cancel()
	<-held
	waitQueued(t, r.router, 0)
	if got := testutil.ToFloat64(cancelled) - beforeC; got != 1 {
		t.Errorf("cancelled %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.router.metrics.flow.depth.WithLabelValues("standard")); got != 0 {
		t.Errorf("queue depth gauge %v, want 0", got)
	}
	holder.Ticket.Finish(server.OutcomeOK)
	if got := testutil.ToFloat64(dispatched) - beforeD; got != 0 {
		t.Errorf("a cancelled request was dispatched (%v)", got)
	}
	// The pool is free again and the queue empty: the next goes at once.
	d, rerr := decideWith(t, r.router, 1, nil)
	if rerr != nil {
		t.Fatalf("after the cancel: %d %s", rerr.Status, rerr.Body)
	}
	d.Ticket.Finish(server.OutcomeOK)
}

// The queue's bounds refuse at once with 429 and Retry-After, saying which
// bound; a request that cannot start within max_wait is refused the same
// way when its deadline passes.
func TestFlowBoundsAnswer429WithRetryAfter(t *testing.T) {
	body := chatBody("qwen3", "A question that may not even queue.")
	for _, tc := range []struct {
		name   string
		set    func(c *config.Config)
		queued int // waiting before the refused one
		reason string
	}{
		{"max_requests", func(c *config.Config) { c.Extproc.FlowControl.MaxRequests = 1 }, 1, "flow-control queue full (max_requests)"},
		{"max_bytes", func(c *config.Config) { c.Extproc.FlowControl.MaxBytes = int64(len(body)) + 10 }, 1, "flow-control queue full (max_bytes)"},
		{"deadline", func(c *config.Config) {
			c.Extproc.FlowControl.MaxWait = yamlconf.Duration(50 * time.Millisecond)
			c.Extproc.FlowControl.RetryAfter = yamlconf.Duration(3 * time.Second)
		}, 0, "could not start within flow_control.max_wait (50ms)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := flowRig(t, tc.set)
			holder, rerr := decideWith(t, r.router, 0, nil)
			if rerr != nil {
				t.Fatal(rerr.Status)
			}
			var held <-chan harnessResult
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.queued > 0 {
				held = startHeld(t, r, ctx, body, 1)
			}
			x, err := r.harness.Start(context.Background(), post(body))
			if err != nil {
				t.Fatal(err)
			}
			if x.Local == nil || x.Local.Status != http.StatusTooManyRequests {
				t.Fatalf("want a 429, got %+v %+v", x.Local, x.Forward)
			}
			reason, _ := envoyharness.Get(x.Local.Headers, "x-kvgate-shed-reason")
			retry, _ := envoyharness.Get(x.Local.Headers, "retry-after")
			wantRetry := "1"
			if tc.name == "deadline" {
				wantRetry = "3"
			}
			if reason != tc.reason || retry != wantRetry {
				t.Fatalf("reason %q retry-after %q, want %q and %q", reason, retry, tc.reason, wantRetry)
			}
			if !strings.Contains(string(x.Local.Body), "rate_limit_exceeded") {
				t.Errorf("body %s", x.Local.Body)
			}
			cancel()
			if held != nil {
				<-held
			}
			waitQueued(t, r.router, 0)
			holder.Ticket.Finish(server.OutcomeOK)
		})
	}
}

type decideResult struct {
	name string
	d    *server.Decision
	rerr *server.RouteError
}

// enqueueInOrder starts each request in turn and waits until it is queued,
// so the queue sees them in this order.
func enqueueInOrder(t *testing.T, r *Router, reqs []struct{ name, tenant, prio string }) <-chan decideResult {
	t.Helper()
	out := make(chan decideResult, len(reqs))
	for i, q := range reqs {
		h := map[string]string{"content-type": "application/json", "x-tenant": q.tenant}
		if q.prio != "" {
			h["x-prio"] = q.prio
		}
		body := chatBody("qwen3", "Request "+q.name+" of "+q.tenant+" asks about fairness.")
		go func() {
			d, rerr := r.Decide(context.Background(), &server.Request{Method: "POST", Path: "/v1/chat/completions", Body: body, Headers: h, RequestID: q.name})
			out <- decideResult{q.name, d, rerr}
		}()
		waitQueued(t, r, i+1)
	}
	return out
}

// dispatchOrder frees the pool one request at a time and records which
// waiting request is routed next.
func dispatchOrder(t *testing.T, holder *server.Decision, out <-chan decideResult, n int) []string {
	t.Helper()
	var order []string
	for range n {
		holder.Ticket.Finish(server.OutcomeOK)
		res := <-out
		if res.rerr != nil {
			t.Fatalf("%s: %d %s", res.name, res.rerr.Status, res.rerr.Body)
		}
		order = append(order, res.name)
		holder = res.d
	}
	holder.Ticket.Finish(server.OutcomeOK)
	return order
}

// A tenant with many waiting requests cannot starve another: the queue
// serves tenants in turn, so the quiet tenant's request is second to go,
// not behind all of the noisy one's.
func flowFairnessAcrossTenants(t *testing.T, r *rig) {
	holder, rerr := decideWith(t, r.router, 0, nil)
	if rerr != nil {
		t.Fatal(rerr.Status)
	}
	out := enqueueInOrder(t, r.router, []struct{ name, tenant, prio string }{
		{"n1", "noisy", ""}, {"n2", "noisy", ""}, {"n3", "noisy", ""}, {"q1", "quiet", ""}, {"n4", "noisy", ""}, {"q2", "quiet", ""},
	})
	if got, want := fmt.Sprint(dispatchOrder(t, holder, out, 6)), "[n1 q1 n2 q2 n3 n4]"; got != want {
		t.Fatalf("dispatch order %s, want %s", got, want)
	}
}

// A higher priority band leaves first, whoever arrived earlier.
func flowBandOrder(t *testing.T, r *rig) {
	holder, rerr := decideWith(t, r.router, 0, nil)
	if rerr != nil {
		t.Fatal(rerr.Status)
	}
	out := enqueueInOrder(t, r.router, []struct{ name, tenant, prio string }{
		{"batch", "a", "-1"}, {"standard", "a", "0"}, {"critical", "b", "10"},
	})
	if got, want := fmt.Sprint(dispatchOrder(t, holder, out, 3)), "[critical standard batch]"; got != want {
		t.Fatalf("dispatch order %s, want %s", got, want)
	}
}

// The tenant key never keeps what identifies it: the API key is hashed,
// and an absent source is the one shared flow.
func TestFlowKeyHashesTenant(t *testing.T) {
	req := &server.Request{Headers: map[string]string{"authorization": "Bearer sk-secret", "x-tenant": "acme"}, Body: []byte(`{"user":"alice"}`)}
	k := flowKeyOf("api_key", req, nil)
	if k == "" || strings.Contains(k, "sk-secret") || len(k) != 16 {
		t.Fatalf("api key flow %q", k)
	}
	if u := flowKeyOf("user", req, nil); u == "" || u == k || u == flowKeyOf("user", &server.Request{Body: []byte(`{"user":"bob"}`)}, nil) {
		t.Fatalf("user flow %q", u)
	}
	if flowKeyOf("header:x-tenant", req, nil) == flowKeyOf("header:x-other", req, nil) {
		t.Fatal("an absent header got a tenant")
	}
	if flowKeyOf("", req, nil) != "" {
		t.Fatal("no tenant configured, yet a flow key")
	}
}

// Saturation is judged per worker from the load the picker weighs: with
// every worker past saturation.max_queued_prefill_tokens (and no admission
// bound), a request waits; when one worker's queue drains — load released
// outside kvgate's tickets, so only the recheck can see it — it is routed.
func TestFlowWaitsWhileEveryWorkerSaturated(t *testing.T) {
	r := newRig(t, func(c *config.Config) {
		c.Extproc.FlowControl.Saturation.MaxQueuedPrefillTokens = 1000
		c.Extproc.FlowControl.Recheck = yamlconf.Duration(20 * time.Millisecond)
	}, envoyharness.DefaultConfig())
	var pinned []*loadview.Ticket
	for _, w := range workers {
		pinned = append(pinned, r.router.load.Begin(kvfleet.WorkerID{Endpoint: w}, 1000, 0, time.Now()))
	}
	held := startHeld(t, r, context.Background(), chatBody("qwen3", "A question for a saturated fleet."), 1)
	pinned[1].Finish(loadview.OutcomeCompleted)
	res := <-held
	if res.err != nil || res.x.Forward == nil {
		t.Fatalf("not routed once a worker had room: %v %+v", res.err, res.x)
	}
	res.x.Cancel()
	<-res.x.Done()
	for _, tk := range pinned {
		tk.Finish(loadview.OutcomeCompleted)
	}
}

// With saturation.pool_mean_score (GIE's utilization detector: the mean of
// the workers' max(engine waiting ÷ bound, KV usage ÷ bound)) a request
// waits while one worker still has room, once the others' engine queues
// are deep enough: two engines with 10 waiting (score 5 at
// max_engine_waiting 2) and one idle, mean 3.33 ≥ 3. When one deep engine
// drains (seen at the next scrape, outside kvgate's tickets: the recheck
// notices it), the mean falls to 1.67 and the request is routed.
func TestFlowWaitsOnThePoolsMeanScore(t *testing.T) {
	var waiting [3]atomic.Int64
	waiting[0].Store(10)
	waiting[1].Store(10)
	var members []kvfleet.Worker
	for i := range waiting {
		members = append(members, memberAt(fakeVLLMMetrics(t, func() int { return int(waiting[i].Load()) }, 4, 0.3)))
	}
	r := newRig(t, func(c *config.Config) {
		c.Extproc.EngineMetrics = enginemetrics.Config{Interval: yamlconf.Duration(20 * time.Millisecond), Staleness: yamlconf.Duration(time.Minute)}
		c.Extproc.FlowControl.Recheck = yamlconf.Duration(20 * time.Millisecond)
	}, envoyharness.DefaultConfig())
	if err := r.router.SetMembers(members); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.router.engines.Run(ctx)
	poll.True(t, "every engine's metrics to reach the candidates", 10*time.Second, func() bool {
		for _, c := range candidates(r.router, r.router.fleet.Load().pools["qwen3"], nil) {
			if !c.Load.HaveEngine {
				return false
			}
		}
		return true
	})
	if got := r.router.saturation.PoolMeanScore; got != extprocconfig.DefaultFlowPoolMeanScore {
		t.Fatalf("pool_mean_score %g, want the default %g", got, extprocconfig.DefaultFlowPoolMeanScore)
	}
	held := startHeld(t, r, context.Background(), chatBody("qwen3", "A question for a pool with one idle worker."), 1)
	waiting[1].Store(0)
	res := <-held
	if res.err != nil || res.x.Forward == nil {
		t.Fatalf("not routed once the mean score fell: %v %+v", res.err, res.x)
	}
	if got := flowCount(r.router, flowDispatched); got != 1 {
		t.Errorf("dispatched count %g, want 1", got)
	}
	res.x.Cancel()
	<-res.x.Done()
}

// queued (tests only) is the number of requests waiting in pool model.
func (g *flowGate) queued(model string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.pools[model]; p != nil {
		return p.q.Len()
	}
	return 0
}

// flowCount reads kvgate_flow_requests_total for band standard.
func flowCount(r *Router, outcome string) float64 {
	return testutil.ToFloat64(r.metrics.flow.requests.WithLabelValues("standard", outcome))
}

// A client's TTFT budget (x-slo-ttft-ms, llm-d's SLO header) bounds its
// wait to the budget's share (deadline_queue_share 0.75): a request whose
// share passes while the pool is saturated is refused then, never
// dispatched after it; once the queue has a drain rate, a request whose
// queue ahead cannot drain within its share is refused at arrival; a
// malformed budget is a 400. Steps in order on one rig: the drain rate is
// the pool's history.
func TestFlowDeadlineHeader(t *testing.T) {
	r := flowRig(t, nil)
	body := chatBody("qwen3", "A question with a deadline.")

	// A malformed budget: 400 in OpenAI's shape, counted.
	invalid := r.router.metrics.flow.deadlines.WithLabelValues(deadlineInvalid)
	before := testutil.ToFloat64(invalid)
	x, err := r.harness.Start(context.Background(), post(body, envoyharness.Header{Name: "x-slo-ttft-ms", Value: "soon"}))
	if err != nil {
		t.Fatal(err)
	}
	if x.Local == nil || x.Local.Status != http.StatusBadRequest || !strings.Contains(string(x.Local.Body), "invalid_request_error") ||
		!strings.Contains(string(x.Local.Body), `x-slo-ttft-ms: TTFT budget \"soon\": want whole milliseconds in [1, 3600000]`) {
		t.Fatalf("malformed budget: %+v %+v", x.Local, x.Forward)
	}
	if got := testutil.ToFloat64(invalid) - before; got != 1 {
		t.Errorf("invalid deadlines counted %v, want 1", got)
	}

	// A budget of 200 ms while the pool stays saturated: refused at its
	// 150 ms share, and not dispatched when the pool frees.
	holder, rerr := decideWith(t, r.router, 0, nil)
	if rerr != nil {
		t.Fatal(rerr.Status)
	}
	shedBefore, dispBefore := flowCount(r.router, flowShedDeadline), flowCount(r.router, flowDispatched)
	x, err = r.harness.Start(context.Background(), post(body, envoyharness.Header{Name: "x-slo-ttft-ms", Value: "200"}))
	if err != nil {
		t.Fatal(err)
	}
	reason, _ := envoyharness.Get(x.Local.Headers, "x-kvgate-shed-reason")
	if x.Local == nil || x.Local.Status != http.StatusTooManyRequests || !strings.HasPrefix(reason, "could not start within 150ms, its share") {
		t.Fatalf("a 200 ms budget on a saturated pool: %+v reason %q", x.Local, reason)
	}
	if retry, _ := envoyharness.Get(x.Local.Headers, "retry-after"); retry != "1" {
		t.Errorf("retry-after %q, want 1", retry)
	}
	waitQueued(t, r.router, 0)
	holder.Ticket.Finish(server.OutcomeOK)
	if got := flowCount(r.router, flowShedDeadline) - shedBefore; got != 1 {
		t.Errorf("shed_deadline %v, want 1", got)
	}
	if got := flowCount(r.router, flowDispatched) - dispBefore; got != 0 {
		t.Errorf("dispatched %v after its deadline, want 0", got)
	}

	// The drain rate: one request waits at least 400 ms for the pool.
	holder, rerr = decideWith(t, r.router, 1, nil)
	if rerr != nil {
		t.Fatal(rerr.Status)
	}
	first := startHeld(t, r, context.Background(), chatBody("qwen3", "The first to wait."), 1)
	time.Sleep(400 * time.Millisecond)
	holder.Ticket.Finish(server.OutcomeOK)
	res := <-first
	if res.err != nil || res.x.Forward == nil {
		t.Fatalf("the first waiting request was not routed: %v %+v", res.err, res.x)
	}
	// It is in flight; one more waits without a budget; a 400 ms budget
	// (300 ms share) behind it cannot be met at ≥ 400 ms per dispatch (two
	// dispatches: ≥ 800 ms).
	ctx, cancel := context.WithCancel(context.Background())
	second := startHeld(t, r, ctx, chatBody("qwen3", "The second to wait."), 1)
	unreachable := flowCount(r.router, flowShedUnreachable)
	x, err = r.harness.Start(context.Background(), post(body, envoyharness.Header{Name: "x-slo-ttft-ms", Value: "400"}))
	if err != nil {
		t.Fatal(err)
	}
	reason, _ = envoyharness.Get(x.Local.Headers, "x-kvgate-shed-reason")
	if x.Local == nil || x.Local.Status != http.StatusTooManyRequests || !strings.Contains(reason, "of requests wait ahead") {
		t.Fatalf("an unreachable budget: %+v reason %q", x.Local, reason)
	}
	if got := flowCount(r.router, flowShedUnreachable) - unreachable; got != 1 {
		t.Errorf("shed_deadline_unreachable %v, want 1", got)
	}
	if n := r.router.flow.queued("qwen3"); n != 1 {
		t.Errorf("%d waiting after the refusal at arrival, want 1 (it never queued)", n)
	}
	cancel()
	<-second
	waitQueued(t, r.router, 0)
	res.x.Cancel()
	<-res.x.Done()
	waitIdle(t, r.router) // the dispatched request's ticket closes
}

// A full queue (max_requests 2, both the noisy tenant's) makes room for a
// quiet tenant's request by pushing out the noisy tenant's newest, which
// is answered 429 at once; the quiet one then takes its turn.
func TestFlowPushOutAcrossTenants(t *testing.T) {
	r := flowRig(t, func(c *config.Config) { c.Extproc.FlowControl.MaxRequests = 2 })
	holder, rerr := decideWith(t, r.router, 0, nil)
	if rerr != nil {
		t.Fatal(rerr.Status)
	}
	pushedBefore := flowCount(r.router, flowShedPushedOut)
	out := make(chan decideResult, 3)
	for i, q := range []struct{ name, tenant string }{{"n1", "noisy"}, {"n2", "noisy"}, {"q1", "quiet"}} {
		h := map[string]string{"content-type": "application/json", "x-tenant": q.tenant}
		body := chatBody("qwen3", "Request "+q.name+" of "+q.tenant+" asks for room.")
		go func() {
			d, rerr := r.router.Decide(context.Background(), &server.Request{Method: "POST", Path: "/v1/chat/completions", Body: body, Headers: h, RequestID: q.name})
			out <- decideResult{q.name, d, rerr}
		}()
		if i < 2 {
			waitQueued(t, r.router, i+1)
		}
	}
	pushed := <-out
	if pushed.name != "n2" || pushed.rerr == nil || pushed.rerr.Status != http.StatusTooManyRequests ||
		pushed.rerr.Headers["x-kvgate-shed-reason"] != "pushed out of the full flow-control queue by a request of a lighter tenant or a higher band" {
		t.Fatalf("first answer %s: %+v", pushed.name, pushed.rerr)
	}
	if got := flowCount(r.router, flowShedPushedOut) - pushedBefore; got != 1 {
		t.Errorf("shed_pushed_out %v, want 1", got)
	}
	waitQueued(t, r.router, 2)
	if got, want := fmt.Sprint(dispatchOrder(t, holder, out, 2)), "[n1 q1]"; got != want {
		t.Fatalf("dispatch order %s, want %s", got, want)
	}
	waitQueued(t, r.router, 0)
}
