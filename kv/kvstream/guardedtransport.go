package kvstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// zmq4 v0.17.0 has no ZMQ_MAXMSGSIZE: conn.go allocates make([]byte, size)
// straight from a frame header, so one peer announcing a 2^50-byte frame
// would take the process down. It also runs the ZMTP handshake on a dialed
// connection with no deadline, so a peer that accepts and stays silent
// hangs Dial. Dialing through these transports wraps each connection in a
// frameLimitConn that parses the incoming ZMTP byte stream and cuts the
// connection before zmq4 sees an oversize header, and bounds the handshake.
const (
	guardedTCP = "kvstream-tcp"
	guardedIPC = "kvstream-ipc"
)

// ZMTP 3.x framing (rfc.zeromq.org/spec/23): a 64-byte greeting, then
// frames of [flags][size: 1 byte, or 8 bytes big-endian if LONG][body].
const (
	zmtpGreetingSize = 64
	zmtpFlagMore     = 0x01
	zmtpFlagLong     = 0x02
	zmtpFlagCommand  = 0x04
	zmtpFlagReserved = 0xF8
	// minGuardFrameBytes keeps handshake commands (READY and its metadata)
	// through even when MaxPayloadBytes is configured very small.
	minGuardFrameBytes = 64 << 10
	// maxGuardFramesPerMessage leaves room for messages with a wrong but
	// small frame count to reach parseLive (which counts and drops them)
	// while bounding what one message can allocate.
	maxGuardFramesPerMessage = 16
)

var registerGuardedTransports = sync.OnceValue(func() error {
	if err := zmq4.RegisterTransport(guardedTCP, guardedTransport{network: "tcp", inner: transport.New("tcp")}); err != nil {
		return fmt.Errorf("register %s transport: %w", guardedTCP, err)
	}
	if err := zmq4.RegisterTransport(guardedIPC, guardedTransport{network: "unix", inner: transport.New("unix")}); err != nil {
		return fmt.Errorf("register %s transport: %w", guardedIPC, err)
	}
	return nil
})

// guardLimits travels to the transport in the socket's context (zmq4 hands
// the socket context to Transport.Dial), so each Subscriber sets its own.
type guardLimits struct {
	maxFrameBytes    uint64
	handshakeTimeout time.Duration
	onViolation      func(error)
	maxFramesPerMsg  int
	// allow lists the peers a listening socket accepts besides loopback
	// (bind mode); onReject is told of every other one, which is closed.
	allow    []netip.Prefix
	onReject func(peer net.Addr)
}

type guardLimitsKey struct{}

func withGuardLimits(ctx context.Context, l guardLimits) context.Context {
	return context.WithValue(ctx, guardLimitsKey{}, l)
}

type guardedTransport struct {
	network string
	inner   transport.Transport
}

func (t guardedTransport) Dial(ctx context.Context, dialer transport.Dialer, addr string) (net.Conn, error) {
	limits, ok := ctx.Value(guardLimitsKey{}).(guardLimits)
	if !ok {
		return nil, errors.New("kvstream: guarded transport dialed without limits in the socket context")
	}
	conn, err := dialer.DialContext(ctx, t.network, addr)
	if err != nil {
		return nil, err
	}
	// zmq4 reads the handshake without a deadline or context; both the
	// deadline and closing on socket shutdown keep Dial from hanging.
	if err := conn.SetDeadline(time.Now().Add(limits.handshakeTimeout)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("set handshake deadline: %w", err)
	}
	context.AfterFunc(ctx, func() { conn.Close() })
	return newFrameLimitConn(conn, limits), nil
}

// Listen serves bind mode (Listener): every accepted connection gets the
// same frame guard and handshake deadline as a dialed one, and a TCP peer
// that is neither loopback nor in the allow list is closed before zmq4
// reads a byte from it — the socket feeds routing state, so it must not
// take events from anyone who can reach the port.
func (t guardedTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	limits, ok := ctx.Value(guardLimitsKey{}).(guardLimits)
	if !ok {
		return nil, errors.New("kvstream: guarded transport listening without limits in the socket context")
	}
	ln, err := net.Listen(t.network, addr)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() { ln.Close() })
	return &guardedListener{Listener: ln, limits: limits, tcp: t.network == "tcp"}, nil
}

type guardedListener struct {
	net.Listener
	limits guardLimits
	tcp    bool
}

