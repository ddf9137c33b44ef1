package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// hangGuard bounds every wait in these tests so a bug shows as a failure,
// not a hung test binary; it is not a performance assertion.
const hangGuard = 20 * time.Second

// fakeDecider answers from a function and records what it was asked.
type fakeDecider struct {
	mu    sync.Mutex
	calls []server.Request
	fn    func(ctx context.Context, req *server.Request) (*server.Decision, *server.RouteError)
}

func (f *fakeDecider) Decide(ctx context.Context, req *server.Request) (*server.Decision, *server.RouteError) {
	f.mu.Lock()
	cp := *req
	cp.Body = append([]byte(nil), req.Body...)
	if req.Body == nil {
		cp.Body = nil
	}
	f.calls = append(f.calls, cp)
	f.mu.Unlock()
	return f.fn(ctx, req)
}

func (f *fakeDecider) seen() []server.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]server.Request(nil), f.calls...)
}

// ticket counts lifecycle calls.
type ticket struct {
	firstBytes atomic.Int32
	finishes   atomic.Int32
	outcome    atomic.Int32
	served     atomic.Value
	done       chan struct{}
	once       sync.Once
}

func newTicket() *ticket { return &ticket{done: make(chan struct{})} }

func (t *ticket) FirstByte() { t.firstBytes.Add(1) }
func (t *ticket) Finish(o server.Outcome) {
	t.outcome.Store(int32(o))
	t.finishes.Add(1)
	t.once.Do(func() { close(t.done) })
}
func (t *ticket) Served(ep string) { t.served.Store(ep) }

func (t *ticket) wait(tb testing.TB) {
	tb.Helper()
	select {
	case <-t.done:
	case <-time.After(hangGuard):
		tb.Fatal("Finish never called")
	}
}

type env struct {
	srv  *server.Server
	conn *grpc.ClientConn
	addr string
}

func startServer(tb testing.TB, r server.Decider, cfg server.Config) *env {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := server.New(r, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		conn.Close()
		g.Stop()
	})
	return &env{srv: srv, conn: conn, addr: lis.Addr().String()}
}

// testWorkers are the worker cluster's endpoints in these tests (what EDS
// would deliver), so override_host finds the decisions' endpoints.
var testWorkers = []string{"10.0.0.1:8000", "10.0.0.2:8000", "[fd00::3]:8000"}

func (e *env) harness(tb testing.TB, cfg envoyharness.Config) *envoyharness.Harness {
	tb.Helper()
	h, err := envoyharness.New(e.conn, cfg.WithWorkers(testWorkers...))
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// waitIdle waits until no stream is open on the server, so counts taken
// afterwards are final.
func (e *env) waitIdle(tb testing.TB) {
	tb.Helper()
	poll.Until(tb, "every stream to close", hangGuard, func() error {
		if n := e.srv.Stats().StreamsActive; n != 0 {
			return fmt.Errorf("server still has %d open streams", n)
		}
		return nil
	})
}

// bufferedConfig is envoy.yaml with BUFFERED request and STREAMED
// response bodies and no trailers, a mode no shipped file uses.
func bufferedConfig() envoyharness.Config {
	c := envoyharness.DefaultConfig()
	c.RequestBodyMode = filterv3.ProcessingMode_BUFFERED
	c.ResponseBodyMode = filterv3.ProcessingMode_STREAMED
	c.RequestTrailers = false
	c.ResponseTrailers = false
	// A loaded 2-core test machine must not turn into spurious 504s.
	c.MessageTimeout = hangGuard
	return c
}
