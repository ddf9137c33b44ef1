package extproc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

// decideWith runs one chat request with the given headers through the
// real request path; the ticket stays open, so the request stays in flight.
func decideWith(t *testing.T, r *Router, i int, headers map[string]string) (*server.Decision, *server.RouteError) {
	t.Helper()
	h := map[string]string{"content-type": "application/json"}
	for k, v := range headers {
		h[k] = v
	}
	body := chatBody("qwen3", fmt.Sprintf("Request %d wants an answer about priorities.", i))
	return r.Decide(context.Background(), &server.Request{Method: "POST", Path: "/v1/chat/completions", Body: body, Headers: h, RequestID: fmt.Sprintf("req-%d", i), Debug: true})
}

// Under saturation the lowest priority is shed first: with max_inflight 5
// and sheddable_fraction 0.6, a request whose objective has priority < 0
// (GIE's sheddable) is refused from 3 in flight, the others only at 5;
// an unknown objective is priority 0, as GIE defaults it. The decision
// record and x-kvgate-debug show the priority, shed requests included.
func TestPriorityShedsLowestFirst(t *testing.T) {
	r := newRig(t, func(c *config.Config) {
		c.Extproc.Admission.MaxInflight = 5
		c.Extproc.Admission.SheddableFraction = 0.6
		c.Extproc.DebugHeader.AllowAnyClient = true
		c.Extproc.FlowControl.Disabled = true // the bounds shed at once (flowcontrol_test.go holds instead)
	}, envoyharness.DefaultConfig())
	r.router.SetObjectives(map[string]int{"batch": -1, "critical": 10})
	batch := map[string]string{ObjectiveHeader: "batch"}
	critical := map[string]string{ObjectiveHeader: "critical"}
	var open []*server.Decision
	decideOK := func(i int, h map[string]string) *server.Decision {
		t.Helper()
		d, rerr := decideWith(t, r.router, i, h)
		if rerr != nil {
			t.Fatalf("request %d (%v): %d %s", i, h, rerr.Status, rerr.Body)
		}
		open = append(open, d)
		return d
	}
	decideShed := func(i int, h map[string]string, reason string) {
		t.Helper()
		_, rerr := decideWith(t, r.router, i, h)
		if rerr == nil || rerr.Status != http.StatusTooManyRequests || !strings.Contains(rerr.Headers["x-kvgate-shed-reason"], reason) {
			t.Fatalf("request %d (%v): %+v, want 429 with reason %q", i, h, rerr, reason)
		}
	}
	decideOK(0, batch) // 0 in flight
	decideOK(1, nil)
	d := decideOK(2, map[string]string{ObjectiveHeader: "no-such-objective"})
	if !strings.Contains(d.DebugHeader, "priority=0(default) objective=no-such-objective") {
		t.Errorf("debug header %q lacks the default priority", d.DebugHeader)
	}
	decideShed(3, batch, "pool in-flight requests at the bound (3) for sheddable requests (priority -1 < 0")
	d = decideOK(4, critical) // 3 in flight < 5
	if !strings.Contains(d.DebugHeader, "priority=10(objective) objective=critical") {
		t.Errorf("debug header %q lacks the objective's priority", d.DebugHeader)
	}
	decideOK(5, nil) // 4 < 5
	decideShed(6, critical, "pool in-flight requests at the bound (5)")
	decideShed(7, batch, "(3) for sheddable")

	// One finishing frees room for a standard request, not a sheddable one.
	open[0].Ticket.Finish(server.OutcomeOK)
	decideShed(8, batch, "for sheddable")
	decideOK(9, nil)

	// /debug/decisions: newest first, the shed requests with their priority.
	rec := httptest.NewRecorder()
	r.router.DecisionsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/decisions", nil))
	var entries []decisionEntry
	if err := json.Unmarshal(rec.Body.Bytes(), &entries); err != nil {
		t.Fatal(err)
	}
	byID := map[string]decisionEntry{}
	for _, e := range entries {
		byID[e.RequestID] = e
	}
	for id, want := range map[string]struct {
		prio      int
		from, obj string
		shed      bool
	}{
		"req-0": {-1, "objective", "batch", false}, "req-1": {0, "default", "", false}, "req-3": {-1, "objective", "batch", true},
		"req-4": {10, "objective", "critical", false}, "req-6": {10, "objective", "critical", true},
	} {
		e, ok := byID[id]
		if !ok || e.Priority != want.prio || e.PriorityFrom != want.from || e.Objective != want.obj || (e.Shed != "") != want.shed || (e.Chosen == "") != want.shed {
			t.Errorf("decision %s: %+v (found %v), want %+v", id, e, ok, want)
		}
	}
	for _, d := range open {
		d.Ticket.Finish(server.OutcomeOK)
	}
}

// A raw priority header counts only when extproc.admission.priority_header
// names it: a client cannot make itself critical (or anyone sheddable)
// otherwise. When named, it wins over the objective; a malformed value is
// ignored.
func TestPriorityHeaderOnlyWhenTrusted(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		t.Run(fmt.Sprint("trusted=", trusted), func(t *testing.T) {
			r := newRig(t, func(c *config.Config) {
				if trusted {
					c.Extproc.Admission.PriorityHeader = "x-operator-priority"
				}
			}, envoyharness.DefaultConfig())
			r.router.SetObjectives(map[string]int{"batch": -1})
			got := r.router.priorityOf(&server.Request{Headers: map[string]string{"x-operator-priority": "-7", ObjectiveHeader: "batch"}})
			want := requestPriority{Objective: "batch", Priority: -1, From: "objective"}
			if trusted {
				want = requestPriority{Objective: "batch", Priority: -7, From: "header"}
			}
			if got != want {
				t.Errorf("priority %+v, want %+v", got, want)
			}
			got = r.router.priorityOf(&server.Request{Headers: map[string]string{"x-operator-priority": "high", ObjectiveHeader: "batch"}})
			if want := (requestPriority{Objective: "batch", Priority: -1, From: "objective"}); got != want {
				t.Errorf("malformed header: %+v, want %+v", got, want)
			}
		})
	}
}
