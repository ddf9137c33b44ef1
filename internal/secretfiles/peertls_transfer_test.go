package secretfiles_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/kvagent/transfer"
	"github.com/kvgate/kvgate/lab/testkit/tlstest"
)

// secretfiles.PeerTLS drives the kvagent TCP transfer engine as it is: agents
// of one CA move bytes over mutual TLS; an agent of another CA gets none.
func TestPeerTLSWithTransferEngine(t *testing.T) {
	dir := t.TempDir()
	ca, err := tlstest.NewCA("kvagent peers CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlstest.NewCA("unrelated CA")
	if err != nil {
		t.Fatal(err)
	}
	caFile, _ := ca.Write(dir, "ca")
	otherFile, _ := other.Write(dir, "other")
	peer := func(issuer *tlstest.CA, caPath, name string) *tls.Config {
		t.Helper()
		l, err := issuer.Peer(name, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		f, err := l.Write(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := (&secretfiles.PeerTLS{CertFile: f.Cert, KeyFile: f.Key, CAFile: caPath}).Load()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	agent := func(name string, c *tls.Config) transfer.Endpoint {
		t.Helper()
		a, err := transfer.NewTCP(transfer.TCPConfig{Name: name, TLS: c})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a
	}
	read := func(from, to transfer.Endpoint) ([]byte, error) {
		t.Helper()
		want := bytes.Repeat([]byte("kvgate-block-"), 5000)
		rh, err := to.RegisterMem(transfer.Region{Kind: transfer.DRAM, Addr: want})
		if err != nil {
			t.Fatal(err)
		}
		local := make([]byte, len(want))
		lh, err := from.RegisterMem(transfer.Region{Kind: transfer.DRAM, Addr: local})
		if err != nil {
			t.Fatal(err)
		}
		md, err := to.LocalMetadata()
		if err != nil {
			t.Fatal(err)
		}
		remote, err := from.LoadRemoteMetadata(md)
		if err != nil {
			t.Fatal(err)
		}
		x, err := from.CreateXfer(transfer.Read, []transfer.Desc{{Region: lh, Len: int64(len(local))}}, remote, []transfer.Desc{{Region: rh, Len: int64(len(want))}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := from.Post(x); err != nil {
			return local, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard, not a speed check
		defer cancel()
		return local, transfer.Wait(ctx, from, x)
	}
	a := agent("a", peer(ca, caFile, "peer-a"))
	b := agent("b", peer(ca, caFile, "peer-b"))
	x := agent("x", peer(other, otherFile, "peer-x"))

	got, err := read(a, b)
	if err != nil {
		t.Fatalf("a reads from b over mutual TLS: %v", err)
	}
	if !bytes.Equal(got, bytes.Repeat([]byte("kvgate-block-"), 5000)) {
		t.Fatal("bytes differ")
	}
	for _, tc := range []struct {
		name     string
		from, to transfer.Endpoint
	}{{"x reads from b", x, b}, {"a reads from x", a, x}} {
		got, err := read(tc.from, tc.to)
		if err == nil {
			t.Errorf("%s: succeeded across CAs", tc.name)
		}
		if !bytes.Equal(got, make([]byte, len(got))) {
			t.Errorf("%s: bytes landed despite the refused handshake", tc.name)
		}
	}
}
