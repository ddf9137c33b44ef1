package transfer

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// peer is a remote agent whose metadata is loaded, with the connections
// (streams) this agent opened to it.
type peer struct {
	agent      *tcpEndpoint
	name       string
	addr       string
	maxPayload int                     // guarded by agent.mu
	regions    map[uint32]remoteRegion // guarded by agent.mu

	mu      sync.Mutex
	closed  error
	streams []*stream
	next    int   // rotates the first stream of each striping
	offer   uint8 // the protocol version new connections offer
}

// dispatch spreads items over the peer's streams, each to the stream with
// the fewest bytes so far; the first stream rotates so that many small
// concurrent requests use every connection.
func (p *peer) dispatch(id uint64, items []*item) {
	n := len(p.streams)
	if items[0].kind == itemNotif {
		// Notifications ride stream 0 of their peer; ordering among them
		// is kept.
		n = 1
	}
	groups := make([][]*item, n)
	load := make([]int64, n)
	p.mu.Lock()
	start := p.next
	p.next = (p.next + 1) % len(p.streams)
	p.mu.Unlock()
	for _, it := range items {
		best := start % n
		for k := 1; k < n; k++ {
			if s := (start + k) % n; load[s] < load[best] {
				best = s
			}
		}
		groups[best] = append(groups[best], it)
		load[best] += max(it.n, 1)
	}
	for i, g := range groups {
		if len(g) == 0 {
			continue
		}
		s, err := p.stream(i)
		if err != nil {
			for _, it := range g {
				it.at.settle(err)
			}
			continue
		}
		s.enqueue(g)
	}
}

// stream returns stream i, opening a new connection in place of a dead one.
func (p *peer) stream(i int) (*stream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed != nil {
		return nil, fmt.Errorf("kvagent/transfer: peer %q: %w", p.name, p.closed)
	}
	if s := p.streams[i]; s != nil && !s.dead() {
		return s, nil
	}
	s := &stream{agent: p.agent, peer: p, idx: i}
	s.cond.L = &s.mu
	p.streams[i] = s
	p.agent.wg.Add(1)
	go s.run()
	return s, nil
}

// forget drops s from its slot after it died.
func (p *peer) forget(s *stream) {
	p.mu.Lock()
	if p.streams[s.idx] == s {
		p.streams[s.idx] = nil
	}
	p.mu.Unlock()
}

// shutdown closes every stream; requests on them fail with err.
func (p *peer) shutdown(err error) {
	p.mu.Lock()
	if p.closed == nil {
		p.closed = err
	}
	streams := append([]*stream(nil), p.streams...)
	p.mu.Unlock()
	for _, s := range streams {
		if s != nil {
			s.die(err)
		}
	}
}

type itemKind uint8

const (
	itemRead itemKind = iota + 1
	itemWrite
	itemNotif
)

// item is one piece of a request on one stream: a descriptor, or a stripe
// of a long one, or the notification. It settles exactly once, by whoever
// takes it off the stream's queue or expect list under the stream's lock.
type item struct {
	at     *attempt
	kind   itemKind
	desc   uint32
	region uint32 // remote region
	roff   int64  // offset in the remote region
	local  *region
	loff   int64 // offset in the local region
	n      int64
	grant  Grant // a read's capability, sent with its READ_REQ
	got    int64 // read bytes received (reader goroutine only)
	// localErr: the local side failed (FILE I/O) while the connection
	// stayed usable; reported when the item settles.
	localErr error
}

// stream is one connection to a peer: a writer goroutine sends queued
// items, a reader goroutine matches the answers, which the target sends in
// request order, against the expect list.
type stream struct {
	agent *tcpEndpoint
	peer  *peer
	idx   int

	mu      sync.Mutex
	cond    sync.Cond
	queue   []*item // to send
	expect  []*item // sent, awaiting answers, in order
	err     error   // set once: the stream is dead
	conn    net.Conn
	sendMax int   // the peer's max payload, from its hello
	version uint8 // the protocol version agreed at the hellos
}

func (s *stream) dead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

func (s *stream) enqueue(items []*item) {
	s.mu.Lock()
	if err := s.err; err != nil {
		s.mu.Unlock()
		for _, it := range items {
			it.at.settle(err)
		}
		return
	}
	s.queue = append(s.queue, items...)
	s.cond.Signal()
	s.mu.Unlock()
}

