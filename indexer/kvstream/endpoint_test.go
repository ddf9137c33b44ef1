package kvstream

import (
	"fmt"
	"path/filepath"
	"testing"
)

func TestOffsetEndpointPort(t *testing.T) {
	ok := []struct {
		ep   string
		rank int
		want string
	}{
		{"tcp://*:5557", 0, "tcp://*:5557"},
		{"tcp://*:5557", 3, "tcp://*:5560"},
		{"tcp://engine-0:5558", 1, "tcp://engine-0:5559"},
		{"tcp://[::1]:5557", 2, "tcp://[::1]:5559"},
		{"ipc:///tmp/kv", 0, "ipc:///tmp/kv"},
		{"", 4, ""},
	}
	for _, c := range ok {
		got, err := OffsetEndpointPort(c.ep, c.rank)
		if err != nil || got != c.want {
			t.Errorf("OffsetEndpointPort(%q, %d) = %q, %v; want %q", c.ep, c.rank, got, err, c.want)
		}
	}
	bad := []struct {
		ep   string
		rank int
	}{
		{"ipc:///tmp/kv", 1},
		{"tcp://host", 1},
		{"tcp://host:x", 1},
		{"tcp://host:65535", 1},
		{"tcp://host:5557", -1},
	}
	for _, c := range bad {
		if got, err := OffsetEndpointPort(c.ep, c.rank); err == nil {
			t.Errorf("OffsetEndpointPort(%q, %d) = %q, want an error", c.ep, c.rank, got)
		}
	}
}

// The ipc transport goes through the guarded unix dialer.
func TestIPCDelivery(t *testing.T) {
	dir := t.TempDir()
	pubEP := "ipc://" + filepath.Join(dir, "pub.sock")
	replayEP := "ipc://" + filepath.Join(dir, "replay.sock")
	p := startPublisher(t, pubEP, replayEP, 0)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: pubEP, ReplayEndpoint: replayEP}, r)
	anchor := waitConnected(t, p, r)
	p.publish(t, false, "skipped")
	var last uint64
	for i := range 5 {
		last = p.publish(t, true, fmt.Sprintf("b%d", i))
	}
	checkContiguous(t, p, r.waitForSeq(t, last), 0, last)
	if st := s.Stats(); st.Resets != 0 || st.GapsRepaired < 1 || last != anchor+6 {
		t.Errorf("want gaps repaired without reset over ipc, got %+v", st)
	}
}
