package kvstream

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/netip"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvgate/kvgate/lab/testkit/poll"
)

func startListener(t *testing.T, allow ...netip.Prefix) *Listener {
	t.Helper()
	l, err := NewListener(ListenerConfig{Endpoint: "tcp://127.0.0.1:0", Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Bind mode: two engines dial one bound socket; each Subscriber gets its
// own engine's batches (by topic), in order, with gaps repaired through
// that engine's replay endpoint, and a topic nobody is configured for is
// counted and dropped.
func TestListenerRoutesByTopicAndRepairsGaps(t *testing.T) {
	l := startListener(t)
	addr := "tcp://" + l.Addr().String()
	type engine struct {
		pub *Publisher
		rec *recorder
	}
	var engines []engine
	for i, layout := range []ReplayLayout{ReplayWithTopic, ReplayLegacy} {
		topic := fmt.Sprintf("kv@10.0.0.%d@qwen3", i+1)
		pub, err := NewPublisher(PublisherConfig{Endpoint: addr, Connect: true, ReplayEndpoint: "tcp://127.0.0.1:0", Topic: topic, ReplayLayout: layout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pub.Close() })
		rec := newRecorder()
		runSubscriber(t, Config{Listener: l, Topic: topic, Publishers: loopbackPublisher, ReplayEndpoint: "tcp://" + pub.ReplayAddr().String()}, rec)
		engines = append(engines, engine{pub, rec})
	}
	stray, err := NewPublisher(PublisherConfig{Endpoint: addr, Connect: true, Topic: "kv@10.9.9.9@other"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stray.Close() })
	// The first batches may go out before the subscriptions reach the
	// publishers (ZMQ's slow joiner); tail polls fetch them.
	for i, e := range engines {
		for j := 0; j < 3; j++ {
			payload := fmt.Sprintf("e%d-b%d", i, j)
			var err error
			if j == 1 {
				_, err = e.pub.PublishSkippingLive([]byte(payload)) // a gap
			} else {
				_, err = e.pub.Publish([]byte(payload))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// The stray publisher's first batches may go out before its connection
	// is up (ZMQ drops them): publish until one is seen and counted.
	poll.True(t, "a stray batch counted as an unknown topic", hangGuard, func() bool {
		if _, err := stray.Publish([]byte("stray")); err != nil {
			t.Fatal(err)
		}
		return l.Stats().UnknownTopic > 0
	})
	for i, e := range engines {
		ev := e.rec.waitForSeq(t, 2)
		if len(ev) != 3 {
			t.Fatalf("engine %d: got %v, want seqs 0..2", i, ev)
		}
		for j, got := range ev {
			if got.reset || got.seq != uint64(j) || got.payload != fmt.Sprintf("e%d-b%d", i, j) {
				t.Fatalf("engine %d event %d: %v", i, j, got)
			}
		}
	}
	if st := l.Stats(); st.UnknownTopic == 0 || st.AttachedTopics != 2 {
		t.Fatalf("listener stats %+v", st)
	}
}

// A TCP peer that is neither loopback nor in the allow list is cut before
// it can say anything; loopback is always let in.
func TestListenerRefusesPeersOutsideTheAllowList(t *testing.T) {
	for _, c := range []struct {
		addr string
		ok   bool
	}{{"127.0.0.1:5000", true}, {"[::1]:5000", true}, {"10.0.0.7:5000", true}, {"10.1.0.7:5000", false}, {"192.168.1.2:5000", false}} {
		a := netip.MustParseAddrPort(c.addr)
		if got := peerAllowed(tcpAddr(a), []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}); got != c.ok {
			t.Errorf("peer %s allowed %v, want %v", c.addr, got, c.ok)
		}
	}
	// Attaching the same topic twice is refused.
	l := startListener(t)
	q := &liveQueue{ch: make(chan received, 1), drained: make(chan struct{}, 1), limit: 1 << 20}
	if err := l.attach("t", loopbackPublisher, q); err != nil {
		t.Fatal(err)
	}
	if err := l.attach("t", loopbackPublisher, q); err == nil {
		t.Fatal("duplicate topic attached")
	}
	// So is a topic without the networks its engine publishes from.
	if err := l.attach("u", nil, q); err == nil {
		t.Fatal("topic attached without publishers")
	}
}

// dialForger is a raw PUB socket connected to addr from the local IP from
// (through the Publisher's watched transport), sending whatever frames the
// test gives it.
func dialForger(t *testing.T, from, addr string) zmq4.Socket {
	t.Helper()
	if err := registerWatchedTransports(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), redialKey{}, newRedialer(netip.MustParseAddr(from))))
	sock := zmq4.NewPub(ctx, zmq4.WithLogger(log.New(io.Discard, "", 0)))
	t.Cleanup(func() {
		cancel()
		sock.Close()
	})
	if err := sock.Dial(watchedTCP + "://" + addr); err != nil {
		t.Fatal(err)
	}
	return sock
}

// loopbackPublisher is where the tests' engines connect from by default.
var loopbackPublisher = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

// Issue 31, finding 3: a topic is only a label its sender picks. A second
// peer allowed on the bound socket (another loopback address here, as any
// process on the indexer's host, or a host in events_bind_allow) publishes
// under the engine's topic, first a forged batch that continues the
// engine's sequence (forged prefixes), then sequence 0 (what a restarted
// engine sends, which drops everything the engine holds). Neither reaches
// the engine's Subscriber; the forger's connection is cut and counted; the
// engine's own stream goes on without a gap, restart or reset.
func TestListenerRefusesAnEnginesTopicFromAnotherPeer(t *testing.T) {
	l := startListener(t)
	addr := "tcp://" + l.Addr().String()
	const topic = "kv@victim@qwen3"
	engine, err := NewPublisher(PublisherConfig{Endpoint: addr, Connect: true, From: "127.0.0.2", ReplayEndpoint: "tcp://127.0.0.2:0", Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { engine.Close() })
	rec := newRecorder()
	sub := runSubscriber(t, Config{Listener: l, Topic: topic, Publishers: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")},
		ReplayEndpoint: "tcp://" + engine.ReplayAddr().String()}, rec)
	for i := range 2 {
		if _, err := engine.Publish([]byte(fmt.Sprintf("engine-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	rec.waitForSeq(t, 1)

	// The forger: same topic, from 127.0.0.3. Its publisher's first
	// batches may go out before its connection is up (ZMQ drops them), and
	// each cut connection is redialled: publish until two batches (the
	// continuing one and the sequence reset) have been refused.
	forge := func(what string, seq uint64, payload string) {
		before := l.Stats().ForeignTopic
		forger := dialForger(t, "127.0.0.3", l.Addr().String())
		poll.True(t, what+" refused", hangGuard, func() bool {
			// Sent until the connection is up and the batch refused
			// (a PUB drops what it sends before then).
			forger.Send(zmq4.NewMsgFrom([]byte(topic), encodeSeq(seq), []byte(payload)))
			return l.Stats().ForeignTopic > before
		})
	}
	forge("a batch continuing the engine's sequence", 2, "forged-prefix")
	forge("a sequence reset", 0, "forged-restart")

	if _, err := engine.Publish([]byte("engine-2")); err != nil {
		t.Fatal(err)
	}
	ev := rec.waitForSeq(t, 2)
	for i, e := range ev {
		if e.reset || e.seq != uint64(i) || e.payload != fmt.Sprintf("engine-%d", i) {
			t.Fatalf("the engine's stream was touched by the forger: event %d is %+v (all: %+v)", i, e, ev)
		}
	}
	if st := sub.Stats(); st.Resets != 0 || st.PublisherRestarts != 0 || st.GapsUnrepaired != 0 || st.MalformedDropped != 0 {
		t.Fatalf("subscriber stats %+v, want no reset, restart, unrepaired gap or malformed message", st)
	}
	if st := l.Stats(); st.ForeignTopic < 2 || st.UnknownTopic != 0 {
		t.Fatalf("listener stats %+v", st)
	}
}

type tcpAddr netip.AddrPort

func (a tcpAddr) Network() string { return "tcp" }
func (a tcpAddr) String() string  { return netip.AddrPort(a).String() }

// A connecting Publisher whose connection the listener cuts (a topic it may
// not publish under) dials again each time, and still closes. The dialling
// is the Publisher's own since zmq4's automatic reconnect could deadlock
// (publisher_redial.go: a send failing before the reader saw the end, with
// the reaper removing the old connection at that moment; an indexer test
// hung on it once). That interleaving is too rare to force here; this test
// holds the replacement to what the old path did: redial after every cut,
// close cleanly, deliver nothing forged.
func TestConnectingPublisherRedialsAfterEachCutAndCloses(t *testing.T) {
	l := startListener(t)
	const topic = "kv@victim@qwen3"
	rec := newRecorder()
	runSubscriber(t, Config{Listener: l, Topic: topic, Publishers: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}, rec)
	forger, err := NewPublisher(PublisherConfig{Endpoint: "tcp://" + l.Addr().String(), Connect: true, From: "127.0.0.3", Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			forger.Close()
		}
	})
	// Each refusal cuts the connection; five of them need four redials.
	// Bursts, so that sends meet the cut connection (the failing send is
	// what ran zmq4's redial under the writer's lock).
	poll.True(t, "five batches refused, each on a new connection", hangGuard, func() bool {
		for range 64 {
			if _, err := forger.Publish([]byte("forged")); err != nil {
				t.Fatal(err)
			}
		}
		return l.Stats().ForeignTopic >= 5
	})
	done := make(chan error, 1)
	go func() { done <- forger.Close() }()
	select {
	case err := <-done:
		closed = true
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(hangGuard):
		t.Fatalf("Close of a publisher whose connections were cut did not return within %v", hangGuard)
	}
	if got := rec.snapshot(); len(got) != 0 {
		t.Fatalf("forged batches delivered to the victim's subscriber: %+v", got)
	}
}
