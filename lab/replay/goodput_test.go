package replay

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/extproc/extprocconfig"
)

func TestJainIndexOnKnownInputs(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{1, 1, 1, 1}, 1},
		{[]float64{0.9, 0.9}, 1},
		{[]float64{1, 0, 0, 0}, 0.25},       // one gets everything: 1/n
		{[]float64{1, 0.5}, 0.9},            // 1.5² / (2 × 1.25)
		{[]float64{1, 1, 0, 0}, 0.5},        // half served: k/n
		{[]float64{0.2, 0.4, 0.6}, 6.0 / 7}, // 1.44 / (3 × 0.56)
		{nil, 1},
		{[]float64{0, 0}, 1},
	} {
		if got := JainIndex(c.xs); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("JainIndex(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

// A tenant above twice its fair share is left out of the fairness figures;
// the rest give Jain's index, their pooled attainment and the lowest.
func TestTenantFairnessLeavesOutTheNoisyTenant(t *testing.T) {
	tenants := []GroupAttainment{
		{Key: "a", Requests: 100, Attainment: 1},
		{Key: "b", Requests: 100, Attainment: 0.5},
		{Key: "noisy", Requests: 500, Attainment: 0.1}, // 500·3 > 2·700
	}
	jain, pooled, lowest := TenantFairness(tenants)
	if !tenants[0].WellBehaved || !tenants[1].WellBehaved || tenants[2].WellBehaved {
		t.Fatalf("well-behaved marks %+v, want a and b only", tenants)
	}
	if math.Abs(jain-0.9) > 1e-12 || math.Abs(pooled-0.75) > 1e-12 || lowest != 0.5 {
		t.Fatalf("jain %v pooled %v lowest %v, want 0.9, 0.75, 0.5", jain, pooled, lowest)
	}
}

// slice300 is the conversation slice with tenants and bands assigned
// round robin: request k belongs to tenant "t<k mod 3>" and, every fourth,
// to band 1.
func slice300(t *testing.T) []TraceRequest {
	t.Helper()
	reqs, err := LoadTrace("testdata/conversation_head300.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	for k := range reqs {
		reqs[k].Tenant = []string{"t0", "t1", "t2"}[k%3]
		if k%4 == 0 {
			reqs[k].Priority = 1
		}
	}
	return reqs
}

// Clients that give up at the SLA: past saturation some requests are
// abandoned (in kvgate-flow's queue or in an engine), every request ends
// completed, refused or abandoned, and, the deadline being the SLA, every
// completed request met it — attainment is exactly the completed share.
func TestAbandonedRequestsAreMissesAndFreeTheirPlace(t *testing.T) {
	reqs := slice300(t)
	res, err := Run(t.Context(), "slice", reqs, Options{Workers: 2, Seed: 3, RateScale: 8, AbandonAfter: 1,
		Policies: []string{PolicyRoundRobin, PolicyKvgate, PolicyKvgateFlow}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Order {
		r := res.Policies[p]
		if r.Abandoned == 0 {
			t.Fatalf("%s: nothing abandoned at 8× on two workers: %+v", p, r)
		}
		completed := len(r.TTFTsMs)
		if completed+r.Refused+r.Abandoned != 300 || r.AbandonRate != float64(r.Abandoned)/300 {
			t.Fatalf("%s: %d completed + %d refused + %d abandoned of 300 (abandon rate %v)", p, completed, r.Refused, r.Abandoned, r.AbandonRate)
		}
		if last := r.TTFTsMs[completed-1]; last > msOf(DefaultGoodputSLA) {
			t.Fatalf("%s: a request completed with TTFT %.0f ms, past its client's deadline", p, last)
		}
		if r.SLAAttainment != float64(completed)/300 {
			t.Fatalf("%s: attainment %v, want %d/300", p, r.SLAAttainment, completed)
		}
	}
	// Without deadlines the same load abandons nothing and serves all.
	res, err = Run(t.Context(), "slice", reqs, Options{Workers: 2, Seed: 3, RateScale: 8, Policies: []string{PolicyKvgate}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Policies[PolicyKvgate]; r.Abandoned != 0 || len(r.TTFTsMs) != 300 {
		t.Fatalf("no deadlines: %d abandoned, %d completed", r.Abandoned, len(r.TTFTsMs))
	}
}

// Attainment per tenant and per band adds up to the whole: each group's
// met requests sum to the run's, and the three equal tenants are all
// well-behaved.
func TestAttainmentPerTenantAndBand(t *testing.T) {
	reqs := slice300(t)
	var att []float64
	for _, rate := range []float64{1, 6} {
		res, err := Run(t.Context(), "slice", reqs, Options{Workers: 2, Seed: 3, RateScale: rate, AbandonAfter: 1.5, Policies: []string{PolicyKvgateFlow}})
		if err != nil {
			t.Fatal(err)
		}
		r := res.Policies[PolicyKvgateFlow]
		if len(r.Tenants) != 3 || len(r.Bands) != 2 || r.Bands[0].Key != "0" || r.Bands[1].Key != "1" || r.Bands[1].Requests != 75 {
			t.Fatalf("×%v: tenants %+v bands %+v, want t0..t2 and bands 0, 1 (75 requests)", rate, r.Tenants, r.Bands)
		}
		for _, groups := range [][]GroupAttainment{r.Tenants, r.Bands} {
			met, n := 0.0, 0
			for _, g := range groups {
				met += g.Attainment * float64(g.Requests)
				n += g.Requests
			}
			if n != 300 || math.Abs(met-r.SLAAttainment*300) > 1e-6 {
				t.Fatalf("×%v: groups %+v add up to %v met of %d, run has %v", rate, groups, met, n, r.SLAAttainment*300)
			}
		}
		var xs []float64
		for _, g := range r.Tenants {
			if !g.WellBehaved {
				t.Fatalf("×%v: equal tenant %s not well-behaved", rate, g.Key)
			}
			xs = append(xs, g.Attainment)
		}
		if r.JainIndex != JainIndex(xs) || r.WellBehavedAttainment != r.SLAAttainment {
			t.Fatalf("×%v: jain %v (want %v), well-behaved attainment %v (want the run's %v)", rate, r.JainIndex, JainIndex(xs), r.WellBehavedAttainment, r.SLAAttainment)
		}
		att = append(att, r.SLAAttainment)
	}
	if att[1] >= att[0] {
		t.Fatalf("attainment %v at ×1 and %v at ×6: overload costs nothing", att[0], att[1])
	}
}

func TestTraceTenantAndPriorityFields(t *testing.T) {
	reqs, err := ParseTrace(strings.NewReader(`{"timestamp":0,"input_length":10,"output_length":2,"hash_ids":[1],"tenant":"acme","priority":-2}`+"\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[0].Tenant != "acme" || reqs[0].Priority != -2 {
		t.Fatalf("parsed %+v", reqs[0])
	}
	for _, c := range []struct{ line, want string }{
		{`{"timestamp":0,"input_length":10,"output_length":2,"hash_ids":[1],"tenant":"` + strings.Repeat("x", MaxTenantLen+1) + `"}`, "tenant of"},
		{`{"timestamp":0,"input_length":10,"output_length":2,"hash_ids":[1],"priority":2000}`, "priority 2000"},
		{`{"timestamp":0,"input_length":10,"output_length":2,"hash_ids":[1],"priority":"high"}`, "priority"},
	} {
		if _, err := ParseTrace(strings.NewReader(c.line+"\n"), 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error about %q, got %v", c.want, err)
		}
	}
}

// An overload sweep finds every policy's capacity, then replays each at
// the multiples of the subject's; each replay covers the span, so a
// higher multiple has more requests.
func TestOverloadSweepRowsAtMultiplesOfCapacity(t *testing.T) {
	all, err := LoadTrace("testdata/conversation_head300.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	src := func(rate float64, span time.Duration) ([]TraceRequest, error) { return CutSpan(all, rate, span), nil }
	res, err := Overload(t.Context(), "slice", src, OverloadOptions{
		Replay:    Options{Workers: 2, Seed: 1, Policies: []string{PolicyRoundRobin, PolicyKvgateFlow}},
		Multiples: []float64{1, 2}, Span: 5 * time.Second, Tolerance: 0.3,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Capacities[PolicyKvgateFlow]
	if res.Capacity != c || c <= 0 || res.Capacities[PolicyRoundRobin] <= 0 || res.AbandonAfter != 1 {
		t.Fatalf("capacities %v (subject %v), abandon after %v", res.Capacities, res.Capacity, res.AbandonAfter)
	}
	if len(res.Rows) != 2 || res.Rows[0].Rate != c || res.Rows[1].Rate != roundRate(2*c) || res.Rows[1].Requests <= res.Rows[0].Requests {
		t.Fatalf("rows %+v at capacity %v", res.Rows, c)
	}
	if at := res.Rows[0].Results[PolicyKvgateFlow].SLAAttainment; at < MeetsCapacitySLA {
		t.Fatalf("at its capacity kvgate-flow attains %v < %v", at, MeetsCapacitySLA)
	}
	var b strings.Builder
	if err := WriteOverloadTable(&b, res); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(b.String(), "\n| "); got != 3 {
		t.Fatalf("table has %d rows, want a header and 2:\n%s", got, b.String())
	}
	if _, err := Overload(t.Context(), "slice", src, OverloadOptions{Replay: Options{Policies: []string{PolicyRoundRobin}}}); err == nil {
		t.Fatal("an overload sweep of kvgate-flow's capacity without kvgate-flow ran")
	}
}

// kvgate-flow's clients send their patience as the TTFT budget header, so
// a request waits at most its deadline_queue_share of it in the queue:
// past saturation no dispatched request waited longer, whatever the share;
// with deadline_header none every request may wait up to max_wait (here
// past the clients' patience). An invalid flow configuration is an error.
func TestFlowClientsSendTheirDeadline(t *testing.T) {
	reqs := slice300(t)
	budget := 2 * time.Second // GoodputSLA × AbandonAfter 1
	for _, share := range []float64{0.25, 0.75} {
		fc := &extprocconfig.FlowControl{DeadlineQueueShare: share}
		res, err := Run(t.Context(), "slice", reqs, Options{Workers: 2, Seed: 3, RateScale: 6, AbandonAfter: 1, Flow: fc, Policies: []string{PolicyKvgateFlow}})
		if err != nil {
			t.Fatal(err)
		}
		r := res.Policies[PolicyKvgateFlow]
		limit := msOf(time.Duration(share * float64(budget)))
		if r.QueueWaitP99Ms <= 0 || r.QueueWaitP99Ms > limit || r.Refused == 0 {
			t.Fatalf("share %v: queue wait p99 %v ms (limit %v), %d refused", share, r.QueueWaitP99Ms, limit, r.Refused)
		}
	}
	fc := &extprocconfig.FlowControl{DeadlineHeader: extprocconfig.FlowDeadlineNone}
	res, err := Run(t.Context(), "slice", reqs, Options{Workers: 2, Seed: 3, RateScale: 6, AbandonAfter: 1, Flow: fc, Policies: []string{PolicyKvgateFlow}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Policies[PolicyKvgateFlow]; r.QueueWaitP99Ms <= msOf(budget*3/4) {
		t.Fatalf("no deadline header: queue wait p99 %v ms, want past the 1.5 s a budget would allow", r.QueueWaitP99Ms)
	}
	bad := &extprocconfig.FlowControl{DeadlineQueueShare: 2}
	if _, err := Run(t.Context(), "slice", reqs, Options{Workers: 2, Policies: []string{PolicyKvgateFlow}, Flow: bad}); err == nil || !strings.Contains(err.Error(), "deadline_queue_share") {
		t.Fatalf("share 2 accepted: %v", err)
	}
}
