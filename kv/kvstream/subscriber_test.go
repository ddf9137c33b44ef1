package kvstream

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/poll"
)

func TestInOrderDelivery(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 0)
	r := newRecorder()
	runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint()}, r)
	anchor := waitConnected(t, p, r)

	var last uint64
	for i := range 200 {
		last = p.publish(t, true, fmt.Sprintf("batch-%d", i))
	}
	ev := r.waitForSeq(t, last)
	// The late-join catch-up replays everything before the first probe
	// seen, so the handler holds the whole stream from seq 0.
	checkContiguous(t, p, ev, 0, last)
	if last != anchor+200 {
		t.Fatalf("publisher seqs not consecutive: anchor %d, last %d", anchor, last)
	}
}

func TestGapRepairedViaReplay(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 0)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint()}, r)
	anchor := waitConnected(t, p, r)
	before := s.Stats()

	p.publish(t, true, "a")
	p.publish(t, false, "b-skipped")
	p.publish(t, false, "c-skipped")
	p.publish(t, true, "d")
	p.publish(t, false, "e-skipped")
	last := p.publish(t, true, "f")

	ev := r.waitForSeq(t, last)
	checkContiguous(t, p, after(t, ev, anchor), anchor+1, last)
	st := s.Stats()
	if got := st.GapsDetected - before.GapsDetected; got != 2 {
		t.Errorf("GapsDetected delta %d, want 2", got)
	}
	if got := st.GapsRepaired - before.GapsRepaired; got != 2 {
		t.Errorf("GapsRepaired delta %d, want 2", got)
	}
	if got := st.BatchesReplayed - before.BatchesReplayed; got != 3 {
		t.Errorf("BatchesReplayed delta %d, want 3", got)
	}
	if st.Resets != 0 || st.GapsUnrepaired != 0 || st.ReplayFailures != 0 {
		t.Errorf("want no resets, unrepaired gaps or replay failures, got %+v", st)
	}
	if !st.HaveLastSeq || st.LastSeq != last {
		t.Errorf("LastSeq %d (have %v), want %d", st.LastSeq, st.HaveLastSeq, last)
	}
	if st.LastMessageTime.IsZero() {
		t.Errorf("LastMessageTime not set")
	}
}

// A gap that cannot be repaired costs exactly one Reset, placed before the
// first batch after the gap, and the stream continues.
func TestUnrepairableGapResets(t *testing.T) {
	cases := []struct {
		name   string
		replay func(t *testing.T) string
	}{
		{"no replay endpoint", func(*testing.T) string { return "" }},
		{"replay endpoint refuses connections", freeTCPEndpoint},
		{"replay endpoint silent", silentListener},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := startPublisher(t, "tcp://127.0.0.1:0", "", 0)
			r := newRecorder()
			replayEP := tc.replay(t)
			s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: replayEP, ReplayTimeout: 300 * time.Millisecond}, r)
			anchor := waitConnected(t, p, r)
			before := s.Stats()

			p.publish(t, false, "lost")
			next := p.publish(t, true, "after-gap")
			last := p.publish(t, true, "later")
			ev := after(t, r.waitForSeq(t, last), anchor)
			if len(ev) != 3 || !ev[0].reset || ev[1].seq != next || ev[2].seq != last {
				t.Fatalf("after anchor %d want [reset, %d, %d], got %v", anchor, next, last, ev)
			}
			if !strings.Contains(ev[0].reason, fmt.Sprint(anchor+1)) {
				t.Errorf("reset reason %q does not name the missing seq %d", ev[0].reason, anchor+1)
			}
			st := s.Stats()
			if got := st.GapsUnrepaired - before.GapsUnrepaired; got != 1 {
				t.Errorf("GapsUnrepaired delta %d, want 1", got)
			}
			if got := st.Resets - before.Resets; got != 1 {
				t.Errorf("Resets delta %d, want 1", got)
			}
			wantFailures := uint64(1)
			if replayEP == "" {
				wantFailures = 0
			}
			if got := st.ReplayFailures - before.ReplayFailures; got != wantFailures {
				t.Errorf("ReplayFailures delta %d, want %d", got, wantFailures)
			}
		})
	}
}