// die ends the stream once: the connection closes and every item queued
// or outstanding on it fails with err.
func (s *stream) die(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	err = fmt.Errorf("kvagent/transfer: peer %q (%s) stream %d: %w", s.peer.name, s.peer.addr, s.idx, err)
	s.err = err
	items := make([]*item, 0, len(s.queue)+len(s.expect))
	items = append(append(items, s.expect...), s.queue...)
	s.queue, s.expect = nil, nil
	conn := s.conn
	s.cond.Broadcast()
	s.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
	s.peer.forget(s)
	if len(items) > 0 {
		s.agent.log.Debug("transfer stream failed", "peer", s.peer.name, "stream", s.idx, "pending", len(items), "err", err)
	}
	for _, it := range items {
		it.at.settle(err)
	}
}

func (s *stream) run() {
	defer s.agent.wg.Done()
	conn, fr, fw, sendMax, err := s.agent.dial(s.peer)
	if err != nil {
		s.die(err)
		return
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		conn.Close()
		return
	}
	s.conn, s.sendMax, s.version = conn, sendMax, fr.version
	s.mu.Unlock()
	s.agent.wg.Add(1)
	go s.readLoop(conn, fr)
	s.writeLoop(conn, fw)
}

func (s *stream) writeLoop(conn net.Conn, fw *frameWriter) {
	timeout := s.agent.cfg.IOTimeout
	var bounce []byte
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && s.err == nil {
			if fw.buffered() > 0 {
				s.mu.Unlock()
				conn.SetWriteDeadline(time.Now().Add(timeout))
				if err := fw.flush(); err != nil {
					s.die(err)
					return
				}
				s.mu.Lock()
				continue
			}
			s.cond.Wait()
		}
		if s.err != nil {
			s.mu.Unlock()
			return
		}
		it := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		if it.kind != itemNotif && it.at.abandoned() {
			s.mu.Unlock()
			it.at.settle(nil)
			continue
		}
		s.expect = append(s.expect, it)
		if len(s.expect) == 1 {
			conn.SetReadDeadline(time.Now().Add(timeout))
		}
		s.mu.Unlock()
		var err error
		switch it.kind {
		case itemRead:
			conn.SetWriteDeadline(time.Now().Add(timeout))
			err = fw.write(frameHeader{typ: frameReadReq, xfer: it.at.id, desc: it.desc, region: it.region, offset: uint64(it.roff)}, readRequest{n: uint64(it.n), grant: it.grant}.encode())
		case itemWrite:
			bounce, err = s.sendWrite(conn, fw, it, bounce)
		case itemNotif:
			conn.SetWriteDeadline(time.Now().Add(timeout))
			err = fw.write(frameHeader{typ: frameNotif, xfer: it.at.id}, it.at.notif)
		}
		if err != nil {
			s.die(err)
			return
		}
	}
}

// sendWrite sends one write item as WRITE_DATA frames and a FLUSH, whose
// acknowledgement settles it. A local read failure still ends with the
// FLUSH, so the connection stays in step.
func (s *stream) sendWrite(conn net.Conn, fw *frameWriter, it *item, bounce []byte) ([]byte, error) {
	timeout := s.agent.cfg.IOTimeout
	chunk := int64(s.sendMax)
	for off := int64(0); off < it.n; off += chunk {
		if it.at.isCanceled() {
			break
		}
		c := min(chunk, it.n-off)
		var payload []byte
		if it.local.kind == DRAM {
			payload = it.local.mem[it.loff+off : it.loff+off+c]
		} else {
			if len(bounce) < int(c) {
				bounce = alignedBuffer(int(chunk))
			}
			payload = bounce[:c]
			if err := it.local.readAt(payload, it.loff+off); err != nil {
				// Set under the stream lock: the reader goroutine reads it
				// when the acknowledgement arrives, and the only order
				// between the two is the network's, which Go's memory
				// model does not see.
				s.mu.Lock()
				it.localErr = withReason(reasonLocalIO, err)
				s.mu.Unlock()
				break
			}
		}
		conn.SetWriteDeadline(time.Now().Add(timeout))
		if err := fw.write(frameHeader{typ: frameWriteData, xfer: it.at.id, desc: it.desc, region: it.region, offset: uint64(it.roff + off)}, payload); err != nil {
			return bounce, err
		}
	}
	conn.SetWriteDeadline(time.Now().Add(timeout))
	return bounce, fw.write(frameHeader{typ: frameFlush, xfer: it.at.id, desc: it.desc}, nil)
}

