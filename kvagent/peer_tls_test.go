package kvagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/kvagent/agentconfig"
	"github.com/kvgate/kvgate/kvagent/store"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/tlstest"
)

// peerTLSConfig is agentConfig with kvagent.peer.tls: a certificate for
// 127.0.0.1 issued by issuer, peers verified against caFile. The transfer
// engine listens on a known port so the test can knock on it directly.
func peerTLSConfig(t *testing.T, issuer *tlstest.CA, caFile, name string, transferPort int) agentconfig.Config {
	t.Helper()
	dir := t.TempDir()
	leaf, err := issuer.Peer(name, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	f, err := leaf.Write(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	y := agentYAML(agentOpts{dir: dir, hostBlocks: 16, peer: true, admin: "127.0.0.1:0"})
	peer := fmt.Sprintf("  peer: {listen: 127.0.0.1:0, transfer_listen: 127.0.0.1:%d, streams: 2, tls: {cert_file: %s, key_file: %s, ca_file: %s}}\n",
		transferPort, f.Cert, f.Key, caFile)
	y = strings.Replace(y, "  peer: {listen: 127.0.0.1:0, transfer_listen: 127.0.0.1:0, streams: 2}\n", peer, 1)
	c, err := config.Parse(strings.NewReader(y))
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	return c.Kvagent
}

// Two agents of one CA fetch a chain over mutual TLS (control gRPC and
// transfer engine); an agent of another CA, or one without TLS, gets
// nothing and leaves no pins behind; the transfer listener refuses a
// client without a certificate.
func TestPeerFetchOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := tlstest.NewCA("kvagent peers")
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlstest.NewCA("someone else")
	if err != nil {
		t.Fatal(err)
	}
	caFile, _ := ca.Write(dir, "ca")
	otherFile, _ := other.Write(dir, "other")

	bTransfer := freeport.Pick(t)
	a := startAgent(t, peerTLSConfig(t, ca, caFile, "node-a", freeport.Pick(t)))
	b := startAgent(t, peerTLSConfig(t, ca, caFile, "node-b", bTransfer))
	intruder := startAgent(t, peerTLSConfig(t, other, otherFile, "intruder", freeport.Pick(t)))
	plain := startAgent(t, agentConfig(t, agentOpts{dir: t.TempDir(), hostBlocks: 16, peer: true}))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch := makeChain(3, 700, 1)
	if err := dialAgent(t, b.SocketPath()).Offload(ctx, "m", ch.blocks); err != nil {
		t.Fatal(err)
	}

	if err := a.AddPeer("b", b.PeerAddr()); err != nil {
		t.Fatal(err)
	}
	n, err := a.FetchFromPeer(ctx, "b", "m", ch.hashes)
	if err != nil || n != len(ch.hashes) {
		t.Fatalf("fetch over TLS: %d blocks, %v", n, err)
	}
	buf := make([]byte, testBlockBytes)
	for i, h := range ch.hashes {
		tier, _, err := a.st.Get(store.Key{Namespace: "m", Hash: h}, buf)
		if err != nil || tier != store.TierHost || !bytes.Equal(buf, ch.blocks[i].Data) {
			t.Fatalf("block %d after a TLS fetch: tier %v, err %v, bytes equal %v", h, tier, err, bytes.Equal(buf, ch.blocks[i].Data))
		}
	}

	for name, c := range map[string]*Agent{"another CA": intruder, "no TLS": plain} {
		if err := c.AddPeer("b", b.PeerAddr()); err != nil {
			t.Fatal(err)
		}
		fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := c.FetchFromPeer(fctx, "b", "m", ch.hashes)
		fcancel()
		if err == nil || n != 0 {
			t.Errorf("%s: fetch from a TLS peer gave %d blocks, err %v; want refused", name, n, err)
		}
		if _, _, err := c.st.Get(store.Key{Namespace: "m", Hash: ch.hashes[0]}, buf); err == nil {
			t.Errorf("%s: holds a block it should never have received", name)
		}
	}
	if r, acq := b.peerSrv.Pinned(); r != 0 || acq != 0 {
		t.Errorf("b still holds %d reserved, %d acquired slots", r, acq)
	}

	// The transfer engine itself is mutual TLS: a client trusting the CA
	// but presenting no certificate is refused.
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", bTransfer), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err == nil {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("transfer listener with no client certificate: %v, want a certificate error", err)
	}
}