// The publisher's ring no longer holds the start of the gap: Reset, then
// what the ring still has, then the live stream.
func TestReplayIncompleteResets(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 3)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint()}, r)
	anchor := waitConnected(t, p, r)
	before := s.Stats()

	for i := range 5 {
		p.publish(t, false, fmt.Sprintf("skipped-%d", i))
	}
	last := p.publish(t, true, "live")
	// The ring (3 steps) now holds anchor+4 .. anchor+6 = last.
	ev := after(t, r.waitForSeq(t, last), anchor)
	if len(ev) != 4 || !ev[0].reset {
		t.Fatalf("after anchor %d want [reset, %d, %d, %d], got %v", anchor, anchor+4, anchor+5, last, ev)
	}
	checkContiguous(t, p, ev[1:], anchor+4, last)
	st := s.Stats()
	if st.Resets-before.Resets != 1 || st.GapsUnrepaired-before.GapsUnrepaired != 1 || st.GapsRepaired != before.GapsRepaired {
		t.Errorf("want one reset and one unrepaired gap, got before %+v after %+v", before, st)
	}
	if st.ReplayFailures != before.ReplayFailures {
		t.Errorf("an incomplete replay is not a failed one: ReplayFailures %d -> %d", before.ReplayFailures, st.ReplayFailures)
	}
}

func TestPublisherRestartResets(t *testing.T) {
	// Fixed ports so the restarted publisher binds where the first was.
	pubEP, replayEP := freeTCPEndpoint(t), freeTCPEndpoint(t)
	p1 := startPublisher(t, pubEP, replayEP, 0)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: pubEP, ReplayEndpoint: replayEP}, r)
	waitConnected(t, p1, r)
	// Push the old stream's seq well above anything the new one reaches
	// before the subscriber is back.
	var lastOld uint64
	for i := range 1000 {
		lastOld = p1.publish(t, true, fmt.Sprintf("old-%d", i))
	}
	r.waitForSeq(t, lastOld)
	if err := p1.Close(); err != nil {
		t.Fatalf("close first publisher: %v", err)
	}

	p2 := startPublisher(t, pubEP, replayEP, 0)
	poll.Until(t, "a reset after the publisher restart", hangGuard, func() error {
		if countResets(r.snapshot()) > 0 {
			return nil
		}
		p2.publish(t, true, "new-probe")
		return fmt.Errorf("events after old stream: %v", after(t, r.snapshot(), lastOld))
	})
	newLast := p2.publish(t, true, "new-anchor")
	ev := r.waitFor(t, "new anchor", func(ev []event) bool {
		e := ev[len(ev)-1]
		return !e.reset && e.seq == newLast && e.payload == "new-anchor"
	})
	ev = after(t, ev, lastOld)
	if !ev[0].reset || !strings.Contains(ev[0].reason, "restart") {
		t.Fatalf("first event after the old stream is %v, want a restart reset", ev[0])
	}
	// The new stream is caught up from its seq 0 via its replay buffer.
	checkContiguous(t, p2, ev[1:], 0, newLast)
	st := s.Stats()
	if st.PublisherRestarts != 1 || st.Resets != 1 {
		t.Errorf("want 1 restart and 1 reset, got %+v", st)
	}
	if st.Disconnects < 1 || st.Connects < 2 {
		t.Errorf("want a disconnect and a reconnect, got %+v", st)
	}
}