func (at *attempt) isCanceled() bool {
	at.landing.RLock()
	defer at.landing.RUnlock()
	return at.canceled
}

func (s *stream) readLoop(conn net.Conn, fr *frameReader) {
	defer s.agent.wg.Done()
	timeout := s.agent.cfg.IOTimeout
	var bounce []byte
	for {
		h, err := fr.next()
		if err != nil {
			s.die(err)
			return
		}
		s.mu.Lock()
		var it *item
		if len(s.expect) > 0 {
			it = s.expect[0]
		}
		s.mu.Unlock()
		if h.typ == frameError {
			msg, err := fr.payload(h)
			if err == nil {
				err = withReason(reasonRemote, &RemoteError{Agent: s.peer.name, Msg: string(msg)})
			}
			s.die(err)
			return
		}
		if it == nil || h.xfer != it.at.id || h.desc != it.desc {
			s.die(withReason(reasonProtocol, fmt.Errorf("unexpected %s frame (transfer %d, descriptor %d)", h.typ, h.xfer, h.desc)))
			return
		}
		var settle, fail error
		done := false
		switch {
		case h.typ == frameData && it.kind == itemRead:
			if h.region != it.region || h.offset != uint64(it.roff+it.got) || h.n == 0 || int64(h.n) > it.n-it.got {
				s.die(withReason(reasonProtocol, fmt.Errorf("DATA frame for region %d [%d, +%d), expected region %d at %d with %d bytes left", h.region, h.offset, h.n, it.region, it.roff+it.got, it.n-it.got)))
				return
			}
			if bounce, fail = s.land(fr, h, it, bounce); fail != nil {
				s.die(fail)
				return
			}
			it.got += int64(h.n)
			done = it.got == it.n
			settle = it.localErr
		case h.typ == frameReadErr && it.kind == itemRead,
			h.typ == frameWriteAck && it.kind == itemWrite,
			h.typ == frameNotifAck && it.kind == itemNotif:
			msg, err := fr.payload(h)
			if err != nil {
				s.die(err)
				return
			}
			done = true
			if h.typ == frameReadErr || h.flags&flagError != 0 {
				settle = withReason(reasonRemote, &RemoteError{Agent: s.peer.name, Msg: string(msg)})
			}
		default:
			s.die(withReason(reasonProtocol, fmt.Errorf("unexpected %s frame for a %s item", h.typ, [...]string{"", "read", "write", "notification"}[it.kind])))
			return
		}
		s.mu.Lock()
		if done {
			if settle == nil {
				settle = it.localErr
			}
			if s.err != nil {
				// die already settled it (and everything else).
				s.mu.Unlock()
				return
			}
			s.expect[0] = nil
			s.expect = s.expect[1:]
		}
		if len(s.expect) > 0 {
			conn.SetReadDeadline(time.Now().Add(timeout))
		} else {
			conn.SetReadDeadline(time.Time{})
		}
		s.mu.Unlock()
		if done {
			if settle == nil && it.kind == itemWrite {
				s.agent.metrics.moved(Write, it.n)
			}
			it.at.settle(settle)
		}
	}
}

// land copies a DATA payload into the item's local region: straight from
// the socket into DRAM, through an aligned buffer into a FILE. A canceled
// request's bytes are read and dropped.
func (s *stream) land(fr *frameReader, h frameHeader, it *item, bounce []byte) ([]byte, error) {
	at := it.at
	at.landing.RLock()
	defer at.landing.RUnlock()
	if at.canceled {
		return bounce, fr.discard(h)
	}
	off := it.loff + it.got
	if it.local.kind == DRAM {
		if err := fr.payloadInto(it.local.mem[off : off+int64(h.n)]); err != nil {
			return bounce, err
		}
		s.agent.metrics.moved(Read, int64(h.n))
		return bounce, nil
	}
	if len(bounce) < h.n {
		bounce = alignedBuffer(max(h.n, s.agent.cfg.MaxMessageBytes))
	}
	if err := fr.payloadInto(bounce[:h.n]); err != nil {
		return bounce, err
	}
	if it.localErr == nil {
		if err := it.local.writeAt(bounce[:h.n], off); err != nil {
			it.localErr = withReason(reasonLocalIO, err)
			return bounce, nil
		}
		s.agent.metrics.moved(Read, int64(h.n))
	}
	return bounce, nil
}

