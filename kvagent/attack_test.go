package kvagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/kvagent/connector"
	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
	"github.com/kvgate/kvgate/kvagent/store"
	"github.com/kvgate/kvgate/kvagent/transfer"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/poll"
	"github.com/kvgate/kvgate/lab/testkit/tlstest"
)

// The attacks of issue 15 against a real `kvgate kvagent` process (the
// test binary re-executed as the daemon, crash_test.go), over loopback:
// each asserts the refusal and that the daemon keeps serving its own
// engines and legitimate peers meanwhile. kvagent/README.md ("Security")
// has the attack → before → after table these tests back.

// victimNode is a daemon with mutual TLS on both peer channels, a CA of
// its own and small quotas with a short hold timeout.
type victimNode struct {
	dir, sock          string
	peerAddr, xferAddr string
	d                  *daemon
	ca                 *tlstest.CA
	caFile             string
}

const (
	victimHostBlocks = 64
	victimHold       = 1500 * time.Millisecond
)

// startVictim starts the daemon; tls false leaves the peer channels
// plaintext (loopback only).
func startVictim(t *testing.T, withTLS bool, namespaces string) *victimNode {
	t.Helper()
	n := &victimNode{dir: t.TempDir()}
	n.sock = filepath.Join(n.dir, "k.sock")
	n.peerAddr, n.xferAddr = fmt.Sprintf("127.0.0.1:%d", freeport.Pick(t)), fmt.Sprintf("127.0.0.1:%d", freeport.Pick(t))
	var err error
	if n.ca, err = tlstest.NewCA("kvagent peers"); err != nil {
		t.Fatal(err)
	}
	if n.caFile, err = n.ca.Write(n.dir, "ca"); err != nil {
		t.Fatal(err)
	}
	peer := fmt.Sprintf("{listen: %s, transfer_listen: %s, streams: 2", n.peerAddr, n.xferAddr)
	if withTLS {
		f := tlstest.MustWrite(t, n.dir)(n.ca.Peer("victim", "127.0.0.1"))
		peer += fmt.Sprintf(", tls: {cert_file: %s, key_file: %s, ca_file: %s}", f.Cert, f.Key, n.caFile)
	}
	if namespaces != "" {
		peer += ", namespaces: " + namespaces
	}
	yaml := fmt.Sprintf(`kvagent:
  name: victim
  socket: %s
  shm_path: %s
  block_bytes: %d
  host_blocks: %d
  admin: 127.0.0.1:0
  drain_timeout: 5s
  quotas:
    engine: {per_connection: 32, per_process: 32, hold_timeout: %s}
    peer: {per_connection: 8, per_peer: 12, total: 16, hold_timeout: %s}
  peer: %s}
`, n.sock, filepath.Join(n.dir, "arena"), testBlockBytes, victimHostBlocks, victimHold, victimHold, peer)
	cfgPath := filepath.Join(n.dir, "kvagent.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	n.d = startDaemon(t, cfgPath)
	return n
}

// creds is a mutual-TLS config with a certificate of issuer for cn.
func creds(t *testing.T, dir string, issuer *tlstest.CA, caFile, cn string) *tls.Config {
	t.Helper()
	f := tlstest.MustWrite(t, dir)(issuer.Peer(cn, "127.0.0.1"))
	c, err := (&secretfiles.PeerTLS{CertFile: f.Cert, KeyFile: f.Key, CAFile: caFile}).Load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// peerRPC dials the victim's peer listener (c nil: plaintext).
func (n *victimNode) peerRPC(t *testing.T, c *tls.Config) pb.ConnectorClient {
	t.Helper()
	tc := insecure.NewCredentials()
	if c != nil {
		tc = credentials.NewTLS(c)
	}
	conn, err := grpc.NewClient("passthrough:///"+n.peerAddr, grpc.WithTransportCredentials(tc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewConnectorClient(conn)
}

// reader is an attacker's (or a peer's) transfer engine that has loaded
// the victim's transfer metadata.
type reader struct {
	x      transfer.Endpoint
	local  []byte
	lh     uint32
	remote string
	region uint32
}

func (n *victimNode) reader(t *testing.T, name string, c *tls.Config, info *pb.PeerInfoResponse) *reader {
	t.Helper()
	x, err := transfer.NewTCP(transfer.TCPConfig{Name: name, Streams: 1, TLS: c, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	r := &reader{x: x, local: make([]byte, 4*testBlockBytes), region: info.GetRegion()}
	if r.lh, err = x.RegisterMem(transfer.Region{Kind: transfer.DRAM, Addr: r.local}); err != nil {
		t.Fatal(err)
	}
	if r.remote, err = x.LoadRemoteMetadata(info.GetTransferMetadata()); err != nil {
		t.Fatal(err)
	}
	return r
}

// do moves one block between the victim's slot and the reader's memory.
func (r *reader) do(t *testing.T, op transfer.Op, slot int32, grant transfer.Grant) error {
	t.Helper()
	bb := int64(testBlockBytes)
	x, err := r.x.CreateXfer(op, []transfer.Desc{{Region: r.lh, Len: bb}}, r.remote, []transfer.Desc{{Region: r.region, Offset: int64(slot) * bb, Len: bb, Grant: grant}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.x.Release(x)
	if err := r.x.Post(x); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return transfer.Wait(ctx, r.x, x)
}

// victimEngine offloads a chain on the victim's socket and returns it.
func (n *victimNode) victimEngine(t *testing.T, base uint64) (*connector.Client, testChain) {
	t.Helper()
	c := dialAgent(t, n.sock)
	ch := makeChain(4, base, uint32(base))
	if err := c.Offload(context.Background(), "m", ch.blocks); err != nil {
		t.Fatal(err)
	}
	return c, ch
}

// stillServes checks the victim's engine path (offload, onboard with the
// right bytes) and, with fetcher, a legitimate peer fetch.
func (n *victimNode) stillServes(t *testing.T, c *connector.Client, base uint64, fetcher *Agent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch := makeChain(3, base, uint32(base))
	if err := c.Offload(ctx, "m", ch.blocks); err != nil {
		t.Fatalf("the victim's engine cannot offload during the attack: %v", err)
	}
	dst := [][]byte{make([]byte, testBlockBytes), make([]byte, testBlockBytes), make([]byte, testBlockBytes)}
	if got, err := c.Onboard(ctx, "m", ch.hashes, dst); err != nil || got != 3 {
		t.Fatalf("the victim's engine cannot onboard during the attack: %d, %v", got, err)
	}
	for i := range dst {
		if !bytes.Equal(dst[i], ch.blocks[i].Data) {
			t.Fatalf("the victim's engine onboarded other bytes for block %d", i)
		}
	}
	if fetcher == nil {
		return
	}
	if got, err := fetcher.FetchFromPeer(ctx, "victim", "m", ch.hashes); err != nil || got != 3 {
		t.Fatalf("a legitimate peer cannot fetch during the attack: %d, %v", got, err)
	}
	buf := make([]byte, testBlockBytes)
	for i, h := range ch.hashes {
		if _, _, err := fetcher.st.Get(store.Key{Namespace: "m", Hash: h}, buf); err != nil || !bytes.Equal(buf, ch.blocks[i].Data) {
			t.Fatalf("a legitimate peer fetched other bytes for block %d: %v", i, err)
		}
	}
}

// legitimatePeer is an in-process agent with a certificate of the
// victim's CA (CN node-a), the victim added as peer "victim".
func (n *victimNode) legitimatePeer(t *testing.T) *Agent {
	t.Helper()
	a := startAgent(t, peerTLSConfig(t, n.ca, n.caFile, "node-a", freeport.Pick(t)))
	if err := a.AddPeer("victim", n.peerAddr); err != nil {
		t.Fatal(err)
	}
	return a
}

var metricLine = regexp.MustCompile(`(?m)^([a-z_]+)\{([^}]*)\} ([0-9.e+]+)$`)

// metric sums the samples of name whose labels include every label given.
func (n *victimNode) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	code, body := httpGet(t, "http://"+n.d.admin+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	sum := 0.0
	for _, m := range metricLine.FindAllStringSubmatch(body, -1) {
		if m[1] != name {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(m[2], l)
		}
		if ok {
			v, _ := strconv.ParseFloat(m[3], 64)
			sum += v
		}
	}
	return sum
}

func grpcCode(err error) codes.Code { return status.Code(err) }

// Attack 1: a client with no credentials at all. With mutual TLS it gets
// neither a TLS session on the transfer port nor an answer on the peer
// listener (Stats and PeerInfo included). On a plaintext loopback node it
// can speak the transfer protocol, but reads without an Acquire's
// capability and any write are refused; the victim's bytes stay its own.
func TestAttackWithoutCredentials(t *testing.T) {
	t.Run("mutual TLS", func(t *testing.T) {
		n := startVictim(t, true, "")
		c, _ := n.victimEngine(t, 100)
		fetcher := n.legitimatePeer(t)
		// Plain TCP on the transfer port: the server waits for a TLS
		// hello; a transfer HELLO frame is not one.
		raw, err := net.Dial("tcp", n.xferAddr)
		if err != nil {
			t.Fatal(err)
		}
		raw.SetDeadline(time.Now().Add(10 * time.Second))
		raw.Write([]byte("\x00\x00\x00\x24not a TLS record, a transfer HELLO"))
		answer := make([]byte, 64)
		got, _ := raw.Read(answer)
		raw.Close()
		// What comes back is nothing or a TLS alert record (type 21),
		// never a transfer frame.
		if got > 0 && answer[0] != 21 {
			t.Fatalf("transfer port answered plaintext with %q", answer[:got])
		}
		// TLS that trusts the CA but presents no certificate.
		pool := x509.NewCertPool()
		pool.AddCert(n.ca.Cert)
		noCert := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
		tc, err := tls.Dial("tcp", n.xferAddr, noCert)
		if err == nil {
			tc.SetDeadline(time.Now().Add(10 * time.Second))
			_, err = tc.Read(make([]byte, 1))
			tc.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("transfer port without a client certificate: %v, want a certificate error", err)
		}
		// The peer listener, with no certificate and with plaintext.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for name, p := range map[string]pb.ConnectorClient{"no certificate": n.peerRPC(t, noCert), "plaintext": n.peerRPC(t, nil)} {
			if _, err := p.Stats(ctx, &pb.StatsRequest{}); err == nil {
				t.Errorf("%s: Stats answered", name)
			}
			if _, err := p.PeerInfo(ctx, &pb.PeerInfoRequest{}); err == nil {
				t.Errorf("%s: PeerInfo answered", name)
			}
			if r, err := p.Acquire(ctx, &pb.AcquireRequest{Namespace: "m", Chain: []uint64{100, 101}, WithMeta: true}); err == nil {
				t.Errorf("%s: Acquire answered %v", name, r)
			}
		}
		n.stillServes(t, c, 200, fetcher)
	})
	t.Run("plaintext loopback", func(t *testing.T) {
		n := startVictim(t, false, "")
		c, ch := n.victimEngine(t, 300)
		ctx := context.Background()
		// Loopback is the trust boundary here: PeerInfo answers, so the
		// attacker can speak to the transfer engine.
		info, err := n.peerRPC(t, nil).PeerInfo(ctx, &pb.PeerInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		r := n.reader(t, "attacker", nil, info)
		// Where the victim's blocks are: the engine's own Acquire.
		slots, err := c.Acquire(ctx, "m", ch.hashes)
		if err != nil || len(slots) != 4 {
			t.Fatal(slots, err)
		}
		c.Release(ctx, slots)
		for _, g := range []transfer.Grant{{}, {0xde, 0xad, 0xbe, 0xef}} {
			for s := range int32(victimHostBlocks) {
				if err := r.do(t, transfer.Read, s, g); err == nil || !strings.Contains(err.Error(), "not permitted") {
					t.Fatalf("read of slot %d with grant %x: %v, want refused", s, g[:4], err)
				}
			}
		}
		if !bytes.Equal(r.local, make([]byte, len(r.local))) {
			t.Fatal("a refused read delivered bytes")
		}
		// Poisoning: write the victim's first slot.
		copy(r.local, bytes.Repeat([]byte("poison!!"), testBlockBytes/8))
		if err := r.do(t, transfer.Write, slots[0], transfer.Grant{}); err == nil || !strings.Contains(err.Error(), "inbound writes are refused") {
			t.Fatalf("write into the victim's slot: %v, want refused", err)
		}
		dst := [][]byte{make([]byte, testBlockBytes)}
		if got, err := c.Onboard(ctx, "m", ch.hashes[:1], dst); err != nil || got != 1 || !bytes.Equal(dst[0], ch.blocks[0].Data) {
			t.Fatalf("victim's onboard after the write attempt: %d, %v, own bytes %v", got, err, bytes.Equal(dst[0], ch.blocks[0].Data))
		}
		if got := n.metric(t, "kvgate_kvagent_transfer_errors_total", `reason="rejected"`); got < 2*victimHostBlocks+1 {
			t.Errorf("transfer_errors_total{reason=rejected} = %v, want every refusal counted", got)
		}
		n.stillServes(t, c, 400, nil)
	})
}

// Attack 2: a client holding credentials — another tenant's engine on the
// socket, another peer's certificate, or a leaked capability — reaches
// nothing that is not its own.
func TestAttackWithAnotherTenantsOrPeersCredentials(t *testing.T) {
	n := startVictim(t, true, `[{peer: node-a, allow: ["*"]}, {peer: node-b, allow: ["*"]}, {peer: node-c, allow: [tenant-c, "tenant-c/*"]}]`)
	c, ch := n.victimEngine(t, 500)
	fetcher := n.legitimatePeer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Another tenant's engine on the socket.
	tenantB, err := connector.Dial(ctx, n.sock, connector.Registration{Namespace: "tenant-b"})
	if err != nil {
		t.Fatal(err)
	}
	defer tenantB.Close()
	if _, err := tenantB.Lookup(ctx, "m", ch.hashes); grpcCode(err) != codes.PermissionDenied {
		t.Errorf("tenant-b looks up tenant m's chain: %v, want PermissionDenied", err)
	}
	if _, err := tenantB.Acquire(ctx, "m", ch.hashes); grpcCode(err) != codes.PermissionDenied {
		t.Errorf("tenant-b acquires tenant m's chain: %v, want PermissionDenied", err)
	}

	// Another peer's certificate: node-c may fetch tenant-c only.
	dir := t.TempDir()
	nodeB, nodeC := creds(t, dir, n.ca, n.caFile, "node-b"), creds(t, dir, n.ca, n.caFile, "node-c")
	pc, pb_ := n.peerRPC(t, nodeC), n.peerRPC(t, nodeB)
	if r, err := pc.Acquire(ctx, &pb.AcquireRequest{Namespace: "m", Chain: ch.hashes, WithMeta: true}); grpcCode(err) != codes.PermissionDenied {
		t.Errorf("node-c acquires namespace m with metas: %v, %v; want PermissionDenied", r, err)
	}
	if _, err := pc.Lookup(ctx, &pb.LookupRequest{Namespace: "m", Chain: ch.hashes}); grpcCode(err) != codes.PermissionDenied {
		t.Errorf("node-c looks up namespace m: %v, want PermissionDenied", err)
	}
	// A certificate of another CA gets no session at all.
	other, err := tlstest.NewCA("elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, _ := other.Write(dir, "other")
	if _, err := n.peerRPC(t, creds(t, t.TempDir(), other, otherCA, "node-b")).Stats(ctx, &pb.StatsRequest{}); err == nil {
		t.Error("a certificate of another CA got Stats")
	}

	// node-b pins the chain; its capability is no use to node-c, even
	// leaked, nor are node-c's own capabilities for node-b's slots.
	acq, err := pb_.Acquire(ctx, &pb.AcquireRequest{Namespace: "m", Chain: ch.hashes, WithMeta: true})
	if err != nil || len(acq.GetSlots()) != 4 || len(acq.GetCapability()) != 16 {
		t.Fatalf("node-b acquire: %v, %v", acq, err)
	}
	var stolen transfer.Grant
	copy(stolen[:], acq.GetCapability())
	info, err := pb_.PeerInfo(ctx, &pb.PeerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rc := n.reader(t, "node-c", nodeC, info)
	if err := rc.do(t, transfer.Read, acq.GetSlots()[0], stolen); err == nil || !strings.Contains(err.Error(), "not permitted") {
		t.Errorf("node-c reads node-b's slot with node-b's capability: %v, want refused", err)
	}
	if err := tenantCOffload(ctx, n.sock); err != nil {
		t.Fatal(err)
	}
	own, err := pc.Acquire(ctx, &pb.AcquireRequest{Namespace: "tenant-c", Chain: []uint64{9000}})
	if err != nil || len(own.GetSlots()) != 1 {
		t.Fatalf("node-c acquires its own namespace: %v, %v", own, err)
	}
	var ownGrant transfer.Grant
	copy(ownGrant[:], own.GetCapability())
	if err := rc.do(t, transfer.Read, acq.GetSlots()[1], ownGrant); err == nil || !strings.Contains(err.Error(), "not permitted") {
		t.Errorf("node-c reads node-b's slot with its own capability: %v, want refused", err)
	}
	if err := rc.do(t, transfer.Read, own.GetSlots()[0], ownGrant); err != nil {
		t.Errorf("node-c reads the slot it pinned itself: %v", err)
	}
	if _, err := pc.Release(ctx, &pb.ReleaseRequest{Slots: acq.GetSlots()}); grpcCode(err) != codes.FailedPrecondition {
		t.Errorf("node-c releases node-b's pins: %v, want FailedPrecondition", err)
	}
	if !bytes.Equal(rc.local[:testBlockBytes], blockData(9000)) {
		t.Error("node-c's own read returned other bytes")
	}
	// node-b itself reads with it: the capability was good, the caller
	// was not.
	rb := n.reader(t, "node-b", nodeB, info)
	if err := rb.do(t, transfer.Read, acq.GetSlots()[0], stolen); err != nil || !bytes.Equal(rb.local[:testBlockBytes], ch.blocks[0].Data) {
		t.Fatalf("node-b reads its own pin: %v", err)
	}
	n.stillServes(t, c, 600, fetcher)
}

// tenantCOffload stores block 9000 in namespace tenant-c as tenant-c's
// engine.
func tenantCOffload(ctx context.Context, sock string) error {
	c, err := connector.Dial(ctx, sock, connector.Registration{Namespace: "tenant-c", BlockBytes: testBlockBytes})
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Offload(ctx, "tenant-c", []connector.Block{{Hash: 9000, TokenIDs: []uint32{1, 2, 3, 4}, Data: blockData(9000)}})
}

// Attack 3: pin starvation by peers. An authenticated peer acquires over
// many connections and never releases: past its quota it is refused, all
// peers together never hold more than peer.total, the victim's engine
// keeps offloading, and the pins are given back after the hold timeout
// although the connections stay open.
func TestAttackPinStarvationByPeers(t *testing.T) {
	n := startVictim(t, true, "")
	c, _ := n.victimEngine(t, 700)
	// 64 slots, every one resident: the attacker has something to pin.
	fill := makeChain(28, 800, 800)
	for i := 0; i < len(fill.blocks); i += 7 {
		if err := c.Offload(context.Background(), "m", fill.blocks[i:i+7]); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	pinned, refused := 0, 0
	for _, cn := range []string{"attacker-1", "attacker-2"} {
		cr := creds(t, dir, n.ca, n.caFile, cn)
		for range 6 { // connections
			p := n.peerRPC(t, cr)
			for range 4 {
				r, err := p.Acquire(ctx, &pb.AcquireRequest{Namespace: "m", Chain: fill.hashes, WithMeta: true})
				if err != nil {
					if grpcCode(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "kvagent.quotas.peer") {
						t.Fatalf("refusal %v does not name the quota", err)
					}
					refused++
					continue
				}
				pinned += len(r.GetSlots())
			}
		}
	}
	t.Logf("two attacker peers, 12 connections, 48 acquires of 28 blocks: %d slots pinned, %d acquires refused", pinned, refused)
	if pinned > 16 {
		t.Fatalf("peers pinned %d slots, more than kvagent.quotas.peer.total (16)", pinned)
	}
	if refused == 0 || n.metric(t, "kvgate_kvagent_connector_quota_refusals_total", `listener="peer"`) < float64(refused) {
		t.Fatal("quota refusals not counted")
	}
	// Meanwhile the engine offloads and onboards. A legitimate peer is
	// refused too (peer.total is spent): peers share what they may take,
	// engines keep the rest.
	n.stillServes(t, c, 900, nil)
	legit := n.legitimatePeer(t)
	if got, err := legit.FetchFromPeer(ctx, "victim", "m", fill.hashes[:2]); err == nil || !strings.Contains(err.Error(), "kvagent.quotas.peer.total") {
		t.Fatalf("a peer's fetch while the attackers hold peer.total: %d, %v", got, err)
	}
	poll.True(t, "the attackers' pins to expire", 30*time.Second, func() bool {
		return n.metric(t, "kvgate_kvagent_connector_expired_slots_total", `listener="peer"`, `kind="acquired"`) >= float64(pinned)
	})
	// Pins given back: the legitimate peer fetches again.
	n.stillServes(t, c, 1000, legit)
}

// Attack 4: reservation starvation on the socket. Another process with
// socket access reserves over many connections and never commits: past
// its per-process quota it is refused, the victim engine keeps
// offloading, and the reservations are aborted after the hold timeout
// while the attacker keeps its connections open.
func TestAttackReservationStarvationOnTheSocket(t *testing.T) {
	n := startVictim(t, true, "")
	c, _ := n.victimEngine(t, 1100)
	attacker := exec.Command(os.Args[0], "-test.run=^$")
	attacker.Env = append(os.Environ(), attackerEnv+"="+n.sock)
	out, err := attacker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	attacker.Stderr = os.Stderr
	stdin, err := attacker.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := attacker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		attacker.Process.Kill()
		attacker.Wait()
	})
	line := make([]byte, 256)
	k, _ := out.Read(line)
	var reserved, refused int
	if _, err := fmt.Sscanf(string(line[:k]), "reserved %d refused %d", &reserved, &refused); err != nil {
		t.Fatalf("attacker said %q: %v", line[:k], err)
	}
	t.Logf("attacker process, 8 connections × 8 reserves of 8 slots: %d slots reserved, %d reserves refused", reserved, refused)
	if reserved > 32 || refused == 0 {
		t.Fatalf("attacker reserved %d slots (%d refused), want at most kvagent.quotas.engine.per_process (32)", reserved, refused)
	}
	n.stillServes(t, c, 1200, nil)
	poll.True(t, "the attacker's reservations to expire", 30*time.Second, func() bool {
		return n.metric(t, "kvgate_kvagent_connector_expired_slots_total", `listener="engine"`, `kind="reserved"`) >= float64(reserved)
	})
	// The attacker's connections are still open, its slots free again:
	// the victim can have 32 slots in flight at once (its own quota).
	ctx := context.Background()
	var held []int32
	for i := range 4 {
		s, err := c.Reserve(ctx, "m", makeChain(8, uint64(1300+8*i), 1).hashes)
		if err != nil {
			t.Fatalf("reserve %d after the expiry: %v", i, err)
		}
		held = append(held, s...)
	}
	if err := c.Abort(ctx, held); err != nil {
		t.Fatal(err)
	}
}

// attackerEnv makes the test binary the reservation attacker: it opens 8
// connections to the socket, reserves 8 slots 8 times on each, reports
// what it got on stdout and holds everything until stdin closes.
const attackerEnv = "KVGATE_TEST_KVAGENT_ATTACKER"

func runAttacker(sock string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reserved, refused := 0, 0
	var conns []*connector.Client
	for i := range 8 {
		c, err := connector.Dial(ctx, sock, connector.Registration{Namespace: "m"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		conns = append(conns, c)
		for j := range 8 {
			hashes := make([]uint64, 8)
			for k := range hashes {
				hashes[k] = uint64(1<<40 + i*1000 + j*10 + k)
			}
			if _, err := c.Reserve(ctx, "m", hashes); err != nil {
				refused++
				continue
			}
			reserved += len(hashes)
		}
	}
	fmt.Printf("reserved %d refused %d\n", reserved, refused)
	os.Stdin.Read(make([]byte, 1))
	for _, c := range conns {
		c.Close()
	}
	return 0
}
