package kvstream

import (
	"strings"
	"testing"
	"time"
)

// A publisher restarted on the same endpoints whose first batches the
// subscriber missed live (slow joiner), and whose counter has not caught
// up with the last seq delivered from its predecessor: a tail poll from
// that seq finds nothing, which only a new publisher can answer. The
// subscriber must reset and deliver the new stream from its start, not
// wait until the new counter passes the old one.
func TestTailPollDetectsARestartedPublisherBehindTheLastSeq(t *testing.T) {
	old := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 100)
	ep, rep := old.endpoint(), old.replayEndpoint()
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: ep, ReplayEndpoint: rep, TailPoll: 50 * time.Millisecond,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 50 * time.Millisecond}, r)
	anchor := waitConnected(t, old, r)
	if anchor < 1 {
		t.Fatalf("anchor seq %d: the test needs the old stream past seq 0", anchor)
	}
	old.Close()

	fresh := startPublisher(t, ep, rep, 100)
	// Not sent live: as if published before the subscriber reconnected.
	first := fresh.publish(t, false, "after-restart")
	if first != 0 {
		t.Fatalf("new publisher's first seq %d", first)
	}
	r.waitFor(t, "the new publisher's batch after a reset", func(ev []event) bool {
		reset := false
		for _, e := range ev {
			if e.reset && strings.Contains(e.reason, "publisher restarted") {
				reset = true
			}
			if reset && !e.reset && e.payload == "after-restart" {
				return true
			}
		}
		return false
	})
	if st := s.Stats(); st.PublisherRestarts == 0 && st.Resets == 0 {
		t.Fatalf("stats %+v: no restart counted", st)
	}
}
