package transfer

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"time"
)

// maxWriteErrors bounds the per-connection record of failed write items
// awaiting their FLUSH; a peer that never flushes cannot grow it.
const maxWriteErrors = 4096

// answerDelay bounds how long small answers (acks) may sit in the write
// buffer while more input keeps arriving.
const answerDelay = 2 * time.Millisecond

func (a *tcpEndpoint) acceptLoop() {
	defer a.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		conn, err := a.ln.Accept()
		if err != nil {
			if a.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait, do not spin.
			a.log.Warn("transfer listener: accept failed", "err", err)
			select {
			case <-time.After(backoff):
			case <-a.ctx.Done():
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		a.srvMu.Lock()
		if a.srvConns == nil {
			a.srvMu.Unlock()
			conn.Close()
			return
		}
		a.srvConns[conn] = struct{}{}
		a.srvMu.Unlock()
		a.accepted.Add(1)
		a.wg.Add(1)
		go a.serve(conn)
	}
}

// serverConn is the target side of one connection from a peer.
type serverConn struct {
	a        *tcpEndpoint
	conn     net.Conn
	fr       *frameReader
	fw       *frameWriter
	br       *bufio.Reader
	peerName string
	peerCert *x509.Certificate // verified client certificate (TLS only)
	sendMax  int               // the peer's max payload
	bounce   []byte
	// failed write items (transfer, descriptor) → reason, answered at FLUSH.
	writeErrs map[[2]uint64]string
}

func (a *tcpEndpoint) serve(raw net.Conn) {
	defer a.wg.Done()
	defer func() {
		raw.Close()
		a.srvMu.Lock()
		if a.srvConns != nil {
			delete(a.srvConns, raw)
		}
		a.srvMu.Unlock()
	}()
	conn := raw
	raw.SetDeadline(time.Now().Add(a.cfg.DialTimeout))
	var peerCert *x509.Certificate
	if a.serverTLS != nil {
		tc := tls.Server(raw, a.serverTLS)
		if err := tc.HandshakeContext(a.ctx); err != nil {
			if a.ctx.Err() == nil {
				a.metrics.rejected()
				a.log.Warn("transfer listener: TLS handshake refused", "remote", raw.RemoteAddr(), "err", err)
			}
			return
		}
		conn = tc
		if pc := tc.ConnectionState().PeerCertificates; len(pc) > 0 {
			peerCert = pc[0]
		}
	} else if !isLoopbackAddr(raw.RemoteAddr()) {
		// Plaintext is for peers on this host only (TCPConfig.TLS).
		a.metrics.rejected()
		a.log.Warn("transfer listener: plaintext connection from a non-loopback address refused (configure TLS)", "remote", raw.RemoteAddr())
		return
	}
	br := bufio.NewReaderSize(conn, readBufferBytes)
	sc := &serverConn{a: a, conn: conn, br: br, peerCert: peerCert, fr: newFrameReader(br, a.cfg.MaxMessageBytes), fw: newFrameWriter(conn), writeErrs: map[[2]uint64]string{}}
	f, err := readFrameFrom(sc.fr)
	if err != nil {
		a.log.Debug("transfer listener: no hello", "remote", raw.RemoteAddr(), "err", err)
		return
	}
	var h hello
	if f.typ != frameHello {
		err = fmt.Errorf("%s frame before HELLO", f.typ)
	} else {
		h, err = decodeHello(f.payload, minProtocolVersion, a.cfg.version())
	}
	if err != nil {
		a.metrics.rejected()
		sc.fatal(err)
		return
	}
	sc.peerName, sc.sendMax = h.name, int(h.maxPayload)
	// The newest version both speak; every frame after the hellos uses it.
	version := min(h.version, a.cfg.version())
	sc.fw.write(frameHeader{typ: frameHelloAck}, hello{version: version, maxPayload: uint32(a.cfg.MaxMessageBytes), name: a.cfg.Name}.encode())
	if err := sc.fw.flush(); err != nil {
		return
	}
	sc.fr.useVersion(version, a.serverTLS != nil)
	sc.fw.useVersion(version, a.serverTLS != nil)
	a.metrics.connected("target", version)
	conn.SetDeadline(time.Time{})
	// Frames queued for a vectored write hold pins (ReadAccess) until
	// sent; a connection that ends lets them go.
	defer sc.fw.dropQueued()
	var unflushedSince time.Time
	for {
		// Idle between frames is fine; a frame started must finish.
		h, err := sc.fr.next()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && a.ctx.Err() == nil {
				var re *reasonError
				if errors.As(err, &re) {
					a.metrics.rejected()
					sc.fatal(err)
				}
				a.log.Debug("transfer listener: connection ended", "peer", sc.peerName, "err", err)
			}
			return
		}
		conn.SetReadDeadline(time.Now().Add(a.cfg.IOTimeout))
		if err := sc.handle(h); err != nil {
			var re *reasonError
			if errors.As(err, &re) && (re.reason == reasonProtocol || re.reason == reasonChecksum) {
				a.metrics.rejected()
				sc.fatal(err)
			}
			a.log.Debug("transfer listener: connection failed", "peer", sc.peerName, "err", err)
			return
		}
		conn.SetReadDeadline(time.Time{})
		// Answers go out when no whole request is waiting to be read,
		// so a burst of requests gets one write (a vectored one for
		// their DATA frames), and never wait longer than answerDelay
		// behind a steady stream of input.
		if sc.fw.buffered() > 0 {
			now := time.Now()
			if unflushedSince.IsZero() {
				unflushedSince = now
			}
			if br.Buffered() < frameHeadLen+readRequestLen || now.Sub(unflushedSince) > answerDelay {
				conn.SetWriteDeadline(now.Add(a.cfg.IOTimeout))
				if err := sc.fw.flush(); err != nil {
					return
				}
				unflushedSince = time.Time{}
			}
		}
	}
}

