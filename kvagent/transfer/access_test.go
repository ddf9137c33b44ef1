package transfer

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// By default a target takes no inbound writes: the item fails with a
// RemoteError, not one byte lands, and the connection keeps serving reads;
// nor inbound notifications.
func TestTCPTargetRefusesInboundWritesByDefault(t *testing.T) {
	a, _ := newTestAgent(t, TCPConfig{Name: "a", Streams: 1})
	b, _ := newTestAgent(t, TCPConfig{Name: "b"})
	victim := pattern(40, 64<<10)
	want := bytes.Clone(victim)
	rh := mustRegister(t, b, Region{Kind: DRAM, Addr: victim})
	local := bytes.Repeat([]byte{0xEE}, 64<<10)
	lh := mustRegister(t, a, Region{Kind: DRAM, Addr: local})
	load(t, a, b)
	err := await(t, a, post(t, a, Write, []Desc{{Region: lh, Len: 64 << 10}}, "b", []Desc{{Region: rh, Len: 64 << 10}}))
	var re *RemoteError
	if !errors.As(err, &re) || !strings.Contains(re.Msg, ErrInboundWrite.Error()) {
		t.Fatalf("write into a target without InboundWrites: %v, want a RemoteError saying %q", err, ErrInboundWrite)
	}
	if !bytes.Equal(victim, want) {
		t.Fatal("a refused write changed the target's memory")
	}
	if got := counter(t, b.metrics.errors, reasonRejected); got < 1 {
		t.Fatalf("target errors{reason=rejected} = %v, want >= 1", got)
	}
	// The same connection still serves reads.
	if err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: 100}}, "b", []Desc{{Region: rh, Len: 100}})); err != nil || !bytes.Equal(local[:100], want[:100]) {
		t.Fatalf("read after a refused write: %v", err)
	}
	if got := b.accepted.Load(); got != 1 {
		t.Fatalf("target accepted %d connections, want the one stream kept", got)
	}
	// Nor does it queue notifications it would never read.
	if err := a.GenNotif("b", []byte("hold me")); err == nil || !strings.Contains(err.Error(), ErrInboundNotif.Error()) {
		t.Fatalf("notification to a target without InboundNotifs: %v, want %q", err, ErrInboundNotif)
	}
	if got := b.GetNotifs(); len(got) != 0 {
		t.Fatalf("target queued %v", got)
	}
}

// ReadAccess sees every read with its grant, after the bounds check; a
// refusal is that read's error and nothing else's; release runs once the
// bytes are out.
func TestTCPReadAccessDecidesEveryRead(t *testing.T) {
	granted := Grant{0xA1, 0xB2}
	var mu sync.Mutex
	var seen []ReadRequest
	held := 0
	access := func(r ReadRequest) (func(), error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r)
		if r.Grant != granted || r.Offset+r.Len > 4096 {
			return nil, fmt.Errorf("grant %x does not cover [%d, +%d)", r.Grant[:2], r.Offset, r.Len)
		}
		held++
		return func() {
			mu.Lock()
			held--
			mu.Unlock()
		}, nil
	}
	a, _ := newTestAgent(t, TCPConfig{Name: "a", Streams: 1})
	b, _ := newTestAgent(t, TCPConfig{Name: "b", ReadAccess: access})
	remote := pattern(41, 8192)
	rh := mustRegister(t, b, Region{Kind: DRAM, Addr: remote})
	local := make([]byte, 8192)
	lh := mustRegister(t, a, Region{Kind: DRAM, Addr: local})
	load(t, a, b)

	if err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: 4096}}, "b", []Desc{{Region: rh, Len: 4096, Grant: granted}})); err != nil {
		t.Fatalf("granted read: %v", err)
	}
	if !bytes.Equal(local[:4096], remote[:4096]) {
		t.Fatal("granted read: bytes differ")
	}
	for _, c := range []struct {
		name string
		d    Desc
	}{
		{"no grant", Desc{Region: rh, Len: 4096}},
		{"another grant", Desc{Region: rh, Len: 4096, Grant: Grant{0xA1, 0xB3}}},
		{"beyond the grant", Desc{Region: rh, Offset: 4096, Len: 4096, Grant: granted}},
	} {
		clear(local)
		err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: c.d.Len}}, "b", []Desc{c.d}))
		var re *RemoteError
		if !errors.As(err, &re) || !strings.Contains(re.Msg, ErrNotPermitted.Error()) || !strings.Contains(re.Msg, "does not cover") {
			t.Fatalf("%s: %v, want a RemoteError naming %q and the reason", c.name, err, ErrNotPermitted)
		}
		if !bytes.Equal(local, make([]byte, len(local))) {
			t.Fatalf("%s: bytes landed", c.name)
		}
	}
	// Out of bounds never reaches ReadAccess (a raw peer skips the
	// initiator's own check).
	mu.Lock()
	n := len(seen)
	mu.Unlock()
	r := dialRaw(t, b.addr, "rogue")
	r.send(frameHeader{typ: frameReadReq, xfer: 1, region: rh, offset: 8190}, readRequest{n: 10, grant: granted}.encode())
	if f := r.recv(); f.typ != frameReadErr || !strings.Contains(string(f.payload), "out of region bounds") {
		t.Fatalf("out-of-bounds read answered %s %q", f.typ, f.payload)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("ReadAccess asked about an out-of-bounds read: %+v", seen[n:])
	}
	if held != 0 {
		t.Fatalf("%d granted reads never released", held)
	}
	if r := seen[0]; r.PeerName != "a" || r.PeerCert != nil || r.Region != rh || r.Offset != 0 || r.Len != 4096 || r.Grant != granted {
		t.Fatalf("ReadAccess saw %+v", r)
	}
}

// remoteAddrListener makes every accepted connection report addr as its
// remote address: a connection from another host, on loopback.
type remoteAddrListener struct {
	net.Listener
	addr net.Addr
}

func (l remoteAddrListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return remoteAddrConn{c, l.addr}, nil
}

type remoteAddrConn struct {
	net.Conn
	addr net.Addr
}

func (c remoteAddrConn) RemoteAddr() net.Addr { return c.addr }

// Without TLS the target talks to loopback peers only.
func TestTCPPlaintextTargetRefusesRemotePeers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := newTestAgent(t, TCPConfig{Name: "a", Streams: 1})
	b, _ := newTestAgent(t, TCPConfig{Name: "b", Listener: remoteAddrListener{ln, &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 40000}}})
	rh := mustRegister(t, b, Region{Kind: DRAM, Addr: pattern(42, 4096)})
	local := make([]byte, 4096)
	lh := mustRegister(t, a, Region{Kind: DRAM, Addr: local})
	load(t, a, b)
	if err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: 4096}}, "b", []Desc{{Region: rh, Len: 4096}})); err == nil {
		t.Fatal("a plaintext read from a non-loopback address succeeded")
	}
	if !bytes.Equal(local, make([]byte, 4096)) {
		t.Fatal("bytes landed")
	}
	poll.True(t, "the refusal to be counted", time.Minute, func() bool { return counter(t, b.metrics.errors, reasonRejected) >= 1 })
}
