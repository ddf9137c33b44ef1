package transfer

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/poll"
)

func TestTCPConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  TCPConfig
		want string
	}{
		{TCPConfig{}, "name"},
		{TCPConfig{Name: strings.Repeat("x", 256)}, "name"},
		{TCPConfig{Name: "a", Streams: -1}, "streams"},
		{TCPConfig{Name: "a", Streams: 65}, "streams"},
		{TCPConfig{Name: "a", MaxMessageBytes: 100}, "max message"},
		{TCPConfig{Name: "a", MaxMessageBytes: 32 << 20}, "max message"},
		{TCPConfig{Name: "a", IOTimeout: -time.Second}, "timeout"},
		{TCPConfig{Name: "a", Listen: "256.0.0.1:x"}, "listen"},
	} {
		a, err := NewTCP(c.cfg)
		if err == nil {
			a.Close()
			t.Errorf("NewTCP(%+v) accepted", c.cfg)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewTCP(%+v): %v, want it to name %q", c.cfg, err, c.want)
		}
	}
}

// A long descriptor is striped over every stream of the peer.
func TestTCPStripesOverStreams(t *testing.T) {
	a, _ := newTestAgent(t, TCPConfig{Name: "a", Streams: 5})
	b, _ := newTestAgent(t, TCPConfig{Name: "b", InboundWrites: true})
	const n = 5 * stripeBytes
	remote := pattern(1, n)
	local := make([]byte, n)
	rh := mustRegister(t, b, Region{Kind: DRAM, Addr: remote})
	lh := mustRegister(t, a, Region{Kind: DRAM, Addr: local})
	load(t, a, b)
	if err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: n}}, "b", []Desc{{Region: rh, Len: n}})); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local, remote) {
		t.Fatal("bytes differ")
	}
	if got := b.accepted.Load(); got != 5 {
		t.Fatalf("target accepted %d connections, want one per stream (5)", got)
	}
	// The connections are kept for the next transfer.
	if err := await(t, a, post(t, a, Write, []Desc{{Region: lh, Len: n}}, "b", []Desc{{Region: rh, Len: n}})); err != nil {
		t.Fatal(err)
	}
	if got := b.accepted.Load(); got != 5 {
		t.Fatalf("after a second transfer the target accepted %d connections, want still 5", got)
	}
}

// Metadata the initiator holds may be stale; the target checks every
// descriptor against what it has registered now.
func TestTCPTargetChecksDescriptors(t *testing.T) {
	a, areg := newTestAgent(t, TCPConfig{Name: "a"})
	b, _ := newTestAgent(t, TCPConfig{Name: "b"})
	remote := pattern(2, 1<<20)
	local := make([]byte, 1<<20)
	rh := mustRegister(t, b, Region{Kind: DRAM, Addr: remote})
	lh := mustRegister(t, a, Region{Kind: DRAM, Addr: local})
	load(t, a, b)
	if err := b.DeregisterMem(rh); err != nil {
		t.Fatal(err)
	}
	for _, op := range []Op{Read, Write} {
		err := await(t, a, post(t, a, op, []Desc{{Region: lh, Len: 1 << 20}}, "b", []Desc{{Region: rh, Len: 1 << 20}}))
		var re *RemoteError
		if !errors.As(err, &re) || re.Agent != "b" || !strings.Contains(re.Msg, "unknown region") {
			t.Fatalf("%s from a deregistered region: %v, want a RemoteError from b naming the unknown region", op, err)
		}
	}
	if !bytes.Equal(local, make([]byte, 1<<20)) {
		t.Fatal("a refused read wrote local bytes")
	}
	if got := counter(t, a.metrics.errors, reasonRemote); got != 2 {
		t.Fatalf("errors{reason=remote} = %v, want 2", got)
	}
	_ = areg
	if got := counter(t, b.metrics.errors, reasonRejected); got < 2 {
		t.Fatalf("target errors{reason=rejected} = %v, want >= 2", got)
	}
}

// rawConn speaks the wire protocol by hand, as a hostile or buggy peer.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	fw   *frameWriter
	fr   *frameReader
}

