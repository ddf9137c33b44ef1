package kvstream

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// hangGuard bounds how long a test waits for something that must happen;
// reaching it is a failure (a hang), never a performance assertion.
const hangGuard = 30 * time.Second

// event is one Handler call.
type event struct {
	reset   bool
	seq     uint64
	payload string
	reason  string
}

func (e event) String() string {
	if e.reset {
		return "reset(" + e.reason + ")"
	}
	return fmt.Sprintf("%d", e.seq)
}

// recorder is a Handler that records every call.
type recorder struct {
	mu      sync.Mutex
	events  []event
	changed chan struct{}
	failSeq map[uint64]bool // HandleBatch returns an error for these
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) HandleBatch(_ context.Context, seq uint64, payload []byte) error {
	r.add(event{seq: seq, payload: string(payload)})
	r.mu.Lock()
	fail := r.failSeq[seq]
	r.mu.Unlock()
	if fail {
		return fmt.Errorf("handler refuses seq %d", seq)
	}
	return nil
}

func (r *recorder) Reset(_ context.Context, reason string) error {
	r.add(event{reset: true, reason: reason})
	return nil
}

func (r *recorder) add(e event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// waitFor blocks until cond holds on the recorded events, or fails the
// test at the hang guard.
func (r *recorder) waitFor(t *testing.T, what string, cond func([]event) bool) []event {
	t.Helper()
	deadline := time.After(hangGuard)
	for {
		ev := r.snapshot()
		if cond(ev) {
			return ev
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; events: %v", what, ev)
		}
	}
}

func (r *recorder) waitForSeq(t *testing.T, seq uint64) []event {
	t.Helper()
	return r.waitFor(t, fmt.Sprintf("seq %d", seq), func(ev []event) bool {
		for _, e := range ev {
			if !e.reset && e.seq == seq {
				return true
			}
		}
		return false
	})
}

// after returns the events recorded after the first delivery of seq.
func after(t *testing.T, ev []event, seq uint64) []event {
	t.Helper()
	for i, e := range ev {
		if !e.reset && e.seq == seq {
			return ev[i+1:]
		}
	}
	t.Fatalf("seq %d never delivered; events: %v", seq, ev)
	return nil
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type testPublisher struct {
	*Publisher
	sent map[uint64]string // payload per seq, as published
	mu   sync.Mutex
}

func startPublisher(t *testing.T, endpoint, replayEndpoint string, bufferSteps int) *testPublisher {
	t.Helper()
	p, err := NewPublisher(PublisherConfig{Endpoint: endpoint, ReplayEndpoint: replayEndpoint, BufferSteps: bufferSteps, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return &testPublisher{Publisher: p, sent: map[uint64]string{}}
}

func (p *testPublisher) endpoint() string { return "tcp://" + p.Addr().String() }

func (p *testPublisher) replayEndpoint() string { return "tcp://" + p.ReplayAddr().String() }

func (p *testPublisher) publish(t *testing.T, live bool, payload string) uint64 {
	t.Helper()
	var seq uint64
	var err error
	if live {
		seq, err = p.Publish([]byte(payload))
	} else {
		seq, err = p.PublishSkippingLive([]byte(payload))
	}
	if err != nil {
		t.Fatalf("publish %q: %v", payload, err)
	}
	p.mu.Lock()
	p.sent[seq] = payload
	p.mu.Unlock()
	return seq
}

func (p *testPublisher) payloadOf(seq uint64) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent[seq]
}

// waitConnected defeats the PUB/SUB slow-joiner: it publishes probes until
// the handler has seen one, then publishes an anchor and waits for it, so
// every later publish is received live. It returns the anchor's seq.
func waitConnected(t *testing.T, p *testPublisher, r *recorder) uint64 {
	t.Helper()
	i := 0
	poll.True(t, "the subscriber to receive a probe", hangGuard, func() bool {
		if len(r.snapshot()) > 0 {
			return true
		}
		p.publish(t, true, fmt.Sprintf("probe-%d", i))
		i++
		return false
	})
	anchor := p.publish(t, true, "anchor")
	r.waitForSeq(t, anchor)
	return anchor
}

// freeTCPEndpoint returns a tcp:// endpoint on a port that was free a
// moment ago (nothing listens on it).
func freeTCPEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "tcp://" + addr
}

// silentListener accepts TCP connections and never says a word.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "tcp://" + l.Addr().String()
}

// runSubscriber starts Run and stops it at cleanup, failing if Run does
// not return.
func runSubscriber(t *testing.T, cfg Config, h Handler) *Subscriber {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	if cfg.ReconnectMin == 0 {
		cfg.ReconnectMin, cfg.ReconnectMax = 10*time.Millisecond, 100*time.Millisecond
	}
	s, err := NewSubscriber(cfg, h)
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(hangGuard):
			t.Errorf("Run did not return after cancel")
		}
	})
	return s
}

// checkContiguous fails unless ev is batches only, seqs from..to in order,
// each with the payload the publisher sent.
func checkContiguous(t *testing.T, p *testPublisher, ev []event, from, to uint64) {
	t.Helper()
	if uint64(len(ev)) != to-from+1 {
		t.Fatalf("want seqs %d..%d exactly once in order, got %v", from, to, ev)
	}
	for i, e := range ev {
		want := from + uint64(i)
		if e.reset || e.seq != want {
			t.Fatalf("event %d is %v, want seq %d; events: %v", i, e, want, ev)
		}
		if got, sent := e.payload, p.payloadOf(want); got != sent {
			t.Fatalf("seq %d payload %q, publisher sent %q", want, got, sent)
		}
	}
}

func countResets(ev []event) int {
	n := 0
	for _, e := range ev {
		if e.reset {
			n++
		}
	}
	return n
}
