package transfer

import (
	"context"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// newTestAgent starts a TCP endpoint with its own metrics registry.
func newTestAgent(t *testing.T, cfg TCPConfig) (*tcpEndpoint, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	a, err := newTCP(cfg)
	if err != nil {
		t.Fatalf("NewTCP(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() { a.Close() })
	return a, reg
}

func mustRegister(t *testing.T, a Endpoint, r Region) uint32 {
	t.Helper()
	h, err := a.RegisterMem(r)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// load makes from's metadata known to to.
func load(t *testing.T, to, from Endpoint) {
	t.Helper()
	md, err := from.LocalMetadata()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := to.LoadRemoteMetadata(md); err != nil {
		t.Fatal(err)
	}
}

func post(t *testing.T, a Endpoint, op Op, local []Desc, remote string, rd []Desc) Xfer {
	t.Helper()
	x, err := a.CreateXfer(op, local, remote, rd, nil)
	if err != nil {
		t.Fatalf("CreateXfer: %v", err)
	}
	if err := a.Post(x); err != nil {
		t.Fatalf("Post: %v", err)
	}
	return x
}

// await waits for x under a hang guard (not a speed assertion).
func await(t *testing.T, a Endpoint, x Xfer) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := Wait(ctx, a, x)
	if ctx.Err() != nil {
		t.Fatalf("transfer %d hung: %v", x, err)
	}
	return err
}

func counter(t *testing.T, c *prometheus.CounterVec, label string) float64 {
	t.Helper()
	return testutil.ToFloat64(c.WithLabelValues(label))
}

// slowListener hands out connections whose writes trickle (16 KiB every
// 4 ms, about 4 MiB/s), so a test can act while a transfer is
// demonstrably in flight.
type slowListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newSlowListener(t *testing.T) *slowListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &slowListener{Listener: ln}
}

func (l *slowListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.conns = append(l.conns, c)
	l.mu.Unlock()
	return slowConn{c}, nil
}

type slowConn struct{ net.Conn }

func (c slowConn) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), 16<<10)
		w, err := c.Conn.Write(p[:k])
		n += w
		if err != nil {
			return n, err
		}
		p = p[k:]
		time.Sleep(4 * time.Millisecond)
	}
	return n, nil
}

// pattern returns n deterministic pseudo-random bytes (the conformance
// suite has its own; importing it here would be an import cycle).
func pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, ^seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