func dialRaw(t *testing.T, addr, name string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute))
	r := &rawConn{t: t, conn: c, fw: newFrameWriter(c), fr: newFrameReader(bufio.NewReader(c), maxMessageBytes)}
	if name != "" {
		r.send(frameHeader{typ: frameHello}, hello{version: protocolVersion, maxPayload: minMessageBytes, name: name}.encode())
		f := r.recv()
		if f.typ != frameHelloAck {
			t.Fatalf("answer to HELLO: %s", f.typ)
		}
		h, err := decodeHello(f.payload, minProtocolVersion, protocolVersion)
		if err != nil {
			t.Fatal(err)
		}
		r.fr.useVersion(h.version, false)
		r.fw.useVersion(h.version, false)
	}
	return r
}

func (r *rawConn) send(h frameHeader, p []byte) {
	r.t.Helper()
	if err := r.fw.write(h, p); err != nil {
		r.t.Fatal(err)
	}
	if err := r.fw.flush(); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) recv() frame {
	r.t.Helper()
	f, err := readFrameFrom(r.fr)
	if err != nil {
		r.t.Fatalf("reading an answer: %v", err)
	}
	return f
}

// readReq is a READ_REQ payload of n bytes without a grant.
func readReq(n uint64) []byte { return readRequest{n: n}.encode() }

// A peer that skips the initiator's checks gets errors, never bytes
// outside the region, and cannot write outside it either.
func TestTCPTargetRefusesOutOfBounds(t *testing.T) {
	b, _ := newTestAgent(t, TCPConfig{Name: "b", InboundWrites: true})
	backing := pattern(3, 3<<10)
	want := bytes.Clone(backing)
	rh := mustRegister(t, b, Region{Kind: DRAM, Addr: backing, Offset: 1 << 10, Len: 1 << 10}) // the middle KiB only
	r := dialRaw(t, b.addr, "rogue")
	for _, c := range []struct {
		region uint32
		off    uint64
		n      uint64
	}{
		{rh, 1000, 100},      // runs past the end
		{rh, 0, 1<<10 + 1},   // one byte too many
		{rh, 1 << 10, 1},     // starts at the end
		{rh, 1 << 63, 10},    // offset beyond int64
		{rh, 0, 1 << 63},     // length beyond int64
		{rh, 0, 0},           // empty
		{rh + 1, 0, 10},      // no such region
		{0, 0, 10},           // handle zero
		{rh, 1<<64 - 5, 100}, // wraps around
	} {
		r.send(frameHeader{typ: frameReadReq, xfer: 7, desc: 3, region: c.region, offset: c.off}, readReq(c.n))
		f := r.recv()
		if f.typ != frameReadErr || f.xfer != 7 || f.desc != 3 {
			t.Fatalf("READ_REQ region %d [%d, +%d): answered %s (transfer %d, desc %d), want READ_ERR", c.region, c.off, c.n, f.typ, f.xfer, f.desc)
		}
		if !strings.Contains(string(f.payload), "region") {
			t.Fatalf("READ_ERR reason %q does not name the region", f.payload)
		}
	}
	// Writes outside the region are refused at FLUSH and change nothing.
	r.send(frameHeader{typ: frameWriteData, xfer: 8, desc: 0, region: rh, offset: 1000}, bytes.Repeat([]byte{0xAA}, 100))
	r.send(frameHeader{typ: frameWriteData, xfer: 8, desc: 0, region: rh, offset: 0}, bytes.Repeat([]byte{0xBB}, 10))
	r.send(frameHeader{typ: frameFlush, xfer: 8, desc: 0}, nil)
	f := r.recv()
	if f.typ != frameWriteAck || f.flags != flagError || !strings.Contains(string(f.payload), "out of region bounds") {
		t.Fatalf("out-of-bounds write answered %s flags %d %q, want WRITE_ACK with an out-of-bounds error", f.typ, f.flags, f.payload)
	}
	if !bytes.Equal(backing, want) {
		t.Fatal("an out-of-bounds write (or the write after it in the same item) changed memory")
	}
	// An in-bounds read still works on the same connection.
	r.send(frameHeader{typ: frameReadReq, xfer: 9, region: rh, offset: 24}, readReq(100))
	f = r.recv()
	if f.typ != frameData || !bytes.Equal(f.payload, want[(1<<10)+24:(1<<10)+124]) {
		t.Fatalf("in-bounds read answered %s with %d bytes, want the region's bytes", f.typ, len(f.payload))
	}
}

