package kvstream

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/kvgate/kvgate/internal/testkit/poll"
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
		runSubscriber(t, Config{Listener: l, Topic: topic, ReplayEndpoint: "tcp://" + pub.ReplayAddr().String()}, rec)
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
	if err := l.attach("t", q); err != nil {
		t.Fatal(err)
	}
	if err := l.attach("t", q); err == nil {
		t.Fatal("duplicate topic attached")
	}
}

type tcpAddr netip.AddrPort

func (a tcpAddr) Network() string { return "tcp" }
func (a tcpAddr) String() string  { return netip.AddrPort(a).String() }
