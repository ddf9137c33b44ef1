package kvstream

import (
	"fmt"
	"path/filepath"
	"testing"
)

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