func (l *guardedListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				// zmq4's accept loop retries on errors until its context
				// ends; a pause keeps a closed listener from spinning it.
				time.Sleep(10 * time.Millisecond)
			}
			return nil, err
		}
		if l.tcp && !peerAllowed(conn.RemoteAddr(), l.limits.allow) {
			if l.limits.onReject != nil {
				l.limits.onReject(conn.RemoteAddr())
			}
			conn.Close()
			continue
		}
		if err := conn.SetDeadline(time.Now().Add(l.limits.handshakeTimeout)); err != nil {
			conn.Close()
			continue
		}
		return newFrameLimitConn(conn, l.limits), nil
	}
}

func peerAllowed(a net.Addr, allow []netip.Prefix) bool {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	if ip.IsLoopback() {
		return true
	}
	for _, p := range allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func (t guardedTransport) Addr(ep string) (string, error) { return t.inner.Addr(ep) }

// errFrameLimit is returned by frameLimitConn.Read when the peer breaks
// the framing or announces more than the limits allow.
var errFrameLimit = errors.New("zmtp frame limit exceeded")

// frameLimitConn parses the incoming ZMTP stream as zmq4 reads it.
type frameLimitConn struct {
	net.Conn
	limits guardLimits

	greetingLeft  int
	header        [9]byte
	headerHave    int
	headerNeed    int
	bodyLeft      uint64
	inFrame       bool // header complete, body pending
	framesInMsg   int
	handshakeDone bool
	err           error
}

func newFrameLimitConn(c net.Conn, l guardLimits) *frameLimitConn {
	if l.maxFramesPerMsg <= 0 {
		l.maxFramesPerMsg = maxGuardFramesPerMessage
	}
	return &frameLimitConn{Conn: c, limits: l, greetingLeft: zmtpGreetingSize}
}

func (c *frameLimitConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		if verr := c.scan(p[:n]); verr != nil {
			c.err = verr
			c.Conn.Close()
			if c.limits.onViolation != nil {
				c.limits.onViolation(verr)
			}
			return 0, verr
		}
	}
	return n, err
}

// scan advances the parser over b, which has just been read from the peer.
func (c *frameLimitConn) scan(b []byte) error {
	for len(b) > 0 {
		switch {
		case c.greetingLeft > 0:
			k := min(c.greetingLeft, len(b))
			c.greetingLeft -= k
			b = b[k:]
		case c.inFrame:
			k := uint64(len(b))
			if k > c.bodyLeft {
				k = c.bodyLeft
			}
			c.bodyLeft -= k
			b = b[k:]
			if c.bodyLeft == 0 {
				c.frameDone()
			}
		default:
			if c.headerHave == 0 {
				flags := b[0]
				if flags&zmtpFlagReserved != 0 {
					return fmt.Errorf("%w: frame flags 0x%02x set reserved bits", errFrameLimit, flags)
				}
				if flags&zmtpFlagCommand != 0 && flags&zmtpFlagMore != 0 {
					return fmt.Errorf("%w: command frame with MORE flag", errFrameLimit)
				}
				c.header[0] = flags
				c.headerHave = 1
				c.headerNeed = 2
				if flags&zmtpFlagLong != 0 {
					c.headerNeed = 9
				}
				b = b[1:]
				continue
			}
			k := copy(c.header[c.headerHave:c.headerNeed], b)
			c.headerHave += k
			b = b[k:]
			if c.headerHave < c.headerNeed {
				continue
			}
			if err := c.startFrame(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *frameLimitConn) startFrame() error {
	var size uint64
	if c.headerNeed == 9 {
		for _, x := range c.header[1:9] {
			size = size<<8 | uint64(x)
		}
	} else {
		size = uint64(c.header[1])
	}
	if size > c.limits.maxFrameBytes {
		return fmt.Errorf("%w: peer announced a %d-byte frame, limit %d", errFrameLimit, size, c.limits.maxFrameBytes)
	}
	if c.header[0]&zmtpFlagCommand == 0 {
		c.framesInMsg++
		if c.framesInMsg > c.limits.maxFramesPerMsg {
			return fmt.Errorf("%w: message has more than %d frames", errFrameLimit, c.limits.maxFramesPerMsg)
		}
	}
	c.bodyLeft = size
	c.inFrame = true
	if size == 0 {
		c.frameDone()
	}
	return nil
}

func (c *frameLimitConn) frameDone() {
	flags := c.header[0]
	c.inFrame = false
	c.headerHave = 0
	if flags&zmtpFlagCommand != 0 {
		if !c.handshakeDone {
			// The peer's first complete command (READY for the NULL
			// mechanism) ends its side of the handshake: from here the
			// connection may legitimately stay idle for a long time.
			c.handshakeDone = true
			c.Conn.SetDeadline(time.Time{})
		}
		return
	}
	if flags&zmtpFlagMore == 0 {
		c.framesInMsg = 0
	}
}