// fatal tells the peer why its connection ends (best effort).
func (sc *serverConn) fatal(err error) {
	sc.conn.SetWriteDeadline(time.Now().Add(time.Second))
	msg := err.Error()
	if len(msg) > minMessageBytes {
		msg = msg[:minMessageBytes]
	}
	if sc.fw.write(frameHeader{typ: frameError}, []byte(msg)) == nil {
		sc.fw.flush()
	}
}

// reason cuts an error message to what the peer accepts.
func (sc *serverConn) reason(err error) []byte {
	msg := err.Error()
	if len(msg) > sc.sendMax {
		msg = msg[:sc.sendMax]
	}
	return []byte(msg)
}

// resolve finds the region a peer's frame names and checks the range.
func (sc *serverConn) resolve(handle uint32, off uint64, n int64) (*region, error) {
	r := sc.a.region(handle)
	if r == nil {
		return nil, fmt.Errorf("%w %d", ErrUnknownRegion, handle)
	}
	if off > math.MaxInt64 {
		return nil, fmt.Errorf("region %d: %w: offset %d", handle, ErrOutOfBounds, off)
	}
	if err := checkRange(r.length, int64(off), n); err != nil {
		return nil, fmt.Errorf("region %d: %w", handle, err)
	}
	return r, nil
}