func TestLateJoinCatchUp(t *testing.T) {
	t.Run("buffer holds seq 0", func(t *testing.T) {
		p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 0)
		for i := range 10 {
			// Not sent live: zmq4's PUB sends asynchronously, so a live
			// publish could still reach a subscriber connecting just after.
			p.publish(t, false, fmt.Sprintf("before-subscriber-%d", i))
		}
		r := newRecorder()
		s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint()}, r)
		anchor := waitConnected(t, p, r)
		checkContiguous(t, p, r.snapshot(), 0, anchor)
		st := s.Stats()
		if st.GapsDetected != 1 || st.GapsRepaired != 1 || st.Resets != 0 || st.BatchesReplayed < 10 {
			t.Errorf("want one repaired late-join gap with >= 10 replayed batches and no reset, got %+v", st)
		}
	})
	t.Run("buffer lost seq 0", func(t *testing.T) {
		p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 4)
		for i := range 10 {
			p.publish(t, false, fmt.Sprintf("before-subscriber-%d", i))
		}
		r := newRecorder()
		s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint()}, r)
		anchor := waitConnected(t, p, r)
		ev := r.snapshot()
		if len(ev) == 0 || ev[0].reset || ev[0].seq == 0 {
			t.Fatalf("want the first delivery to be a batch after seq 0, got %v", ev)
		}
		// Nothing was known, so nothing is stale: no Reset, and what the
		// ring still had is delivered.
		checkContiguous(t, p, ev, ev[0].seq, anchor)
		st := s.Stats()
		if st.GapsUnrepaired != 1 || st.Resets != 0 {
			t.Errorf("want one unrepaired late-join gap and no reset, got %+v", st)
		}
	})
	t.Run("no replay endpoint", func(t *testing.T) {
		p := startPublisher(t, "tcp://127.0.0.1:0", "", 0)
		for i := range 10 {
			p.publish(t, false, fmt.Sprintf("before-subscriber-%d", i))
		}
		r := newRecorder()
		s := runSubscriber(t, Config{Endpoint: p.endpoint()}, r)
		anchor := waitConnected(t, p, r)
		ev := r.snapshot()
		checkContiguous(t, p, ev, ev[0].seq, anchor)
		if st := s.Stats(); st.GapsUnrepaired != 1 || st.Resets != 0 || st.ReplaysRequested != 0 {
			t.Errorf("want one unrepaired late-join gap, no replay and no reset, got %+v", st)
		}
	})
}

func TestMalformedMessagesDropped(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 0)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint(), MaxPayloadBytes: 1024}, r)
	anchor := waitConnected(t, p, r)
	before := s.Stats()

	malformed := [][][]byte{
		{[]byte(""), encodeSeq(anchor + 1)},                                            // two frames
		{[]byte(""), encodeSeq(anchor + 1), []byte("x"), []byte("extra")},              // four frames
		{[]byte(""), encodeSeq(anchor + 1)[:7], []byte("x")},                           // 7-byte seq
		{[]byte(""), append(encodeSeq(anchor+1), 0), []byte("x")},                      // 9-byte seq
		{[]byte(""), encodeSeq(anchor + 1), bytes.Repeat([]byte("x"), 1025)},           // payload over limit
		{[]byte(""), encodeSeq(endOfReplaySeq), []byte("x")},                           // end marker on the live stream
		{[]byte(""), []byte{}, []byte{}},                                               // empty seq
		{[]byte(""), encodeSeq(anchor + 1), bytes.Repeat([]byte("y"), 1024), nil, nil}, // five frames
	}
	for _, frames := range malformed {
		if err := p.PublishRawFrames(frames...); err != nil {
			t.Fatal(err)
		}
	}
	next := p.publish(t, true, "valid")
	ev := after(t, r.waitForSeq(t, next), anchor)
	checkContiguous(t, p, ev, anchor+1, next)
	st := s.Stats()
	if got := st.MalformedDropped - before.MalformedDropped; got != uint64(len(malformed)) {
		t.Errorf("MalformedDropped delta %d, want %d", got, len(malformed))
	}
	if st.Resets != 0 || st.GapsDetected != before.GapsDetected {
		t.Errorf("malformed messages must not count as gaps or reset, got %+v", st)
	}
}

// A frame larger than the transport guard (64 KiB floor) is refused before
// zmq4 allocates it: the connection is cut, counted, and re-established,
// and the batches missed meanwhile are replayed.
func TestOversizeFrameCutsConnection(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 0)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint(), MaxPayloadBytes: 1024}, r)
	anchor := waitConnected(t, p, r)
	before := s.Stats()

	if err := p.PublishRawFrames([]byte(""), encodeSeq(anchor+1), make([]byte, minGuardFrameBytes+1)); err != nil {
		t.Fatal(err)
	}
	// Probe until the new connection delivers (slow joiner again).
	poll.Until(t, "the subscriber to come back", hangGuard, func() error {
		if len(after(t, r.snapshot(), anchor)) > 0 {
			return nil
		}
		p.publish(t, true, "probe")
		return fmt.Errorf("stats %+v", s.Stats())
	})
	last := p.publish(t, true, "after-reconnect")
	ev := after(t, r.waitForSeq(t, last), anchor)
	checkContiguous(t, p, ev, anchor+1, last)
	st := s.Stats()
	if st.MalformedDropped-before.MalformedDropped < 1 || st.Disconnects-before.Disconnects != 1 {
		t.Errorf("want the oversize frame counted and one disconnect, before %+v after %+v", before, st)
	}
	if st.Resets != 0 {
		t.Errorf("want the gap repaired without reset, got %+v", st)
	}
}

