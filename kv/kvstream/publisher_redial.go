package kvstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// A connecting Publisher (vLLM's PUB that dials the indexer) must notice
// when its connection ends and dial again, as libzmq does in the
// background. zmq4 v0.17.0 offers WithAutomaticReconnect, but it redials
// synchronously from the connection's close callback, and a PUB send that
// fails runs that callback inside pubMWriter.sendMsg, which holds the
// writer's mutex, and the redial's addConn then takes the socket's mutex
// and the writer's again: the reverse of the order in which the
// connection reaper removes a closed connection (rmConn: socket's mutex,
// then the writer's). The two wait for each other and every later send
// and Close hang (zmq4 v0.17.0 pub.go sendMsg / addConn / rmConn,
// socket.go scheduleRmConn / addConn / rmConn / connReaper, conn.go
// checkIO / SetClosed). The indexer's bind mode cuts peers it refuses,
// which makes failed sends and redials; one of its tests hung that way
// (goroutine dump: Close waiting in socket.go:134, the writer in
// addConn, socket.go:288).
//
// So the Publisher dials through its own transports, which wrap zmq4's and
// hand back connections that report their end (the first read or write
// error that is not a timeout, or Close) to the Publisher's dial loop.

// The watched transports: TCP and Unix sockets (zmq4's tcp and ipc), with connections that report
// their end; tcp also dials from the Publisher's From address.
const (
	watchedTCP = "kvstream-pub-tcp"
	watchedIPC = "kvstream-pub-ipc"
)

// watchedEndpoint is endpoint on the watched transport of its scheme.
func watchedEndpoint(endpoint string) string {
	if rest, ok := strings.CutPrefix(endpoint, "tcp://"); ok {
		return watchedTCP + "://" + rest
	}
	if rest, ok := strings.CutPrefix(endpoint, "ipc://"); ok {
		return watchedIPC + "://" + rest
	}
	return endpoint
}

var registerWatchedTransports = sync.OnceValue(func() error {
	for name, inner := range map[string]string{watchedTCP: "tcp", watchedIPC: "unix"} {
		if err := zmq4.RegisterTransport(name, watchedTransport{name: name, inner: transport.New(inner)}); err != nil {
			return fmt.Errorf("register %s transport: %w", name, err)
		}
	}
	return nil
})

// redialKey carries a Publisher's redialer in its socket's context, which
// zmq4 hands to Transport.Dial (socket.Dial).
type redialKey struct{}

// redialer is one Publisher's side of its watched connections: the one
// dialled last, and a signal when it ends. Earlier connections' ends are
// not signalled: zmq4 closes them (its reaper) after a redial, and a
// signal then would dial a second connection to the same subscriber.
type redialer struct {
	from netip.Addr // the local address to dial from; zero: any
	lost chan struct{}

	mu      sync.Mutex
	current *watchedConn
}

func newRedialer(from netip.Addr) *redialer {
	return &redialer{from: from, lost: make(chan struct{}, 1)}
}

// reset forgets a signal left from an earlier connection, before a dial.
func (r *redialer) reset() {
	select {
	case <-r.lost:
	default:
	}
}

// dropCurrent closes the connection dialled last (after a failed
// handshake, which zmq4 leaves open).
func (r *redialer) dropCurrent() {
	r.mu.Lock()
	c := r.current
	r.current = nil
	r.mu.Unlock()
	if c != nil {
		c.Conn.Close()
	}
}

type watchedTransport struct {
	name  string
	inner transport.Transport
}

func (t watchedTransport) Dial(ctx context.Context, dialer transport.Dialer, addr string) (net.Conn, error) {
	r, _ := ctx.Value(redialKey{}).(*redialer)
	var conn net.Conn
	var err error
	if r != nil && r.from.IsValid() && t.name == watchedTCP {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(r.from, 0))}
		conn, err = d.DialContext(ctx, "tcp", addr)
	} else {
		conn, err = t.inner.Dial(ctx, dialer, addr)
	}
	if err != nil || r == nil {
		return conn, err
	}
	w := &watchedConn{Conn: conn, r: r}
	r.mu.Lock()
	r.current = w
	r.mu.Unlock()
	return w, nil
}

func (t watchedTransport) Listen(context.Context, string) (net.Listener, error) {
	return nil, fmt.Errorf("%s: dial only", t.name)
}

func (t watchedTransport) Addr(ep string) (string, error) { return t.inner.Addr(ep) }

// watchedConn is a dialled connection that reports its end once.
type watchedConn struct {
	net.Conn
	r    *redialer
	once sync.Once
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.check(err)
	return n, err
}

func (c *watchedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.check(err)
	return n, err
}

func (c *watchedConn) Close() error {
	c.end()
	return c.Conn.Close()
}

// check ends the connection on an error zmq4 also takes as its end: any
// but a timeout (conn.go checkIO).
func (c *watchedConn) check(err error) {
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		return
	}
	c.end()
}

func (c *watchedConn) end() {
	c.once.Do(func() {
		c.r.mu.Lock()
		last := c.r.current == c
		if last {
			c.r.current = nil
		}
		c.r.mu.Unlock()
		if last {
			select {
			case c.r.lost <- struct{}{}:
			default:
			}
		}
	})
}