// A frame that breaks the protocol ends the connection with an ERROR
// frame that says why.
func TestTCPTargetRefusesBadFrames(t *testing.T) {
	b, _ := newTestAgent(t, TCPConfig{Name: "b", MaxMessageBytes: 64 << 10})
	mustRegister(t, b, Region{Kind: DRAM, Addr: make([]byte, 4096)})
	expectError := func(r *rawConn, want string) {
		t.Helper()
		f := r.recv()
		if f.typ != frameError || !strings.Contains(string(f.payload), want) {
			t.Fatalf("answered %s %q, want ERROR naming %q", f.typ, f.payload, want)
		}
		if _, err := readFrameFrom(r.fr); err == nil {
			t.Fatal("connection still open after ERROR")
		}
	}
	// No hello first.
	r := dialRaw(t, b.addr, "")
	r.send(frameHeader{typ: frameReadReq, region: 1}, readReq(1))
	expectError(r, "before HELLO")
	// A hello of another protocol version.
	r = dialRaw(t, b.addr, "")
	r.send(frameHeader{typ: frameHello}, hello{version: 9, maxPayload: minMessageBytes, name: "x"}.encode())
	expectError(r, "version")
	// A corrupted frame.
	r = dialRaw(t, b.addr, "rogue")
	var buf bytes.Buffer
	fw := newFrameWriter(&buf)
	fw.write(frameHeader{typ: frameReadReq, xfer: 1, region: 1}, readReq(10))
	fw.flush()
	bad := buf.Bytes()
	bad[len(bad)-3] ^= 1 // in the payload
	r.conn.Write(bad)
	expectError(r, "checksum")
	// A frame larger than the target accepts: refused from its header.
	r = dialRaw(t, b.addr, "rogue")
	var hdr [frameHeadLen]byte
	binary.BigEndian.PutUint32(hdr[:], frameFixedLen+(64<<10)+1)
	hdr[8] = byte(frameWriteData)
	r.conn.Write(hdr[:])
	expectError(r, "length")
	// A frame only an agent answering sends.
	r = dialRaw(t, b.addr, "rogue")
	r.send(frameHeader{typ: frameData, xfer: 1}, []byte("x"))
	expectError(r, "unexpected DATA")
	if got := counter(t, b.metrics.errors, reasonRejected); got < 5 {
		t.Fatalf("errors{reason=rejected} = %v, want >= 5", got)
	}
}

// fakePeer is a listener speaking just enough of the protocol to
// misbehave in one chosen way after the handshake.
func fakePeer(t *testing.T, name string, after func(r *rawConn, req frame)) (md []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := &rawConn{t: t, conn: c, fw: newFrameWriter(c), fr: newFrameReader(bufio.NewReader(c), maxMessageBytes)}
				f, err := readFrameFrom(r.fr)
				if err != nil || f.typ != frameHello {
					return
				}
				h, err := decodeHello(f.payload, minProtocolVersion, protocolVersion)
				if err != nil {
					return
				}
				r.fw.write(frameHeader{typ: frameHelloAck}, hello{version: h.version, maxPayload: minMessageBytes, name: name}.encode())
				r.fw.flush()
				r.fr.useVersion(h.version, false)
				r.fw.useVersion(h.version, false)
				for {
					f, err := readFrameFrom(r.fr)
					if err != nil {
						return
					}
					after(r, f)
				}
			}()
		}
	}()
	return metadata{name: "fake", addr: ln.Addr().String(), maxPayload: minMessageBytes, regions: []remoteRegion{{handle: 1, kind: DRAM, length: 1 << 20}}}.encode()
}

