package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Picks stay below the ephemeral range (with room for a Redis Cluster bus
// port), are never handed out twice by one process, and can be bound.
func TestPortsComeFromBelowTheEphemeralRange(t *testing.T) {
	start, err := ephemeralStart()
	if err != nil {
		t.Fatalf("reading the ephemeral range: %v", err)
	}
	seen := map[int]bool{}
	for range 50 {
		p := Pick(t)
		if start-busOffset-lowest >= 1000 && (p < lowest || p+busOffset >= start) {
			t.Fatalf("port %d: want [%d, %d)", p, lowest, start-busOffset)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("binding a picked port: %v", err)
		}
		ln.Close()
	}
}
