package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/conformance"
)

// fakeFleet starts six endpoints: four serve model-a, two model-b.
func fakeFleet(t *testing.T) *conformance.Endpoints {
	t.Helper()
	addrs := make([]string, 6)
	for i := range addrs {
		addrs[i] = "127.0.0.1:0"
	}
	eps, err := conformance.StartEndpoints(addrs, []string{"model-a", "model-a", "model-a", "model-a", "model-b", "model-b"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eps.Close)
	return eps
}

func newPicker(eps *conformance.Endpoints, d defect) *miniPicker {
	p := &miniPicker{defect: d, models: map[string]string{}, maxInflight: 4, pdModel: "model-b"}
	for _, a := range eps.Addrs() {
		p.pool = append(p.pool, a)
		p.models[a] = eps.Model(a)
	}
	return p
}

func run(t *testing.T, o conformance.Options) *conformance.Report {
	t.Helper()
	rep, err := conformance.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// The minimal picker keeps the protocol: every case passes, core and
// extended, whether it knows its pool (kvgate-config-like adapter) or
// learns it from the hint (subset-hint adapter, where the cases that need
// a known pool are skipped, and say why).
func TestMinimalPickerPasses(t *testing.T) {
	eps := fakeFleet(t)
	for _, known := range []bool{true, false} {
		addr := startPicker(t, newPicker(eps, none))
		rep := run(t, conformance.Options{Target: addr, Endpoints: eps, Profile: conformance.Extended, PoolKnown: known, ShedAfter: 4})
		var text bytes.Buffer
		if err := rep.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		p, f, s := rep.Counts()
		wantSkips := 0
		if !known {
			wantSkips = 2 // subset-hint-unknown, body-model-routing
		}
		if f != 0 || s != wantSkips || p+s != len(conformance.Cases()) {
			t.Errorf("pool known %v: %d passed, %d failed, %d skipped; want none failed, %d skipped:\n%s", known, p, f, s, wantSkips, text.String())
		}
		// With its pool known the picker splits model-b's long prompt: the
		// P/D case checks the header it set, not only the client's removed.
		if r, _ := rep.Result("pd-prefiller-header"); known && !strings.Contains(r.Detail, "the picker set x-prefiller-host-port") {
			t.Errorf("pd-prefiller-header: %q; want the picker's own prefill leg checked", r.Detail)
		}
	}
}

// defectCases pairs each case with a defect it must catch and what its
// failure says.
var defectCases = []struct {
	d    defect
	id   string
	want string // in the case's detail
}{
	{noHealth, "health-services", "Unimplemented"},
	{wrongNamespace, "destination-header-and-metadata", `namespaces sent: ["envoy.lb.destination"]`},
	{headerOnlyPrimary, "destination-header-and-metadata", "differ"},
	{unofferedFallback, "destination-list-well-formed", "192.0.2.9:8000, which was not offered"},
	{duplicateFallback, "destination-list-well-formed", "twice"},
	{ignoresHint, "subset-hint-list", "which was not offered"},
	{listHintOnly, "subset-hint-string", "which was not offered"},
	{routesEmptyHint, "subset-hint-empty", "was routed to"},
	{unknownHintError, "subset-hint-unknown", "no immediate response"},
	{rejectsServed, "served-endpoint-report", "InvalidArgument"},
	{shedsWith503, "shed-429", "status 503, want 429"},
	{unstreamedBody, "full-duplex-ordering", "without streamed_response"},
	{noEndOfStream, "full-duplex-ordering", "no reply from the picker"},
	{smallBodyLimit, "full-duplex-large-body", "refused with 413"},
	{buffersResponse, "response-sse-untouched", "after response chunk 1"},
	{rewritesResponse, "response-sse-untouched", "came back as"},
	{appendsDestination, "client-routing-headers", "2 x-gateway-destination-endpoint headers"},
	{trustsClientHeader, "client-routing-headers", "192.0.2.1:8000, which was not offered"},
	{leaksOnCancel, "cancel-mid-stream", "refused"},
	{ignoresModel, "body-model-routing", "which was not offered"},
	{keepsPrefiller, "pd-prefiller-header", "reached the upstream"},
	{prefillerIsPrimary, "pd-prefiller-header", "other than the primary"},
	{rejectsObjective, "objective-header", "refused the request"},
}

// Each case is seen to fail against a picker with the defect it exists to
// catch: a case that cannot fail would be a defect of the suite.
func TestEachCaseFailsAgainstItsDefect(t *testing.T) {
	eps := fakeFleet(t)
	for _, c := range defectCases {
		addr := startPicker(t, newPicker(eps, c.d))
		rep := run(t, conformance.Options{Target: addr, Endpoints: eps, Profile: conformance.Extended, PoolKnown: true, ShedAfter: 4,
			Only: []string{c.id}, CaseTimeout: 3 * time.Second})
		r, ok := rep.Result(c.id)
		if !ok || r.Status != conformance.Fail || !strings.Contains(r.Detail, c.want) {
			t.Errorf("defect %d: case %s = %+v; want a failure naming %q", c.d, c.id, r, c.want)
		}
	}
}

// Every case has a reference, a unique id and a defect it is seen to
// catch in defectCases, so a case added without one is noticed.
func TestEveryCaseHasAReferenceAndADefect(t *testing.T) {
	caught := map[string]bool{}
	for _, c := range defectCases {
		caught[c.id] = true
	}
	seen := map[string]bool{}
	for _, c := range conformance.Cases() {
		if c.Reference == "" || c.Checks == "" || seen[c.ID] || !caught[c.ID] {
			t.Errorf("case %q: reference %q, checks %q, listed before %v, has a defect %v", c.ID, c.Reference, c.Checks, seen[c.ID], caught[c.ID])
		}
		seen[c.ID] = true
	}
}

// The JSON report carries every result and the counts.
func TestReportJSON(t *testing.T) {
	eps := fakeFleet(t)
	addr := startPicker(t, newPicker(eps, none))
	rep := run(t, conformance.Options{Target: addr, Endpoints: eps, PoolKnown: true, Only: []string{"health-services", "shed-429"}})
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Target  string
		Passed  int
		Skipped int
		Results []struct{ ID, Status, Reference string }
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Target != addr || doc.Passed != 1 || doc.Skipped != 1 || len(doc.Results) != 2 || doc.Results[1].Status != "skip" || doc.Results[0].Reference == "" {
		t.Errorf("report %s", buf.String())
	}
}