func TestTCPMisbehavingPeers(t *testing.T) {
	cases := []struct {
		name   string
		answer string // the fake's name in its HELLO_ACK
		after  func(r *rawConn, req frame)
		reason string
		msg    string
	}{
		{"bad checksum", "fake", func(r *rawConn, req frame) {
			var buf bytes.Buffer
			fw := newFrameWriter(&buf)
			fw.write(frameHeader{typ: frameData, xfer: req.xfer, desc: req.desc, region: req.region, offset: req.offset}, make([]byte, 100))
			fw.flush()
			b := buf.Bytes()
			b[40] ^= 0xff
			r.conn.Write(b)
		}, reasonChecksum, "checksum"},
		{"wrong offset", "fake", func(r *rawConn, req frame) {
			r.fw.write(frameHeader{typ: frameData, xfer: req.xfer, desc: req.desc, region: req.region, offset: req.offset + 1}, make([]byte, 100))
			r.fw.flush()
		}, reasonProtocol, "DATA frame"},
		{"too many bytes", "fake", func(r *rawConn, req frame) {
			r.fw.write(frameHeader{typ: frameData, xfer: req.xfer, desc: req.desc, region: req.region, offset: req.offset}, make([]byte, 101))
			r.fw.flush()
		}, reasonProtocol, "DATA frame"},
		{"answers another transfer", "fake", func(r *rawConn, req frame) {
			r.fw.write(frameHeader{typ: frameData, xfer: req.xfer + 1, desc: req.desc, region: req.region, offset: req.offset}, make([]byte, 100))
			r.fw.flush()
		}, reasonProtocol, "unexpected DATA"},
		{"silent", "fake", func(r *rawConn, req frame) {}, reasonTimeout, "timeout"},
		{"hangs up", "fake", func(r *rawConn, req frame) { r.conn.Close() }, reasonPeerClosed, "EOF"},
		{"impostor", "somebody-else", func(r *rawConn, req frame) {}, reasonHandshake, `"somebody-else" answered`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, _ := newTestAgent(t, TCPConfig{Name: "a", Streams: 1, IOTimeout: 300 * time.Millisecond})
			local := make([]byte, 100)
			lh := mustRegister(t, a, Region{Kind: DRAM, Addr: local})
			if _, err := a.LoadRemoteMetadata(fakePeer(t, c.answer, c.after)); err != nil {
				t.Fatal(err)
			}
			err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: 100}}, "fake", []Desc{{Region: 1, Len: 100}}))
			if err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("transfer error %v, want one mentioning %q", err, c.msg)
			}
			if st, serr := a.Status(1); st != Failed || serr == nil {
				t.Fatalf("Status = %s, %v, want failed", st, serr)
			}
			if got := counter(t, a.metrics.errors, c.reason); got != 1 {
				t.Fatalf("errors{reason=%s} = %v, want 1 (error: %v)", c.reason, got, err)
			}
			if got := counter(t, a.metrics.transfers, "failed"); got != 1 {
				t.Fatalf("transfers{result=failed} = %v, want 1", got)
			}
		})
	}
}

// The target closes while bytes are on the wire: the transfer fails with
// the connection's error instead of hanging.
func TestTCPPeerClosesMidTransfer(t *testing.T) {
	a, _ := newTestAgent(t, TCPConfig{Name: "a", Streams: 2, MaxMessageBytes: 64 << 10})
	b, _ := newTestAgent(t, TCPConfig{Name: "b", Listener: newSlowListener(t)})
	const n = 4 << 20
	rh := mustRegister(t, b, Region{Kind: DRAM, Addr: pattern(4, n)})
	lh := mustRegister(t, a, Region{Kind: DRAM, Addr: make([]byte, n)})
	load(t, a, b)
	x := post(t, a, Read, []Desc{{Region: lh, Len: n}}, "b", []Desc{{Region: rh, Len: n}})
	poll.True(t, "the first bytes", time.Minute, func() bool { return counter(t, a.metrics.bytes, "read") > 0 })
	b.Close()
	err := await(t, a, x)
	if err == nil {
		t.Fatal("transfer from a peer that closed midway succeeded")
	}
	if !strings.Contains(err.Error(), `peer "b"`) {
		t.Fatalf("error %v does not name the peer", err)
	}
	if got := counter(t, a.metrics.bytes, "read"); got >= n {
		t.Fatalf("read %v bytes, all of them, though the peer closed midway", got)
	}
}

