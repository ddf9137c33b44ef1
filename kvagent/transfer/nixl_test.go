//go:build nixl

package transfer_test

import (
	"testing"

	"github.com/kvgate/kvgate/kvagent/transfer"
	"github.com/kvgate/kvgate/lab/testkit/transfertest"
)

// TestNIXLConformance runs the backend-agnostic suite over NIXL's UCX
// plugin; it needs libnixl (go test -tags nixl).
func TestNIXLConformance(t *testing.T) {
	transfertest.RunConformance(t, func(t *testing.T, name string) transfer.Endpoint {
		a, err := transfer.NewNIXL(transfer.NIXLConfig{Name: name})
		if err != nil {
			t.Fatalf("NewNIXL: %v", err)
		}
		return a
	})
}
