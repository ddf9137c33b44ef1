package transfer_test

import (
	"testing"

	"github.com/kvgate/kvgate/kvagent/transfer"
	"github.com/kvgate/kvgate/lab/testkit/transfertest"
)

// The suite writes and notifies as well as reads: NIXL's semantics, which
// the TCP backend has once InboundWrites and InboundNotifs are on.
func TestTCPConformance(t *testing.T) {
	transfertest.RunConformance(t, func(t *testing.T, name string) transfer.Endpoint {
		a, err := transfer.NewTCP(transfer.TCPConfig{Name: name, Streams: 3, MaxMessageBytes: 64 << 10, InboundWrites: true, InboundNotifs: true})
		if err != nil {
			t.Fatalf("NewTCP: %v", err)
		}
		return a
	})
}

// One stream and the largest frames: the other end of the configuration
// space.
func TestTCPConformanceOneStream(t *testing.T) {
	transfertest.RunConformance(t, func(t *testing.T, name string) transfer.Endpoint {
		a, err := transfer.NewTCP(transfer.TCPConfig{Name: name, Streams: 1, MaxMessageBytes: 16 << 20, InboundWrites: true, InboundNotifs: true})
		if err != nil {
			t.Fatalf("NewTCP: %v", err)
		}
		return a
	})
}