// Release of a transfer in progress cancels it: once Release returns, no
// more bytes land in the local region.
func TestTCPReleaseCancels(t *testing.T) {
	a, _ := newTestAgent(t, TCPConfig{Name: "a", Streams: 2, MaxMessageBytes: 64 << 10})
	b, _ := newTestAgent(t, TCPConfig{Name: "b", Listener: newSlowListener(t)})
	const n = 2 << 20
	local := make([]byte, n)
	rh := mustRegister(t, b, Region{Kind: DRAM, Addr: pattern(5, n)})
	lh := mustRegister(t, a, Region{Kind: DRAM, Addr: local})
	load(t, a, b)
	x := post(t, a, Read, []Desc{{Region: lh, Len: n}}, "b", []Desc{{Region: rh, Len: n}})
	if err := a.Post(x); !errors.Is(err, ErrRepostActive) {
		t.Fatalf("Post of a transfer in progress: %v, want ErrRepostActive", err)
	}
	poll.True(t, "the first bytes", time.Minute, func() bool { return counter(t, a.metrics.bytes, "read") > 0 })
	at, _ := a.current(x)
	if err := a.Release(x); err != nil {
		t.Fatal(err)
	}
	snapshot := bytes.Clone(local)
	<-at.done // every piece settled, the rest of the bytes drained
	if st, err := at.status(); st != Failed || !errors.Is(err, ErrCanceled) {
		t.Fatalf("released transfer ended %s, %v; want failed, canceled", st, err)
	}
	if !bytes.Equal(local, snapshot) {
		t.Fatal("bytes landed in the local region after Release")
	}
	if bytes.Equal(local, make([]byte, n)) {
		t.Fatal("no bytes landed before Release: the test did not test anything")
	}
	if got := counter(t, a.metrics.errors, reasonCanceled); got != 1 {
		t.Fatalf("errors{reason=canceled} = %v, want 1", got)
	}
}

func TestTCPMetrics(t *testing.T) {
	a, reg := newTestAgent(t, TCPConfig{Name: "a"})
	b, _ := newTestAgent(t, TCPConfig{Name: "b", InboundWrites: true})
	remote := pattern(6, 1<<20)
	rh := mustRegister(t, b, Region{Kind: DRAM, Addr: remote})
	lh := mustRegister(t, a, Region{Kind: DRAM, Addr: make([]byte, 1<<20)})
	load(t, a, b)
	if err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: 1 << 20}}, "b", []Desc{{Region: rh, Len: 1 << 20}})); err != nil {
		t.Fatal(err)
	}
	if err := await(t, a, post(t, a, Write, []Desc{{Region: lh, Len: 300}, {Region: lh, Offset: 1000, Len: 212}}, "b", []Desc{{Region: rh, Len: 300}, {Region: rh, Offset: 5000, Len: 212}})); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, a, Region{Kind: DRAM, Addr: make([]byte, 10)}) // unrelated
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			got[key] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"kvgate_kvagent_transfer_bytes_total{direction=read}":  1 << 20,
		"kvgate_kvagent_transfer_bytes_total{direction=write}": 512,
		"kvgate_kvagent_transfers_total{result=done}":          2,
		"kvgate_kvagent_transfers_total{result=failed}":        0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	// Two agents on one registry share the counters instead of failing.
	c, err := NewTCP(TCPConfig{Name: "c", Registerer: reg})
	if err != nil {
		t.Fatalf("second agent on the same registry: %v", err)
	}
	c.Close()
}

// A region re-registered or a peer restarted: reloading metadata is
// enough, and connections are kept when the address is the same.
func TestTCPReloadMetadata(t *testing.T) {
	a, _ := newTestAgent(t, TCPConfig{Name: "a", Streams: 1})
	b, _ := newTestAgent(t, TCPConfig{Name: "b"})
	mem := pattern(7, 4096)
	local := make([]byte, 4096)
	lh := mustRegister(t, a, Region{Kind: DRAM, Addr: local})
	h1 := mustRegister(t, b, Region{Kind: DRAM, Addr: mem[:1024]})
	load(t, a, b)
	if err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: 1024}}, "b", []Desc{{Region: h1, Len: 1024}})); err != nil {
		t.Fatal(err)
	}
	h2 := mustRegister(t, b, Region{Kind: DRAM, Addr: mem[1024:]})
	if _, err := a.CreateXfer(Read, []Desc{{Region: lh, Len: 10}}, "b", []Desc{{Region: h2, Len: 10}}, nil); !errors.Is(err, ErrUnknownRegion) {
		t.Fatalf("region registered after the metadata was loaded: %v, want ErrUnknownRegion", err)
	}
	load(t, a, b)
	if err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Offset: 1024, Len: 3072}}, "b", []Desc{{Region: h2, Len: 3072}})); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local, mem) {
		t.Fatal("bytes differ")
	}
	if got := b.accepted.Load(); got != 1 {
		t.Fatalf("target accepted %d connections, want 1 (reload at the same address keeps it)", got)
	}
	// b restarts elsewhere under the same name.
	b.Close()
	b2, _ := newTestAgent(t, TCPConfig{Name: "b"})
	h := mustRegister(t, b2, Region{Kind: DRAM, Addr: pattern(8, 4096)})
	load(t, a, b2)
	if err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: 4096}}, "b", []Desc{{Region: h, Len: 4096}})); err != nil {
		t.Fatalf("read from the restarted peer: %v", err)
	}
	if !bytes.Equal(local, pattern(8, 4096)) {
		t.Fatal("bytes from the restarted peer differ")
	}
}