// alignedBuffer returns n bytes starting on a 4 KiB boundary, so FILE
// regions opened with O_DIRECT can use it.
func alignedBuffer(n int) []byte {
	const align = 4096
	b := make([]byte, n+align)
	skip := 0
	if r := int(uintptrOf(b) % align); r != 0 {
		skip = align - r
	}
	return b[skip : skip+n : skip+n]
}

// dial connects to p, runs TLS when configured, and exchanges hellos. It
// returns the peer's max payload. A peer that refuses the version offered
// (a version-2 agent refuses any other) is dialed again offering
// minProtocolVersion, and offered that from then on.
func (a *tcpEndpoint) dial(p *peer) (net.Conn, *frameReader, *frameWriter, int, error) {
	p.mu.Lock()
	offer := p.offer
	p.mu.Unlock()
	conn, fr, fw, sendMax, err := a.dialOffering(p, offer)
	var re *RemoteError
	if err != nil && offer > minProtocolVersion && errors.As(err, &re) && strings.Contains(re.Msg, "protocol version") {
		a.log.Info("transfer peer speaks an older protocol; falling back", "peer", p.name, "offered", offer, "now", minProtocolVersion, "refusal", re.Msg)
		p.mu.Lock()
		p.offer = minProtocolVersion
		p.mu.Unlock()
		return a.dialOffering(p, minProtocolVersion)
	}
	return conn, fr, fw, sendMax, err
}

func (a *tcpEndpoint) dialOffering(p *peer, offer uint8) (net.Conn, *frameReader, *frameWriter, int, error) {
	deadline := time.Now().Add(a.cfg.DialTimeout)
	d := net.Dialer{Deadline: deadline, KeepAlive: 15 * time.Second}
	raw, err := d.DialContext(a.ctx, "tcp", p.addr)
	if err != nil {
		if a.ctx.Err() != nil {
			return nil, nil, nil, 0, ErrClosed
		}
		return nil, nil, nil, 0, withReason(reasonConnect, fmt.Errorf("dial: %w", err))
	}
	conn := raw
	raw.SetDeadline(deadline)
	if a.clientTLS != nil {
		cfg := a.clientTLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(p.addr)
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(a.ctx); err != nil {
			raw.Close()
			return nil, nil, nil, 0, withReason(reasonTLS, fmt.Errorf("TLS handshake: %w", err))
		}
		conn = tc
	}
	fw := newFrameWriter(conn)
	fr := newFrameReader(bufio.NewReaderSize(conn, readBufferBytes), a.cfg.MaxMessageBytes)
	err = fw.write(frameHeader{typ: frameHello}, hello{version: offer, maxPayload: uint32(a.cfg.MaxMessageBytes), name: a.cfg.Name}.encode())
	if err == nil {
		err = fw.flush()
	}
	var f frame
	if err == nil {
		f, err = readFrameFrom(fr)
	}
	if err == nil && f.typ == frameError {
		err = withReason(reasonHandshake, &RemoteError{Agent: p.name, Msg: string(f.payload)})
	} else if err == nil && f.typ != frameHelloAck {
		err = withReason(reasonProtocol, fmt.Errorf("%s frame in answer to HELLO", f.typ))
	}
	var h hello
	if err == nil {
		// The target answers with a version of those offered.
		h, err = decodeHello(f.payload, minProtocolVersion, offer)
	}
	if err == nil && h.name != p.name {
		err = withReason(reasonHandshake, fmt.Errorf("agent %q answered at %s, expected %q (stale metadata?)", h.name, p.addr, p.name))
	}
	if err != nil {
		conn.Close()
		// With TLS 1.3 the target checks our certificate after the
		// client's half of the handshake, so its refusal arrives as an
		// alert on the first read.
		if isTLSAlert(err) {
			err = withReason(reasonTLS, err)
		}
		return nil, nil, nil, 0, fmt.Errorf("handshake: %w", err)
	}
	conn.SetDeadline(time.Time{})
	fr.useVersion(h.version, a.clientTLS != nil)
	fw.useVersion(h.version, a.clientTLS != nil)
	a.metrics.connected("initiator", h.version)
	return conn, fr, fw, int(h.maxPayload), nil
}

func readFrameFrom(fr *frameReader) (frame, error) {
	h, err := fr.next()
	if err != nil {
		return frame{}, err
	}
	p, err := fr.payload(h)
	return frame{h, p}, err
}
