package extproc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/loadview"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// A disaggregated request holds load on two workers (prefill tokens on the
// prefill worker until the first token, the decode footprint on the decode
// worker until the end). A client that leaves at any phase after routing
// releases both at once, and each leg is recorded as canceled — or, once
// the first token has passed, the prefill leg as completed.
func TestCancelledPDRequestReleasesBothLegs(t *testing.T) {
	r := newRig(t, func(c *config.Config) {
		c.Extproc.PD.Enabled = true
		c.Extproc.PD.MinUncachedTokens = 256
		c.Extproc.HealthCheck.Disabled = true
		c.Engines[0].Role = "prefill"
		c.Engines[1].Role = "decode"
		c.Engines[2].Role = "decode"
	}, defaultHarnessConfig())
	// Queued prefill work on the decode workers makes the split pay.
	var pinned []*loadview.Ticket
	for _, w := range workers[1:] {
		pinned = append(pinned, r.router.load.Begin(kvfleet.WorkerID{Endpoint: w}, 200000, 0, time.Now()))
	}
	base := r.router.Load().Stats()
	// Each phase asks its own question: a repeat would be credited to the
	// earlier phase's decode worker as pending (pendingcredit.go) and, with
	// little left to prefill, not split.
	long := func(phase string) []byte {
		return chatBody("qwen3", phase+": "+strings.Repeat("An uncached question about the contract's clauses. ", 120))
	}
	phases := []struct {
		name         string
		run          func(x *envoyharness.Exchange)
		wantCanceled uint64 // legs closed as canceled
	}{
		{"after routing", func(x *envoyharness.Exchange) {}, 2},
		{"after response headers", func(x *envoyharness.Exchange) { _, _ = x.RespondHeaders(200, nil, false) }, 2},
		{"mid-stream", func(x *envoyharness.Exchange) {
			_, _ = x.RespondHeaders(200, nil, false)
			_ = x.RespondBody([]byte("data: {\"choices\":[]}\n\n"), false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _, _ = x.Downstream(ctx) // the processor has seen the first byte
		}, 1},
	}
	for _, p := range phases {
		before := r.router.Load().Stats()
		x, err := r.harness.Start(context.Background(), post(long(p.name)))
		if err != nil {
			t.Fatal(err)
		}
		if x.Forward == nil {
			t.Fatalf("%s: not routed: %+v", p.name, x.Local)
		}
		pre, _ := envoyharness.Get(x.Forward.Headers, "x-prefiller-host-port")
		if pre != workers[0] {
			t.Fatalf("%s: not disaggregated (prefiller %q)", p.name, pre)
		}
		if l := r.router.Load().Snapshot(kvfleet.WorkerID{Endpoint: workers[0]}); l.InflightRequests != 1 || l.PrefillTokens == 0 {
			t.Fatalf("%s: prefill worker's load while in flight: %+v", p.name, l)
		}
		p.run(x)
		x.Cancel()
		<-x.Done()
		poll.Until(t, p.name+": the tickets to close", 10*time.Second, func() error {
			if st := r.router.Load().Stats(); st.Open != base.Open {
				return fmt.Errorf("tickets still open: %+v", st)
			}
			return nil
		})
		if l := r.router.Load().Snapshot(kvfleet.WorkerID{Endpoint: workers[0]}); l != (r.router.Load().Snapshot(kvfleet.WorkerID{Endpoint: "absent:1"})) {
			t.Fatalf("%s: prefill worker still carries %+v", p.name, l)
		}
		after := r.router.Load().Stats()
		if got := after.Finished[loadview.OutcomeCanceled] - before.Finished[loadview.OutcomeCanceled]; got != p.wantCanceled {
			t.Fatalf("%s: %d legs closed as canceled, want %d (finished %v)", p.name, got, p.wantCanceled, after.Finished)
		}
		if got := after.Begun - before.Begun; got != 2 {
			t.Fatalf("%s: %d tickets begun, want 2 (decode and prefill legs)", p.name, got)
		}
	}
	for _, tk := range pinned {
		tk.Finish(loadview.OutcomeCompleted)
	}
	if st := r.router.Load().Stats(); st.Open != 0 {
		t.Fatalf("open tickets %d", st.Open)
	}
}
