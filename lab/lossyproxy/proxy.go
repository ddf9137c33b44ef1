// Package lossyproxy is a TCP proxy for ZMQ PUB→SUB connections that loses
// and reorders whole messages, so tests can check that a KV-event
// subscriber detects the resulting sequence gaps and repairs them through
// the engine's replay endpoint.
//
// It speaks just enough ZMTP 3.x (rfc.zeromq.org/spec/23) to find message
// boundaries in the publisher's byte stream: a 64-byte greeting, then
// frames of [flags][size: 1 byte, or 8 bytes big-endian with the LONG
// flag][body]; a message ends at a frame without the MORE flag; command
// frames (handshake, PING) stand alone and are always forwarded. Bytes
// from the subscriber (greeting, READY, SUBSCRIBE) pass unchanged.
package lossyproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

const (
	greetingSize = 64
	flagMore     = 0x01
	flagLong     = 0x02
	flagCommand  = 0x04
	// maxFrameBytes bounds what one frame may announce: the proxy buffers
	// whole messages, and a test's KV-event batches are far smaller.
	maxFrameBytes = 64 << 20
)

// Action is what the proxy does with the n-th message (from 0) of a
// connection.
type Action int

const (
	Forward Action = iota
	// Drop loses the message.
	Drop
	// Delay holds the message and sends it after the next one.
	Delay
)

// Policy decides each message's fate; it must be safe for concurrent use
// when several connections run at once.
type Policy func(n int) Action

// Proxy accepts subscribers on Addr and connects each to the upstream
// publisher.
type Proxy struct {
	ln       net.Listener
	upstream string
	policy   Policy
	// Dropped and Delayed count messages treated so, over all connections.
	Dropped, Delayed atomic.Int64
	wg               sync.WaitGroup
	mu               sync.Mutex
	conns            map[net.Conn]struct{}
	closed           bool
}

// Start listens on listen (host:port, "127.0.0.1:0" for any port) and
// proxies to upstream (host:port of the publisher).
func Start(listen, upstream string, policy Policy) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("lossyproxy: listen %s: %w", listen, err)
	}
	p := &Proxy{ln: ln, upstream: upstream, policy: policy, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, cuts every connection and waits for the pumps.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			down.Close() // the subscriber sees a refused publisher, as without the proxy
			continue
		}
		if !p.track(down) || !p.track(up) {
			down.Close()
			up.Close()
			continue
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			io.Copy(up, down)
			up.Close()
			down.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.pumpMessages(down, up)
			up.Close()
			down.Close()
		}()
	}
}

// pumpMessages copies the publisher's stream to the subscriber message by
// message, applying the policy.
func (p *Proxy) pumpMessages(dst io.Writer, src io.Reader) error {
	r := bufio.NewReaderSize(src, 64<<10)
	greeting := make([]byte, greetingSize)
	if _, err := io.ReadFull(r, greeting); err != nil {
		return err
	}
	if _, err := dst.Write(greeting); err != nil {
		return err
	}
	var msg, held []byte
	n := 0
	for {
		frame, flags, err := readFrame(r)
		if err != nil {
			return err
		}
		if flags&flagCommand != 0 {
			if _, err := dst.Write(frame); err != nil {
				return err
			}
			continue
		}
		msg = append(msg, frame...)
		if flags&flagMore != 0 {
			continue
		}
		action := p.policy(n)
		n++
		out := msg
		msg = nil
		switch {
		case action == Drop:
			p.Dropped.Add(1)
			continue
		case action == Delay && held == nil:
			p.Delayed.Add(1)
			held = out
			continue
		}
		if _, err := dst.Write(out); err != nil {
			return err
		}
		if held != nil {
			if _, err := dst.Write(held); err != nil {
				return err
			}
			held = nil
		}
	}
}

// readFrame reads one whole ZMTP frame, header included.
func readFrame(r *bufio.Reader) ([]byte, byte, error) {
	flags, err := r.ReadByte()
	if err != nil {
		return nil, 0, err
	}
	if flags&^(flagMore|flagLong|flagCommand) != 0 {
		return nil, 0, fmt.Errorf("lossyproxy: frame flags 0x%02x: reserved bits set", flags)
	}
	hdr := []byte{flags}
	var size uint64
	if flags&flagLong != 0 {
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, 0, err
		}
		hdr = append(hdr, b[:]...)
		size = binary.BigEndian.Uint64(b[:])
	} else {
		b, err := r.ReadByte()
		if err != nil {
			return nil, 0, err
		}
		hdr = append(hdr, b)
		size = uint64(b)
	}
	if size > maxFrameBytes {
		return nil, 0, errors.New("lossyproxy: frame larger than 64 MiB")
	}
	frame := make([]byte, len(hdr)+int(size))
	copy(frame, hdr)
	if _, err := io.ReadFull(r, frame[len(hdr):]); err != nil {
		return nil, 0, err
	}
	return frame, flags, nil
}
