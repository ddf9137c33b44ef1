package kvagent

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/kvagent/agentconfig"
	"github.com/kvgate/kvgate/kvagent/connector"
	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
	"github.com/kvgate/kvgate/kvagent/store"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/tlstest"
)

// dialAgentAs is dialAgent for an engine serving namespace ns.
func dialAgentAs(t *testing.T, sock, ns string) *connector.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := connector.Dial(ctx, sock, connector.Registration{Namespace: ns, BlockBytes: testBlockBytes, TokensPerBlock: tokensPerBlock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// onboard reads chain through the engine connector; it returns the bytes
// of each block onboarded.
func onboard(t *testing.T, c *connector.Client, ns string, chain []uint64) [][]byte {
	t.Helper()
	dst := make([][]byte, len(chain))
	for i := range dst {
		dst[i] = make([]byte, testBlockBytes)
	}
	n, err := c.Onboard(context.Background(), ns, chain, dst)
	if err != nil {
		t.Fatalf("onboard of %v: %v", chain, err)
	}
	if err := c.ReleaseOnboarded(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dst[:n]
}

func fetchesOK(a *Agent, peer string) float64 {
	return testutil.ToFloat64(a.peerFetchM.fetches.WithLabelValues(peer, "ok"))
}

// An engine asks its node's agent for chains that only a peer holds: the
// onboard (with or without a Lookup first) is filled from the peer and
// returns the peer's bytes; a chain held here in part gets the rest; what
// was fetched is this node's from then on (no second fetch), and the
// peer's pins are given back.
func TestEngineOnboardIsFilledFromAPeer(t *testing.T) {
	acfg := agentConfig(t, agentOpts{dir: t.TempDir(), hostBlocks: 16, peer: true})
	// Long enough that a miss is still remembered when it is asked
	// about again, however loaded the machine.
	acfg.Peer.FetchTimeout = yamlconf.Duration(time.Minute)
	a := startAgent(t, acfg)
	b := startAgent(t, agentConfig(t, agentOpts{dir: t.TempDir(), hostBlocks: 16, peer: true}))
	if err := a.AddPeer("b", b.PeerAddr()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	onB, onA := dialAgent(t, b.SocketPath()), dialAgent(t, a.SocketPath())
	direct, looked, partial := makeChain(3, 100, 1), makeChain(3, 200, 100), makeChain(4, 300, 200)
	for _, ch := range []testChain{direct, looked, partial} {
		if err := onB.Offload(ctx, "m", ch.blocks); err != nil {
			t.Fatal(err)
		}
	}
	if err := onA.Offload(ctx, "m", partial.blocks[:1]); err != nil {
		t.Fatal(err)
	}

	// Onboard without a Lookup: the Acquire is filled.
	got := onboard(t, onA, "m", direct.hashes)
	if len(got) != len(direct.hashes) {
		t.Fatalf("onboard of a chain the peer holds: %d blocks, want %d", len(got), len(direct.hashes))
	}
	for i := range got {
		if !bytes.Equal(got[i], direct.blocks[i].Data) {
			t.Fatalf("block %d onboarded after a peer fill: not the peer's bytes", i)
		}
	}
	// Lookup first (vLLM's get_num_new_matched_tokens): it reports the
	// filled blocks as this node's host tier, and the onboard reads them.
	tiers, err := onA.Lookup(ctx, "m", looked.hashes)
	if err != nil || fmt.Sprint(tiers) != fmt.Sprint([]pb.Tier{pb.Tier_TIER_HOST, pb.Tier_TIER_HOST, pb.Tier_TIER_HOST}) {
		t.Fatalf("lookup of a chain the peer holds: tiers %v, err %v; want three host blocks", tiers, err)
	}
	for i, d := range onboard(t, onA, "m", looked.hashes) {
		if !bytes.Equal(d, looked.blocks[i].Data) {
			t.Fatalf("block %d of the looked-up chain: not the peer's bytes", i)
		}
	}
	// Held here in part: the rest comes from the peer.
	got = onboard(t, onA, "m", partial.hashes)
	if len(got) != len(partial.hashes) {
		t.Fatalf("onboard of a chain held here in part: %d blocks, want %d", len(got), len(partial.hashes))
	}
	for i := range got {
		if !bytes.Equal(got[i], partial.blocks[i].Data) {
			t.Fatalf("block %d of the partial chain: not the right bytes", i)
		}
	}
	if n := fetchesOK(a, "b"); n != 3 {
		t.Fatalf("%v peer fetches, want 3 (one per chain)", n)
	}
	// Fetched blocks are this node's now: no second fetch.
	onboard(t, onA, "m", direct.hashes)
	if n := fetchesOK(a, "b"); n != 3 {
		t.Fatalf("%v peer fetches after onboarding a fetched chain again, want still 3", n)
	}
	buf := make([]byte, testBlockBytes)
	for _, h := range direct.hashes {
		if tier, _, err := a.st.Get(store.Key{Namespace: "m", Hash: h}, buf); err != nil || tier != store.TierHost {
			t.Fatalf("block %d after the fill: tier %v, err %v; want a host block", h, tier, err)
		}
	}
	if r, acq := b.peerSrv.Pinned(); r != 0 || acq != 0 {
		t.Fatalf("the peer still holds %d reserved, %d acquired slots", r, acq)
	}
	// A chain no peer holds: the local prefix (none), no fetch, no error;
	// asked again (vLLM's scheduler does, every step), the peers are not
	// asked again.
	nowhere := makeChain(2, 900, 900).hashes
	rounds := a.fills.rounds.Load()
	if got := onboard(t, onA, "m", nowhere); len(got) != 0 {
		t.Fatalf("onboard of a chain nobody holds: %d blocks", len(got))
	}
	for range 3 {
		if tiers, err := onA.Lookup(ctx, "m", nowhere); err != nil || len(tiers) != 0 {
			t.Fatalf("lookup of a chain nobody holds: %v %v", tiers, err)
		}
	}
	if n := a.fills.rounds.Load() - rounds; n != 1 {
		t.Fatalf("%d rounds of peer lookups for one chain nobody holds, asked 4 times; want 1", n)
	}
	if n := testutil.ToFloat64(a.peerFetchM.fetches.WithLabelValues("b", "error")); n != 0 {
		t.Fatalf("%v failed peer fetches", n)
	}
}

// Many engines onboarding one chain at once start one fetch: the others
// wait for it and read what it stored.
func TestPeerFillsOneChainOnce(t *testing.T) {
	a := startAgent(t, agentConfig(t, agentOpts{dir: t.TempDir(), hostBlocks: 16, peer: true}))
	b := startAgent(t, agentConfig(t, agentOpts{dir: t.TempDir(), hostBlocks: 16, peer: true}))
	if err := a.AddPeer("b", b.PeerAddr()); err != nil {
		t.Fatal(err)
	}
	ch := makeChain(3, 400, 1)
	if err := dialAgent(t, b.SocketPath()).Offload(context.Background(), "m", ch.blocks); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([]int, 4)
	for i := range got {
		c := dialAgent(t, a.SocketPath())
		wg.Add(1)
		go func() {
			defer wg.Done()
			tiers, err := c.Lookup(context.Background(), "m", ch.hashes)
			if err != nil {
				t.Error(err)
			}
			got[i] = len(tiers)
		}()
	}
	wg.Wait()
	if n := fetchesOK(a, "b"); n != 1 {
		t.Fatalf("%v peer fetches for one chain looked up by 4 engines at once, want 1", n)
	}
	// A waiter may have seen the fetch end before the commit was visible
	// to its own Lookup only if the fill were not awaited: each must see
	// the whole chain.
	for i, n := range got {
		if n != len(ch.hashes) {
			t.Fatalf("engine %d: lookup found %d blocks, want %d", i, n, len(ch.hashes))
		}
	}
}

// A peer that never answers costs an engine's request at most
// kvagent.peer.fetch_timeout; the engine gets the local prefix.
func TestPeerFillIsBoundedInTime(t *testing.T) {
	cfg := agentConfig(t, agentOpts{dir: t.TempDir(), hostBlocks: 16, peer: true})
	cfg.Peer.FetchTimeout = yamlconf.Duration(200 * time.Millisecond)
	a := startAgent(t, cfg)
	// Accepts TCP connections and never says a word: no HTTP/2
	// handshake, no answer.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		mute.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	if err := a.AddPeer("mute", mute.Addr().String()); err != nil {
		t.Fatal(err)
	}
	onA := dialAgent(t, a.SocketPath())
	ch := makeChain(3, 500, 1)
	if err := onA.Offload(context.Background(), "m", ch.blocks[:1]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	tiers, err := onA.Lookup(ctx, "m", ch.hashes)
	// Generous: the bound is 200ms; what is checked is that the request
	// does not wait on the peer for as long as the engine would let it.
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("lookup waited %s on a mute peer", took)
	}
	if err != nil || len(tiers) != 1 {
		t.Fatalf("lookup with a mute peer: tiers %v, err %v; want the one local block", tiers, err)
	}
}

// A peer fill never brings back another namespace's chain: an engine of
// tenant-b asking for hashes the peer holds under tenant-a gets nothing,
// and with kvagent.peer.namespaces the peer fills only the namespaces its
// rule gives this agent's certificate.
func TestPeerFillKeepsNamespacesApart(t *testing.T) {
	t.Run("blocks are keyed by namespace", func(t *testing.T) {
		a := startAgent(t, agentConfig(t, agentOpts{dir: t.TempDir(), hostBlocks: 16, peer: true}))
		b := startAgent(t, agentConfig(t, agentOpts{dir: t.TempDir(), hostBlocks: 16, peer: true}))
		if err := a.AddPeer("b", b.PeerAddr()); err != nil {
			t.Fatal(err)
		}
		ch := makeChain(3, 600, 1)
		if err := dialAgentAs(t, b.SocketPath(), "tenant-a").Offload(context.Background(), "tenant-a", ch.blocks); err != nil {
			t.Fatal(err)
		}
		tenantB := dialAgentAs(t, a.SocketPath(), "tenant-b")
		if tiers, err := tenantB.Lookup(context.Background(), "tenant-b", ch.hashes); err != nil || len(tiers) != 0 {
			t.Fatalf("tenant-b's lookup of tenant-a's hashes: tiers %v, err %v; want none", tiers, err)
		}
		if got := onboard(t, tenantB, "tenant-b", ch.hashes); len(got) != 0 {
			t.Fatalf("tenant-b onboarded %d blocks of tenant-a's chain", len(got))
		}
		// Naming tenant-a's namespace is refused before any fill.
		_, err := tenantB.Lookup(context.Background(), "tenant-a", ch.hashes)
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("tenant-b's lookup in tenant-a's namespace: %v, want PERMISSION_DENIED", err)
		}
		buf := make([]byte, testBlockBytes)
		for _, ns := range []string{"tenant-a", "tenant-b"} {
			if _, _, err := a.st.Get(store.Key{Namespace: ns, Hash: ch.hashes[0]}, buf); err == nil {
				t.Fatalf("a holds a %s block it should never have fetched", ns)
			}
		}
		if n := fetchesOK(a, "b"); n != 0 {
			t.Fatalf("%v peer fetches, want none", n)
		}
	})
	t.Run("peer.namespaces rules", func(t *testing.T) {
		dir := t.TempDir()
		ca, err := tlstest.NewCA("kvagent peers")
		if err != nil {
			t.Fatal(err)
		}
		caFile, _ := ca.Write(dir, "ca")
		a := startAgent(t, peerTLSConfig(t, ca, caFile, "node-a", freeport.Pick(t)))
		bcfg := peerTLSConfig(t, ca, caFile, "node-b", freeport.Pick(t))
		bcfg.Peer.Namespaces = []agentconfig.PeerNamespaces{{Peer: "node-a", Allow: []string{"shared"}}}
		b := startAgent(t, bcfg)
		if err := a.AddPeer("b", b.PeerAddr()); err != nil {
			t.Fatal(err)
		}
		shared, secret := makeChain(2, 700, 1), makeChain(2, 800, 50)
		if err := dialAgentAs(t, b.SocketPath(), "shared").Offload(context.Background(), "shared", shared.blocks); err != nil {
			t.Fatal(err)
		}
		if err := dialAgentAs(t, b.SocketPath(), "secret").Offload(context.Background(), "secret", secret.blocks); err != nil {
			t.Fatal(err)
		}
		if got := onboard(t, dialAgentAs(t, a.SocketPath(), "secret"), "secret", secret.hashes); len(got) != 0 {
			t.Fatalf("a's engine onboarded %d blocks of a namespace b's rules keep from a", len(got))
		}
		got := onboard(t, dialAgentAs(t, a.SocketPath(), "shared"), "shared", shared.hashes)
		if len(got) != len(shared.hashes) || !bytes.Equal(got[0], shared.blocks[0].Data) {
			t.Fatalf("a's engine onboarded %d blocks of the namespace b's rules allow, want %d with the peer's bytes", len(got), len(shared.hashes))
		}
		if n := fetchesOK(a, "b"); n != 1 {
			t.Fatalf("%v peer fetches, want 1 (the allowed namespace)", n)
		}
	})
}
