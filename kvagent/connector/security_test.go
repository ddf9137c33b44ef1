package connector

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/poll"

	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
	"github.com/kvgate/kvgate/kvagent/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// startWith runs a connector with cfg's quota and rules over a fresh
// store of slots slots, on the Unix socket (engine) or a loopback TCP
// listener (peer).
func startWith(t *testing.T, slots int, cfg Config, ln net.Listener) (*fixture, *Metrics) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(store.Config{BlockBytes: testBlockBytes, HostBlocks: slots, ShmPath: filepath.Join(dir, "arena")})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	cfg.Store, cfg.Slots, cfg.Limits, cfg.Metrics = st, slots, Limits{MaxChain: 8}, m
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "c.sock")
	if ln == nil {
		if ln, err = ListenUnix(sock); err != nil {
			t.Fatal(err)
		}
	} else {
		sock = ln.Addr().String()
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Stop(context.Background())
		st.Close()
	})
	return &fixture{st: st, srv: srv, sock: sock}, m
}

// peerClient dials a peer listener over plaintext TCP.
func peerClient(t *testing.T, addr string) pb.ConnectorClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewConnectorClient(conn)
}

func loopbackListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func code(err error) codes.Code { return status.Code(err) }

// An engine connection serves the namespace it registered and its
// sub-namespaces, nothing else.
func TestEngineConnectionServesItsNamespaceOnly(t *testing.T) {
	f := startServer(t, 8, false)
	ctx := context.Background()
	owner := dial(t, f) // registered "m"
	if err := owner.Offload(ctx, "m", chainBlocks(2, 10)); err != nil {
		t.Fatal(err)
	}
	if err := owner.Offload(ctx, "m/sql-lora", chainBlocks(1, 20)); err != nil {
		t.Fatalf("offload into a sub-namespace: %v", err)
	}
	other, err := Dial(ctx, f.sock, Registration{Namespace: "tenant-b"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for name, call := range map[string]func() error{
		"lookup":     func() error { _, err := other.Lookup(ctx, "m", []uint64{10}); return err },
		"lookup sub": func() error { _, err := other.Lookup(ctx, "m/sql-lora", []uint64{20}); return err },
		"acquire with meta": func() error {
			_, err := other.rpc.Acquire(ctx, &pb.AcquireRequest{Namespace: "m", Chain: []uint64{10, 11}, WithMeta: true})
			return err
		},
		"reserve":     func() error { _, err := other.Reserve(ctx, "m", []uint64{99}); return err },
		"commit":      func() error { return other.Commit(ctx, "m", chainBlocks(1, 10), []int32{0}) },
		"name prefix": func() error { _, err := other.Lookup(ctx, "tenant-bb", []uint64{1}); return err },
	} {
		if err := call(); code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `registered "tenant-b"`) {
			t.Errorf("%s of another tenant's namespace: %v, want PermissionDenied naming the registration", name, err)
		}
	}
	// A connection registers one namespace; without one it may not use any.
	if _, err := other.rpc.Register(ctx, &pb.RegisterRequest{Namespace: "m"}); code(err) != codes.FailedPrecondition {
		t.Errorf("second Register with another namespace: %v, want FailedPrecondition", err)
	}
	conn, err := grpc.NewClient("passthrough:///"+f.sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", f.sock)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pb.NewConnectorClient(conn).Lookup(ctx, &pb.LookupRequest{Namespace: "m", Chain: []uint64{10}}); code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "Register first") {
		t.Errorf("lookup without Register: %v, want FailedPrecondition", err)
	}
	// Meanwhile the owner is served as before, metas included.
	r, err := owner.rpc.Acquire(ctx, &pb.AcquireRequest{Namespace: "m", Chain: []uint64{10, 11}, WithMeta: true})
	if err != nil || len(r.GetSlots()) != 2 || len(r.GetMetas()) != 2 || r.GetMetas()[1].GetParent() != 10 {
		t.Fatalf("owner's acquire with meta: %v, %v", r, err)
	}
	if len(r.GetCapability()) != 0 {
		t.Errorf("engine listener handed out a capability")
	}
	if err := owner.Release(ctx, r.GetSlots()); err != nil {
		t.Fatal(err)
	}
}

// Quotas: a Reserve beyond what the connection, its process or the
// listener may hold is refused (all or nothing) naming the bound; an
// Acquire is cut to the room left; another engine process keeps its share.
func TestQuotasBoundWhatClientsHold(t *testing.T) {
	f, m := startWith(t, 16, Config{Quota: Quota{PerConnection: 4, PerClient: 6, Total: 9, ConfigKey: "kvagent.quotas.engine"}}, nil)
	ctx := context.Background()
	c1, c2 := dial(t, f), dial(t, f) // one process: one client
	if _, err := c1.Reserve(ctx, "m", []uint64{1, 2, 3, 4, 5}); code(err) != codes.ResourceExhausted ||
		!strings.Contains(err.Error(), "kvagent.quotas.engine.per_connection") {
		t.Fatalf("reserve of 5 with a per-connection quota of 4: %v", err)
	}
	held, err := c1.Reserve(ctx, "m", []uint64{1, 2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Reserve(ctx, "m", []uint64{5, 6, 7}); code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "per_client") {
		t.Fatalf("reserve past the process's quota from its second connection: %v", err)
	}
	// Acquire is cut to the room left (2 for this process).
	if err := c1.Commit(ctx, "m", chainBlocks(4, 1), held); err != nil {
		t.Fatal(err)
	}
	got, err := c2.Acquire(ctx, "m", []uint64{1, 2, 3, 4})
	if err != nil || len(got) != 4 {
		t.Fatalf("acquire within quota: %v %v", got, err)
	}
	more, err := c1.Acquire(ctx, "m", []uint64{1, 2, 3, 4})
	if err != nil || len(more) != 2 {
		t.Fatalf("acquire with room for 2: %v, %v; want the 2-block prefix", more, err)
	}
	if _, err := c1.Acquire(ctx, "m", []uint64{1}); code(err) != codes.ResourceExhausted {
		t.Fatalf("acquire with no room: %v", err)
	}
	// Another engine process is its own client: it gets the listener's
	// remaining 3 (total 9), not more.
	out, err := otherProcess(t, f.sock, "reserve", "4")
	if err == nil || !strings.Contains(out, "total") {
		t.Fatalf("another process reserving past the listener total: %q, %v", out, err)
	}
	if out, err := otherProcess(t, f.sock, "reserve", "3"); err != nil {
		t.Fatalf("another process reserving its share: %q, %v", out, err)
	}
	for _, scope := range []string{"per_connection", "per_client", "total"} {
		if got := testutil.ToFloat64(m.quota.WithLabelValues("engine", scope)); got < 1 {
			t.Errorf("quota_refusals_total{scope=%s} = %v", scope, got)
		}
	}
	c1.Release(ctx, more)
	c2.Release(ctx, got)
	if r, a := f.srv.Pinned(); r != 0 || a != 0 {
		t.Fatalf("after releases: %d reserved, %d acquired held", r, a)
	}
}

// A hold older than the hold timeout is given back although its
// connection stays open; the late Commit or Release is refused.
func TestHoldsExpire(t *testing.T) {
	f, m := startWith(t, 4, Config{Quota: Quota{HoldTimeout: 150 * time.Millisecond}}, nil)
	ctx := context.Background()
	c := dial(t, f)
	if err := c.Offload(ctx, "m", chainBlocks(1, 7)); err != nil {
		t.Fatal(err)
	}
	res, err := c.Reserve(ctx, "m", []uint64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	acq, err := c.Acquire(ctx, "m", []uint64{7})
	if err != nil || len(acq) != 1 {
		t.Fatal(acq, err)
	}
	waitPinned(t, f.srv, 0, 0)
	if err := c.Commit(ctx, "m", chainBlocks(3, 1), res); code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "hold timeout") {
		t.Fatalf("commit after the hold timeout: %v", err)
	}
	if err := c.Release(ctx, acq); code(err) != codes.FailedPrecondition {
		t.Fatalf("release after the hold timeout: %v", err)
	}
	if got := testutil.ToFloat64(m.expiries.WithLabelValues("engine", "reserved")) + testutil.ToFloat64(m.expiries.WithLabelValues("engine", "acquired")); got != 4 {
		t.Fatalf("expired_slots_total = %v, want 4", got)
	}
	// The whole arena is free again.
	all, err := c.Reserve(ctx, "m", []uint64{11, 12, 13, 14})
	if err != nil {
		t.Fatalf("reserve of every slot after the expiry: %v", err)
	}
	c.Abort(ctx, all)
}

func waitPinned(t *testing.T, s *Server, reserved, acquired int) {
	t.Helper()
	poll.Until(t, "the pinned slots", 10*time.Second, func() error {
		if r, a := s.Pinned(); r != reserved || a != acquired {
			return fmt.Errorf("pinned %d reserved, %d acquired; want %d, %d", r, a, reserved, acquired)
		}
		return nil
	})
}

// The peer listener hands out a capability per Acquire; AuthorizeRead
// lets through only reads of that hold's slots by the same identity, and
// a read in progress keeps its slots pinned past the Release.
func TestCapabilitiesCoverTheirHoldOnly(t *testing.T) {
	f, _ := startWith(t, 8, Config{Peer: true}, loopbackListener(t))
	ctx := context.Background()
	keys := make([]store.Key, 4)
	for i := range keys {
		keys[i] = store.Key{Namespace: "m", Hash: uint64(30 + i)}
	}
	slots, err := f.st.Reserve(keys)
	if err != nil {
		t.Fatal(err)
	}
	metas := make([]store.Meta, 4)
	for i := range metas {
		metas[i] = store.Meta{TokenIDs: []uint32{1, 2, 3, 4}}
	}
	if err := f.st.Commit(keys, metas, slots); err != nil {
		t.Fatal(err)
	}
	p := peerClient(t, f.sock)
	a1, err := p.Acquire(ctx, &pb.AcquireRequest{Namespace: "m", Chain: []uint64{30, 31}, WithMeta: true})
	if err != nil || len(a1.GetCapability()) != 16 || len(a1.GetMetas()) != 2 {
		t.Fatalf("peer acquire: %v, %v", a1, err)
	}
	a2, err := p.Acquire(ctx, &pb.AcquireRequest{Namespace: "m", Chain: []uint64{30, 31, 32}})
	if err != nil || len(a2.GetSlots()) != 3 {
		t.Fatal(a2, err)
	}
	var c1, c2 Capability
	copy(c1[:], a1.GetCapability())
	copy(c2[:], a2.GetCapability())
	if c1 == c2 {
		t.Fatal("two acquires got the same capability")
	}
	s31, s32 := store.Slot(a1.GetSlots()[1]), store.Slot(a2.GetSlots()[2])
	free := store.Slot(-1)
	for sl := range store.Slot(8) {
		if sl != store.Slot(a2.GetSlots()[0]) && sl != s31 && sl != s32 && sl != store.Slot(slots[3]) {
			free = sl
			break
		}
	}
	for _, c := range []struct {
		name     string
		cap      Capability
		identity string
		slots    []store.Slot
	}{
		{"no capability", Capability{}, "", []store.Slot{s31}},
		{"made-up capability", Capability{1, 2, 3}, "", []store.Slot{s31}},
		{"a slot of another hold", c1, "", []store.Slot{s32}},
		{"a slot nobody holds", c1, "", []store.Slot{free}},
		{"another identity", c1, "CN=someone-else", []store.Slot{s31}},
	} {
		if _, err := f.srv.AuthorizeRead(c.cap, c.identity, c.slots); err == nil {
			t.Errorf("%s: read authorized", c.name)
		}
	}
	release, err := f.srv.AuthorizeRead(c1, "", []store.Slot{s31})
	if err != nil {
		t.Fatalf("read of the hold's own slot: %v", err)
	}
	// Released mid-read: the capability is dead, the read keeps its pin.
	if _, err := p.Release(ctx, &pb.ReleaseRequest{Slots: a1.GetSlots()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.AuthorizeRead(c1, "", []store.Slot{s31}); err == nil {
		t.Error("capability still works after its Release")
	}
	if _, _, err := f.st.PinnedMetas([]store.Slot{s31}); err != nil {
		t.Fatal("slot unpinned while a read holds it")
	}
	release()
	if _, err := p.Release(ctx, &pb.ReleaseRequest{Slots: a2.GetSlots()}); err != nil {
		t.Fatal(err)
	}
	if err := f.st.PinSlots([]store.Slot{s31}); err == nil {
		t.Fatal("slot still pinned after the read and both releases")
	}
}

// A plaintext peer listener answers loopback clients only.
func TestPlaintextPeerListenerRefusesRemoteClients(t *testing.T) {
	ln := loopbackListener(t)
	f, _ := startWith(t, 4, Config{Peer: true}, fakeRemote{ln})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := peerClient(t, f.sock)
	for name, call := range map[string]func() error{
		"stats":     func() error { _, err := p.Stats(ctx, &pb.StatsRequest{}); return err },
		"peer info": func() error { _, err := p.PeerInfo(ctx, &pb.PeerInfoRequest{}); return err },
		"acquire": func() error {
			_, err := p.Acquire(ctx, &pb.AcquireRequest{Namespace: "m", Chain: []uint64{1}})
			return err
		},
	} {
		if err := call(); code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("%s from a non-loopback address: %v, want PermissionDenied", name, err)
		}
	}
}

type fakeRemote struct{ net.Listener }

func (l fakeRemote) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return remoteConn{c}, nil
}

type remoteConn struct{ net.Conn }

func (remoteConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.ParseIP("10.9.8.7"), Port: 5555} }

func TestPeerNamespaceRules(t *testing.T) {
	rules := []NamespaceRule{{Peer: "node-b.gpu", Namespaces: []string{"qwen3", "qwen3/*"}}, {Peer: "10.0.0.9", Namespaces: []string{"*"}}}
	if err := checkRules(rules); err != nil {
		t.Fatal(err)
	}
	nodeB := certNames(&x509.Certificate{Subject: pkix.Name{CommonName: "node-b"}, DNSNames: []string{"node-b.gpu"}})
	nodeC := certNames(&x509.Certificate{Subject: pkix.Name{CommonName: "node-c"}, IPAddresses: []net.IP{net.ParseIP("10.0.0.9")}})
	nodeD := certNames(&x509.Certificate{Subject: pkix.Name{CommonName: "node-b.gpu-x"}, URIs: []*url.URL{{Scheme: "spiffe", Host: "x", Path: "/y"}}})
	for _, c := range []struct {
		names []string
		ns    string
		want  bool
	}{
		{nodeB, "qwen3", true}, {nodeB, "qwen3/sql", true}, {nodeB, "qwen3x", false}, {nodeB, "llama", false},
		{nodeC, "llama", true}, {nodeD, "qwen3", false}, {nil, "qwen3", false},
	} {
		if got := peerMay(rules, c.names, c.ns); got != c.want {
			t.Errorf("peer %v, namespace %q: %v, want %v", c.names, c.ns, got, c.want)
		}
	}
	if !peerMay(nil, nil, "anything") {
		t.Error("without rules every peer may fetch")
	}
	for _, bad := range [][]NamespaceRule{{{Peer: "", Namespaces: []string{"a"}}}, {{Peer: "x"}}, {{Peer: "x", Namespaces: []string{"a*"}}}, {{Peer: "x", Namespaces: []string{"*/*"}}}} {
		if err := checkRules(bad); err == nil {
			t.Errorf("rules %+v accepted", bad)
		}
	}
	if got := PeerIdentity(&x509.Certificate{Subject: pkix.Name{CommonName: "n"}, DNSNames: []string{"b", "a"}}); got != "CN=n,DNS=a,DNS=b" {
		t.Errorf("PeerIdentity = %q", got)
	}
}

// The engine socket never exists with more than its mode, even under an
// empty umask (a container default): the mode is set before bind(2).
func TestListenUnixNeverExposesTheSocket(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "k.sock")
	var mu sync.Mutex
	var worst os.FileMode
	seen := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if fi, err := os.Lstat(path); err == nil {
				mu.Lock()
				worst |= fi.Mode().Perm() &^ socketMode
				seen++
				mu.Unlock()
			}
		}
	}()
	for range 200 {
		l, err := ListenUnix(path)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode().Perm() != socketMode {
			t.Fatalf("socket mode %v, %v; want %v", fi.Mode().Perm(), err, os.FileMode(socketMode))
		}
		l.Close()
	}
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	if worst != 0 {
		t.Fatalf("socket observed with extra permission bits %v", worst)
	}
	t.Logf("%d observations of the socket while it was created", seen)
}

// helperEnv makes the test binary act as another engine process (its own
// pid, so its own client for the per-client quota).
const helperEnv = "KVGATE_CONNECTOR_TEST_CLIENT"

func TestMain(m *testing.M) {
	if args := os.Getenv(helperEnv); args != "" {
		os.Exit(runHelperClient(strings.Fields(args)))
	}
	os.Exit(m.Run())
}

// runHelperClient: "SOCKET reserve N" reserves N slots and reports.
func runHelperClient(args []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, args[0], Registration{Namespace: "m"})
	if err != nil {
		println(err.Error())
		return 1
	}
	defer c.Close()
	n := 0
	fmt.Sscan(args[2], &n)
	hashes := make([]uint64, n)
	for i := range hashes {
		hashes[i] = uint64(1000 + i)
	}
	if _, err := c.Reserve(ctx, "m", hashes); err != nil {
		println(err.Error())
		return 1
	}
	return 0
}

// otherProcess runs the helper client against sock and returns what it
// printed.
func otherProcess(t *testing.T, sock string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+sock+" "+strings.Join(args, " "))
	out, err := cmd.CombinedOutput()
	return string(out), err
}