// A local FILE failure fails that transfer and leaves the connection in
// step for the next one.
func TestTCPLocalFileError(t *testing.T) {
	a, _ := newTestAgent(t, TCPConfig{Name: "a", Streams: 1})
	b, _ := newTestAgent(t, TCPConfig{Name: "b"})
	path := filepath.Join(t.TempDir(), "ro")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	ro, err := os.Open(path) // read-only: WriteAt fails
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	remote := pattern(9, 1<<20)
	rh := mustRegister(t, b, Region{Kind: DRAM, Addr: remote})
	fh := mustRegister(t, a, Region{Kind: FILE, File: ro, Len: 1 << 20})
	mh := mustRegister(t, a, Region{Kind: DRAM, Addr: make([]byte, 1<<20)})
	load(t, a, b)
	err = await(t, a, post(t, a, Read, []Desc{{Region: fh, Len: 1 << 20}}, "b", []Desc{{Region: rh, Len: 1 << 20}}))
	if err == nil || !strings.Contains(err.Error(), "write") {
		t.Fatalf("read into a read-only file: %v, want a write error", err)
	}
	if got := counter(t, a.metrics.errors, reasonLocalIO); got != 1 {
		t.Fatalf("errors{reason=local_io} = %v, want 1", got)
	}
	if err := await(t, a, post(t, a, Read, []Desc{{Region: mh, Len: 1 << 20}}, "b", []Desc{{Region: rh, Len: 1 << 20}})); err != nil {
		t.Fatalf("next transfer on the same connection: %v", err)
	}
	if got := b.accepted.Load(); got != 1 {
		t.Fatalf("target accepted %d connections, want 1", got)
	}
}

// A FILE region whose file is shorter than registered (truncated under
// the agent): the target has sent the first frames when ReadAt fails, and
// ends the item with READ_ERR; the initiator fails the transfer with the
// target's reason and keeps the connection.
func TestTCPRemoteFileShorterThanRegion(t *testing.T) {
	a, _ := newTestAgent(t, TCPConfig{Name: "a", Streams: 1, MaxMessageBytes: 64 << 10})
	b, _ := newTestAgent(t, TCPConfig{Name: "b"})
	path := filepath.Join(t.TempDir(), "blocks")
	if err := os.WriteFile(path, pattern(11, 200<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fh := mustRegister(t, b, Region{Kind: FILE, File: f, Len: 1 << 20}) // the file has 200 KiB
	local := make([]byte, 1<<20)
	lh := mustRegister(t, a, Region{Kind: DRAM, Addr: local})
	load(t, a, b)
	err = await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: 1 << 20}}, "b", []Desc{{Region: fh, Len: 1 << 20}}))
	var re *RemoteError
	if !errors.As(err, &re) || !strings.Contains(re.Msg, "EOF") {
		t.Fatalf("read past the file's end: %v, want a RemoteError carrying the target's EOF", err)
	}
	if !bytes.Equal(local[:192<<10], pattern(11, 200<<10)[:192<<10]) {
		t.Fatal("the frames sent before the failure did not land in order")
	}
	// Same connection, a range the file has.
	if err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: 100 << 10}}, "b", []Desc{{Region: fh, Offset: 50 << 10, Len: 100 << 10}})); err != nil {
		t.Fatalf("read inside the file: %v", err)
	}
	if !bytes.Equal(local[:100<<10], pattern(11, 200<<10)[50<<10:150<<10]) {
		t.Fatal("read inside the file: bytes differ")
	}
	if got := b.accepted.Load(); got != 1 {
		t.Fatalf("target accepted %d connections, want 1", got)
	}
}