func (sc *serverConn) handle(h frameHeader) error {
	a := sc.a
	switch h.typ {
	case frameReadReq:
		p, err := sc.fr.payload(h)
		if err != nil {
			return err
		}
		rr, err := decodeReadRequest(p)
		if err != nil {
			return err
		}
		n := min(rr.n, math.MaxInt64)
		r, err := sc.resolve(h.region, h.offset, int64(n))
		var release func()
		if err == nil && a.cfg.ReadAccess != nil {
			// After the bounds check, so ReadAccess sees only ranges
			// inside the region.
			release, err = a.cfg.ReadAccess(ReadRequest{PeerName: sc.peerName, PeerCert: sc.peerCert, Region: h.region, Offset: int64(h.offset), Len: int64(n), Grant: rr.grant})
			if err != nil {
				err = fmt.Errorf("region %d [%d, +%d): %w: %w", h.region, h.offset, n, ErrNotPermitted, err)
			}
		}
		if err != nil {
			a.metrics.rejected()
			return sc.fw.write(frameHeader{typ: frameReadErr, xfer: h.xfer, desc: h.desc, region: h.region, offset: h.offset}, sc.reason(err))
		}
		return sc.serveRead(h, r, int64(n), release)
	case frameWriteData:
		key := [2]uint64{h.xfer, uint64(h.desc)}
		if _, failed := sc.writeErrs[key]; failed {
			return sc.fr.discard(h)
		}
		r, err := sc.resolve(h.region, h.offset, int64(h.n))
		if err == nil && !a.cfg.InboundWrites {
			err = ErrInboundWrite
		}
		if err != nil {
			a.metrics.rejected()
			if err := sc.recordWriteErr(key, err); err != nil {
				return err
			}
			return sc.fr.discard(h)
		}
		off := int64(h.offset)
		if r.kind == DRAM {
			// Straight from the socket into the region; a checksum
			// failure ends the connection and the initiator's transfer
			// fails, leaving these bytes undefined, as with any failed
			// write.
			return sc.fr.payloadInto(r.mem[off : off+int64(h.n)])
		}
		if len(sc.bounce) < h.n {
			sc.bounce = alignedBuffer(a.cfg.MaxMessageBytes)
		}
		if err := sc.fr.payloadInto(sc.bounce[:h.n]); err != nil {
			return err
		}
		if err := r.writeAt(sc.bounce[:h.n], off); err != nil {
			return sc.recordWriteErr(key, err)
		}
		return nil
	case frameFlush:
		if err := sc.fr.discard(h); err != nil {
			return err
		}
		key := [2]uint64{h.xfer, uint64(h.desc)}
		ack := frameHeader{typ: frameWriteAck, xfer: h.xfer, desc: h.desc}
		if msg, failed := sc.writeErrs[key]; failed {
			delete(sc.writeErrs, key)
			ack.flags = flagError
			return sc.fw.write(ack, []byte(msg))
		}
		return sc.fw.write(ack, nil)
	case frameNotif:
		msg, err := sc.fr.payload(h)
		if err != nil {
			return err
		}
		ack := frameHeader{typ: frameNotifAck, xfer: h.xfer}
		err = ErrInboundNotif
		if a.cfg.InboundNotifs {
			err = a.queueNotif(sc.peerName, msg)
		}
		if err != nil {
			a.metrics.rejected()
			ack.flags = flagError
			return sc.fw.write(ack, sc.reason(err))
		}
		return sc.fw.write(ack, nil)
	case frameError:
		msg, err := sc.fr.payload(h)
		if err != nil {
			return err
		}
		return fmt.Errorf("peer reported: %s", msg)
	}
	return withReason(reasonProtocol, fmt.Errorf("unexpected %s frame from an initiator", h.typ))
}

func (sc *serverConn) recordWriteErr(key [2]uint64, err error) error {
	if len(sc.writeErrs) >= maxWriteErrors {
		return withReason(reasonProtocol, fmt.Errorf("%d failed write items never flushed", len(sc.writeErrs)))
	}
	sc.writeErrs[key] = string(sc.reason(err))
	return nil
}

// serveRead answers a READ_REQ with DATA frames, in order; a FILE read
// failure midway ends the item with READ_ERR. A DRAM region's frames are
// queued (sent with the next ones in one vectored write); release, when
// not nil, runs once they have left.
func (sc *serverConn) serveRead(h frameHeader, r *region, n int64, release func()) error {
	chunk := int64(sc.sendMax)
	if r.kind == DRAM {
		for off := int64(0); off < n; off += chunk {
			c := min(chunk, n-off)
			at := int64(h.offset) + off
			var sent func()
			if off+c == n {
				sent, release = release, nil
			}
			sc.conn.SetWriteDeadline(time.Now().Add(sc.a.cfg.IOTimeout))
			if err := sc.fw.queue(frameHeader{typ: frameData, xfer: h.xfer, desc: h.desc, region: h.region, offset: uint64(at)}, r.mem[at:at+c], sent); err != nil {
				if release != nil { // not handed to the queue yet
					release()
				}
				return err
			}
		}
		if release != nil { // n == 0
			release()
		}
		return nil
	}
	if release != nil {
		defer release()
	}
	for off := int64(0); off < n; off += chunk {
		c := min(chunk, n-off)
		at := int64(h.offset) + off
		if len(sc.bounce) < int(c) {
			sc.bounce = alignedBuffer(int(chunk))
		}
		payload := sc.bounce[:c]
		if err := r.readAt(payload, at); err != nil {
			return sc.fw.write(frameHeader{typ: frameReadErr, xfer: h.xfer, desc: h.desc, region: h.region, offset: uint64(at)}, sc.reason(err))
		}
		sc.conn.SetWriteDeadline(time.Now().Add(sc.a.cfg.IOTimeout))
		if err := sc.fw.write(frameHeader{typ: frameData, xfer: h.xfer, desc: h.desc, region: h.region, offset: uint64(at)}, payload); err != nil {
			return err
		}
	}
	return nil
}

// isLoopbackAddr reports whether a connection's remote address is a
// loopback IP (127.0.0.0/8, ::1).
func isLoopbackAddr(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}