func TestHandlerErrorsCountedAndStreamContinues(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 0)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint()}, r)
	anchor := waitConnected(t, p, r)
	r.mu.Lock()
	r.failSeq = map[uint64]bool{anchor + 1: true, anchor + 2: true}
	r.mu.Unlock()
	var last uint64
	for i := range 4 {
		last = p.publish(t, true, fmt.Sprintf("b%d", i))
	}
	checkContiguous(t, p, after(t, r.waitForSeq(t, last), anchor), anchor+1, last)
	if st := s.Stats(); st.HandlerErrors != 2 || st.Resets != 0 {
		t.Errorf("want 2 handler errors and no reset, got %+v", st)
	}
}

func TestDuplicateSeqDropped(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "", 0)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint()}, r)
	anchor := waitConnected(t, p, r)
	if err := p.PublishRawFrames([]byte(""), encodeSeq(anchor), []byte("anchor")); err != nil {
		t.Fatal(err)
	}
	next := p.publish(t, true, "next")
	checkContiguous(t, p, after(t, r.waitForSeq(t, next), anchor), anchor+1, next)
	if st := s.Stats(); st.DuplicatesDropped != 1 || st.Resets != 0 {
		t.Errorf("want 1 duplicate dropped and no reset, got %+v", st)
	}
}

// The same seq with another payload cannot be a duplicate: it is a new
// publisher that happens to have reached our seq.
func TestSameSeqDifferentPayloadResets(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "", 0)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint()}, r)
	anchor := waitConnected(t, p, r)
	if err := p.PublishRawFrames([]byte(""), encodeSeq(anchor), []byte("not the anchor")); err != nil {
		t.Fatal(err)
	}
	next := p.publish(t, true, "next")
	ev := after(t, r.waitForSeq(t, next), anchor)
	if len(ev) != 3 || !ev[0].reset || ev[1].seq != anchor || ev[1].payload != "not the anchor" || ev[2].seq != next {
		t.Fatalf("after anchor want [reset, %d (new payload), %d], got %v", anchor, next, ev)
	}
	if st := s.Stats(); st.PublisherRestarts != 1 || st.Resets != 1 || st.DuplicatesDropped != 0 {
		t.Errorf("want 1 restart, 1 reset and no duplicate, got %+v", st)
	}
}

// A restarted publisher that has already counted past our last seq looks
// like a gap; the replay's first batch (our last seq) gives it away.
func TestRestartedPublisherAheadOfUsResets(t *testing.T) {
	pubEP, replayEP := freeTCPEndpoint(t), freeTCPEndpoint(t)
	p1 := startPublisher(t, pubEP, replayEP, 0)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: pubEP, ReplayEndpoint: replayEP}, r)
	oldLast := waitConnected(t, p1, r)
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}

	p2 := startPublisher(t, pubEP, replayEP, 0)
	for i := uint64(0); i <= oldLast+5; i++ {
		p2.publish(t, false, fmt.Sprintf("new-%d", i))
	}
	poll.Until(t, "a reset after the publisher restart", hangGuard, func() error {
		if countResets(r.snapshot()) > 0 {
			return nil
		}
		p2.publish(t, true, "new-probe")
		return fmt.Errorf("events: %v", r.snapshot())
	})
	newLast := p2.publish(t, true, "new-anchor")
	ev := after(t, r.waitForSeq(t, newLast), oldLast)
	if !ev[0].reset || !strings.Contains(ev[0].reason, "differs") {
		t.Fatalf("first event after the old stream is %v, want a restart reset", ev[0])
	}
	checkContiguous(t, p2, ev[1:], 0, newLast)
	if st := s.Stats(); st.PublisherRestarts != 1 || st.Resets != 1 || st.GapsRepaired < 1 {
		t.Errorf("want 1 restart, 1 reset and the new stream caught up, got %+v", st)
	}
}

