package kvstream

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// Batches published before the subscription reached the publisher (ZMQ's
// slow joiner) arrive through the tail poll even if the engine then stays
// silent.
func TestTailPollCatchesUpAnIdlePublisher(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 100)
	for _, payload := range []string{"a", "b", "c"} {
		p.publish(t, true, payload) // nobody subscribed yet: lost live
	}
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint(), TailPoll: 50 * time.Millisecond}, r)
	ev := r.waitForSeq(t, 2)
	checkContiguous(t, p, ev, 0, 2)
	waitSynced(t, s)
	if st := s.Stats(); st.Resets != 0 || st.TailPolls == 0 || st.BatchesReplayed != 3 {
		t.Fatalf("stats %+v: want 3 replayed batches via tail polls, no reset, synced", st)
	}
}

// Synced must not turn true while the replay endpoint cannot be reached:
// a router that reported ready then would route on an index missing what
// the engine's buffer holds.
func TestNotSyncedWhileReplayUnreachable(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 100)
	p.publish(t, true, "before-subscribe")
	dead := freeTCPEndpoint(t)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: dead, TailPoll: 30 * time.Millisecond, ReplayTimeout: 100 * time.Millisecond}, r)
	poll.Until(t, "three failed tail polls", 20*time.Second, func() error {
		if st := s.Stats(); st.ReplayFailures < 3 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	if st := s.Stats(); st.Synced || st.BatchesDelivered != 0 {
		t.Fatalf("stats %+v: synced or delivered with an unreachable replay endpoint and a silent stream", st)
	}
}

// A lost final batch (say a BlockRemoved) of an engine that then goes idle
// must not stay unknown until the engine's next event.
func TestTailPollRepairsALostFinalBatch(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 100)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint(), TailPoll: 50 * time.Millisecond}, r)
	anchor := waitConnected(t, p, r)
	lost := p.publish(t, false, "final-remove")
	ev := r.waitForSeq(t, lost)
	checkContiguous(t, p, after(t, ev, anchor-1), anchor, lost)
	st := s.Stats()
	if st.Resets != 0 || st.GapsRepaired == 0 {
		t.Fatalf("stats %+v: want the lost batch repaired without a reset", st)
	}
}

func TestTailPollDisabled(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 100)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint(), TailPoll: -1}, r)
	waitConnected(t, p, r)
	if st := s.Stats(); st.TailPolls != 0 {
		t.Fatalf("tail polls %d with TailPoll < 0", st.TailPolls)
	}
}

// A killed engine's entries must leave the index: once its socket has been
// unreachable for DeadAfter, the handler is reset (once).
func TestDeadEngineResetsOnce(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 100)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint(), DeadAfter: 200 * time.Millisecond,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 50 * time.Millisecond}, r)
	waitConnected(t, p, r)
	p.Close()
	r.waitFor(t, "a reset for the unreachable engine", func(ev []event) bool {
		for _, e := range ev {
			if e.reset && strings.Contains(e.reason, "unreachable") {
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond) // several more failed reconnects
	if st := s.Stats(); st.DeadResets != 1 {
		t.Fatalf("dead resets %d, want exactly 1 while the engine stays down", st.DeadResets)
	}
}

func waitSynced(t *testing.T, s *Subscriber) {
	t.Helper()
	poll.Until(t, "the subscriber synced", 20*time.Second, func() error {
		if st := s.Stats(); !st.Synced {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
}

// A starved live reader can hand over batches after a tail poll already
// delivered them from the replay buffer. Their late live copies are
// duplicates: treating them as a publisher restart would reset the worker
// and empty its index entries for nothing (seen under heavy CPU load).
func TestLateLiveCopyOfReplayedBatchIsADuplicate(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 100)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint(), TailPoll: 30 * time.Millisecond}, r)
	anchor := waitConnected(t, p, r)
	// Two batches reach the subscriber through the tail poll only…
	first := p.publish(t, false, "replayed-1")
	last := p.publish(t, false, "replayed-2")
	r.waitForSeq(t, last)
	before := s.Stats()
	// …then their live copies arrive, late and out of order with the stream.
	for _, seq := range []uint64{first, last} {
		if err := p.PublishRawFrames([]byte(""), encodeSeq(seq), []byte(p.payloadOf(seq))); err != nil {
			t.Fatal(err)
		}
	}
	next := p.publish(t, true, "after")
	ev := r.waitForSeq(t, next)
	checkContiguous(t, p, after(t, ev, anchor-1), anchor, next)
	st := s.Stats()
	if st.Resets != before.Resets || st.PublisherRestarts != before.PublisherRestarts {
		t.Fatalf("stats %+v (before the late copies: %+v): late live copies of replayed batches caused a reset", st, before)
	}
	if st.DuplicatesDropped < before.DuplicatesDropped+2 {
		t.Fatalf("duplicates dropped %d, want at least %d", st.DuplicatesDropped, before.DuplicatesDropped+2)
	}
}

// A batch that comes back live under an already-delivered seq with a
// different payload is still a restart.
func TestOlderSeqWithOtherPayloadIsARestart(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 100)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint(), TailPoll: -1}, r)
	anchor := waitConnected(t, p, r)
	p.publish(t, true, "x")
	last := p.publish(t, true, "y")
	r.waitForSeq(t, last)
	if err := p.PublishRawFrames([]byte(""), encodeSeq(anchor), []byte("not-the-anchor")); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "a reset for the restarted publisher", func(ev []event) bool {
		for _, e := range ev {
			if e.reset {
				return true
			}
		}
		return false
	})
	if st := s.Stats(); st.PublisherRestarts == 0 {
		t.Fatalf("stats %+v: no restart counted", st)
	}
}

// resyncRecorder asks for one resync when told to (a Resyncer).
type resyncRecorder struct {
	*recorder
	want atomic.Bool
}

func (r *resyncRecorder) NeedsResync(context.Context) bool { return r.want.CompareAndSwap(true, false) }

// A handler that lost its state outside the stream (an index write failed)
// gets the publisher's whole buffer again, from seq 0, not only what comes
// next.
func TestResyncReplaysTheWholeBuffer(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 100)
	r := &resyncRecorder{recorder: newRecorder()}
	s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint(), TailPoll: 30 * time.Millisecond}, r)
	anchor := waitConnected(t, p, r.recorder)
	deliveredBefore := len(r.snapshot())
	r.want.Store(true)
	r.waitFor(t, "seq 0 delivered again", func(ev []event) bool {
		for _, e := range ev[deliveredBefore:] {
			if !e.reset && e.seq == 0 {
				return true
			}
		}
		return false
	})
	next := p.publish(t, true, "after-resync")
	ev := r.waitForSeq(t, next)
	checkContiguous(t, p, ev[deliveredBefore:], 0, next)
	if st := s.Stats(); st.Resyncs != 1 || st.Resets != 0 {
		t.Fatalf("stats %+v: want one resync, no reset (anchor %d)", st, anchor)
	}
}
