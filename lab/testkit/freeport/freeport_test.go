package freeport

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
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

// A reservation holds against a second claim until it is reservationTTL
// old; a stale one is taken over.
func TestReservationsHoldUntilStale(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	if !reserve(12345) {
		t.Fatal("first claim of a port refused")
	}
	if reserve(12345) {
		t.Fatal("a second claim of a fresh reservation was granted")
	}
	old := time.Now().Add(-reservationTTL - time.Minute)
	if err := os.Chtimes(filepath.Join(os.TempDir(), "kvgate-freeport", "12345"), old, old); err != nil {
		t.Fatal(err)
	}
	if !reserve(12345) {
		t.Fatal("a stale reservation was not taken over")
	}
	if reserve(12345) {
		t.Fatal("the taken-over reservation did not hold")
	}
}
