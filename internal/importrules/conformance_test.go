package importrules

import (
	"strings"
	"testing"
)

// The endpoint-picker conformance suite (lab/conformance, issue 30) checks
// any vendor's picker, so it must not lean on kvgate's own code: its
// non-test dependency graph holds no package of this module but its own.
// What it knows of the protocol it states itself, from the GIE proposal
// and Envoy's source.
func TestConformanceSuiteImportsNothingOfKvgate(t *testing.T) {
	const suite = module + "/lab/conformance"
	deps := goList(t, "-deps", "./lab/conformance")
	found := false
	for _, p := range deps {
		if p == suite {
			found = true
		}
		if strings.HasPrefix(p, module+"/") && p != suite && !strings.HasPrefix(p, suite+"/") {
			t.Errorf("lab/conformance links %s: the suite must stay vendor-neutral (state the protocol fact in the suite, citing its source)", p)
		}
	}
	if !found {
		t.Fatalf("go list -deps ./lab/conformance did not list %s itself: %q", suite, deps)
	}
}
