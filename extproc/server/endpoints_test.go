package server

import (
	"fmt"
	"testing"

	"github.com/kvgate/kvgate/extproc/envoyaddr"
)

// The memo answers as envoyaddr.Canonical does, for valid and invalid
// spellings, the first time and every time after, and stays bounded.
func TestEndpointSpellingsAnswerAsCanonical(t *testing.T) {
	var eps endpointSpellings
	for round := range 2 {
		for _, ep := range []string{"10.0.0.1:8000", "[2001:DB8::1]:8000", "[::ffff:10.0.0.2]:80", "[2001:db8:0:0:0:0:0:2]:9", "host:80", "10.0.0.1", "10.0.0.1:0", ""} {
			want, wantErr := envoyaddr.Canonical(ep)
			got, err := eps.canonical(ep)
			if got != want || (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
				t.Errorf("round %d: %q → %q, %v; Canonical gives %q, %v", round, ep, got, err, want, wantErr)
			}
		}
	}
	if _, ok := eps.m["host:80"]; ok {
		t.Error("an invalid spelling was memoised")
	}
	for i := range maxEndpointSpellings + 10 {
		ep := fmt.Sprintf("10.%d.%d.1:8000", i/256, i%256)
		if got, err := eps.canonical(ep); err != nil || got != ep {
			t.Fatalf("%q → %q, %v", ep, got, err)
		}
	}
	if n := len(eps.m); n > maxEndpointSpellings {
		t.Errorf("memo holds %d spellings, bound %d", n, maxEndpointSpellings)
	}
}