// Run returns promptly on cancel from every state it can be in, and leaves
// no goroutine behind.
func TestCleanShutdown(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", 0)
	silent := silentListener(t)
	// Settle the publisher's and listener's own goroutines first.
	baseline := runtime.NumGoroutine()

	states := []struct {
		name string
		cfg  Config
	}{
		{"connected and replaying", Config{Endpoint: p.endpoint(), ReplayEndpoint: p.replayEndpoint()}},
		{"endpoint refuses, in backoff", Config{Endpoint: freeTCPEndpoint(t), ReconnectMin: time.Hour, ReconnectMax: time.Hour}},
		{"endpoint silent, in handshake", Config{Endpoint: silent, DialTimeout: time.Hour}},
		{"replay endpoint silent, in replay", Config{Endpoint: p.endpoint(), ReplayEndpoint: silent, ReplayTimeout: time.Hour, DialTimeout: time.Hour}},
	}
	for _, st := range states {
		t.Run(st.name, func(t *testing.T) {
			st.cfg.Logger = quietLogger()
			if st.cfg.ReconnectMin == 0 {
				st.cfg.ReconnectMin, st.cfg.ReconnectMax = 10*time.Millisecond, 100*time.Millisecond
			}
			r := newRecorder()
			s, err := NewSubscriber(st.cfg, r)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			switch st.name {
			case "connected and replaying":
				waitConnected(t, p, r)
			case "replay endpoint silent, in replay":
				// The first probe seen is past seq 0 (earlier subtests
				// published), so Run sits in the late-join replay.
				poll.Until(t, "a replay requested", hangGuard, func() error {
					if st := s.Stats(); st.ReplaysRequested == 0 {
						p.publish(t, true, "probe")
						return fmt.Errorf("stats %+v", st)
					}
					return nil
				})
			default:
				if st.name == "endpoint refuses, in backoff" {
					poll.Until(t, "a connect failure", hangGuard, func() error {
						if st := s.Stats(); st.ConnectFailures == 0 {
							return fmt.Errorf("stats %+v", st)
						}
						return nil
					})
				}
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run returned %v, want nil", err)
				}
			case <-time.After(hangGuard):
				t.Fatalf("Run did not return after cancel")
			}
		})
	}

	poll.Until(t, "the subscribers' goroutines to end", hangGuard, func() error {
		if n := runtime.NumGoroutine(); n > baseline {
			buf := make([]byte, 1<<20)
			return fmt.Errorf("%d goroutines left, baseline %d:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
		}
		return nil
	})
}

func TestRunTwiceRefused(t *testing.T) {
	p := startPublisher(t, "tcp://127.0.0.1:0", "", 0)
	r := newRecorder()
	s := runSubscriber(t, Config{Endpoint: p.endpoint()}, r)
	waitConnected(t, p, r)
	if err := s.Run(context.Background()); err == nil {
		t.Fatal("second concurrent Run returned nil, want an error")
	}
}

func TestNewSubscriberValidatesConfig(t *testing.T) {
	bad := []Config{
		{},
		{Endpoint: "tcp://*:5557"},
		{Endpoint: "tcp://127.0.0.1"},
		{Endpoint: "tcp://127.0.0.1:0"},
		{Endpoint: "tcp://127.0.0.1:70000"},
		{Endpoint: "inproc://x"},
		{Endpoint: "127.0.0.1:5557"},
		{Endpoint: "ipc://"},
		{Endpoint: "tcp://127.0.0.1:5557", ReplayEndpoint: "tcp://:5558"},
		{Endpoint: "tcp://127.0.0.1:5557", MaxPayloadBytes: -1},
		{Endpoint: "tcp://127.0.0.1:5557", ReplayTimeout: -time.Second},
		{Endpoint: "tcp://127.0.0.1:5557", ReconnectMin: time.Second, ReconnectMax: time.Millisecond},
	}
	for _, cfg := range bad {
		if _, err := NewSubscriber(cfg, newRecorder()); err == nil {
			t.Errorf("NewSubscriber(%+v) accepted a bad config", cfg)
		}
	}
	if _, err := NewSubscriber(Config{Endpoint: "tcp://127.0.0.1:5557"}, nil); err == nil {
		t.Errorf("NewSubscriber accepted a nil handler")
	}
	for _, ep := range []string{"tcp://127.0.0.1:5557", "tcp://[::1]:5557", "tcp://engine-0.engines:5557", "ipc:///tmp/kv.sock"} {
		if _, err := NewSubscriber(Config{Endpoint: ep, ReplayEndpoint: ep}, newRecorder()); err != nil {
			t.Errorf("NewSubscriber(%q): %v", ep, err)
		}
	}
}
