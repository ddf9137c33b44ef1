package secretfiles

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/tlstest"
)

// pki is a CA with a server and a client certificate, and an unrelated CA
// with its own client certificate, all written to dir.
type pki struct {
	dir                      string
	ca, otherCA              *tlstest.CA
	caFile, otherCAFile      string
	server, client, intruder tlstest.Files
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	var err error
	if p.ca, err = tlstest.NewCA("kvgate test CA"); err != nil {
		t.Fatal(err)
	}
	if p.otherCA, err = tlstest.NewCA("unrelated CA"); err != nil {
		t.Fatal(err)
	}
	p.caFile = mustWriteCA(t, p.ca, p.dir, "ca")
	p.otherCAFile = mustWriteCA(t, p.otherCA, p.dir, "other-ca")
	p.server = mustIssue(t, p.ca.Server, p.dir, "server", "127.0.0.1", "localhost")
	p.client = mustIssue(t, func(cn string, _ ...string) (*tlstest.Leaf, error) { return p.ca.Client(cn) }, p.dir, "client")
	p.intruder = mustIssue(t, func(cn string, _ ...string) (*tlstest.Leaf, error) { return p.otherCA.Client(cn) }, p.dir, "intruder")
	return p
}

func mustWriteCA(t *testing.T, ca *tlstest.CA, dir, name string) string {
	t.Helper()
	f, err := ca.Write(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustIssue(t *testing.T, issue func(string, ...string) (*tlstest.Leaf, error), dir, name string, hosts ...string) tlstest.Files {
	t.Helper()
	l, err := issue(name, hosts...)
	if err != nil {
		t.Fatal(err)
	}
	f, err := l.Write(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// handshake runs one connection between a server and a client config over
// loopback and returns both sides' errors and the certificate the client
// saw. The client writes a byte and reads the echo, so that a client
// certificate refused after a TLS 1.3 client handshake completes still
// surfaces on the client.
func handshake(t *testing.T, server, client *tls.Config) (serverCN string, serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvDone := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvDone <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			srvDone <- err
			return
		}
		b := make([]byte, 1)
		if _, err := io.ReadFull(tc, b); err != nil {
			srvDone <- err
			return
		}
		_, err = tc.Write(b)
		srvDone <- err
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	cc := client.Clone()
	if cc.ServerName == "" {
		cc.ServerName = "127.0.0.1"
	}
	tc := tls.Client(raw, cc)
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	clientErr = tc.Handshake()
	if clientErr == nil {
		serverCN = tc.ConnectionState().PeerCertificates[0].Subject.CommonName + "/" + tc.ConnectionState().PeerCertificates[0].SerialNumber.String()
		if _, err := tc.Write([]byte{'x'}); err != nil {
			clientErr = err
		} else if _, err := io.ReadFull(tc, make([]byte, 1)); err != nil {
			clientErr = err
		}
	}
	raw.Close()
	return serverCN, <-srvDone, clientErr
}

func mustLoad(t *testing.T, load func() (*tls.Config, error)) *tls.Config {
	t.Helper()
	c, err := load()
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		t.Fatal("Load returned nil with TLS configured")
	}
	return c
}

func TestServerTLSMutualHandshake(t *testing.T) {
	p := newPKI(t)
	srv := ServerTLS{CertFile: p.server.Cert, KeyFile: p.server.Key, ClientCAFile: p.caFile, RequireClientCert: true}
	serverCfg := mustLoad(t, srv.Load)
	right := mustLoad(t, (&ClientTLS{Enabled: true, CAFile: p.caFile, CertFile: p.client.Cert, KeyFile: p.client.Key}).Load)
	if _, se, ce := handshake(t, serverCfg, right); se != nil || ce != nil {
		t.Fatalf("right CA and client certificate: server %v, client %v", se, ce)
	}

	// The client trusts an unrelated CA: it refuses the server.
	wrongRoots := mustLoad(t, (&ClientTLS{Enabled: true, CAFile: p.otherCAFile, CertFile: p.client.Cert, KeyFile: p.client.Key}).Load)
	_, _, ce := handshake(t, serverCfg, wrongRoots)
	var verr *tls.CertificateVerificationError
	if !errors.As(ce, &verr) {
		t.Fatalf("client trusting another CA: got %v, want a certificate verification error", ce)
	}

	// The client's certificate is signed by an unrelated CA: the server refuses it.
	intruder := mustLoad(t, (&ClientTLS{Enabled: true, CAFile: p.caFile, CertFile: p.intruder.Cert, KeyFile: p.intruder.Key}).Load)
	_, se, ce := handshake(t, serverCfg, intruder)
	if se == nil || ce == nil || !strings.Contains(se.Error(), "certificate") {
		t.Fatalf("client certificate from another CA: server %v, client %v; want both to fail on the certificate", se, ce)
	}

	// No client certificate at all, with require_client_cert.
	anonymous := mustLoad(t, (&ClientTLS{Enabled: true, CAFile: p.caFile}).Load)
	if _, se, ce := handshake(t, serverCfg, anonymous); se == nil || ce == nil {
		t.Fatalf("no client certificate: server %v, client %v; want both to fail", se, ce)
	}

	// Without require_client_cert a client may come without a certificate,
	// but one it presents is still verified.
	optional := mustLoad(t, (&ServerTLS{CertFile: p.server.Cert, KeyFile: p.server.Key, ClientCAFile: p.caFile}).Load)
	if _, se, ce := handshake(t, optional, anonymous); se != nil || ce != nil {
		t.Fatalf("optional client cert, none given: server %v, client %v", se, ce)
	}
	if _, se, _ := handshake(t, optional, intruder); se == nil {
		t.Fatal("optional client cert: one from another CA was accepted")
	}
}

func TestServerTLSMinVersion(t *testing.T) {
	p := newPKI(t)
	serverCfg := mustLoad(t, (&ServerTLS{CertFile: p.server.Cert, KeyFile: p.server.Key, MinVersion: "1.3"}).Load)
	client := mustLoad(t, (&ClientTLS{Enabled: true, CAFile: p.caFile}).Load)
	client.MaxVersion = tls.VersionTLS12
	if _, se, ce := handshake(t, serverCfg, client); se == nil || ce == nil {
		t.Fatalf("TLS 1.2 client against min_version 1.3: server %v, client %v; want both to fail", se, ce)
	}
	client.MaxVersion = 0
	if _, se, ce := handshake(t, serverCfg, client); se != nil || ce != nil {
		t.Fatalf("TLS 1.3: server %v, client %v", se, ce)
	}
}

// A rotated certificate is served from the next handshake on, without a
// new Load; a half-done rotation (certificate replaced, key not yet)
// keeps the previous pair.
func TestServerTLSReloadsRotatedFiles(t *testing.T) {
	p := newPKI(t)
	serverCfg := mustLoad(t, (&ServerTLS{CertFile: p.server.Cert, KeyFile: p.server.Key, ClientCAFile: p.caFile, RequireClientCert: true}).Load)
	client := mustLoad(t, (&ClientTLS{Enabled: true, CAFile: p.caFile, CertFile: p.client.Cert, KeyFile: p.client.Key}).Load)
	first, _, _ := handshake(t, serverCfg, client)

	second, err := p.ca.Server("server-2", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Write(p.dir, "server"); err != nil {
		t.Fatal(err)
	}
	got, se, ce := handshake(t, serverCfg, client)
	if se != nil || ce != nil {
		t.Fatalf("after rotation: server %v, client %v", se, ce)
	}
	if want := "server-2/" + second.Cert.SerialNumber.String(); got != want {
		t.Fatalf("after rotation the server presented %s, want %s (before: %s)", got, want, first)
	}

	third, err := p.ca.Server("server-3", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tlstest.WriteFileAtomic(p.server.Cert, third.CertPEM); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := handshake(t, serverCfg, client); got != "server-2/"+second.Cert.SerialNumber.String() {
		t.Fatalf("certificate rotated without its key: server presented %s, want the previous pair", got)
	}
	if err := tlstest.WriteFileAtomic(p.server.Key, third.KeyPEM); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := handshake(t, serverCfg, client); got != "server-3/"+third.Cert.SerialNumber.String() {
		t.Fatalf("after the key followed: server presented %s, want server-3", got)
	}

	// Rotating the client CA bundle: the old CA's clients are refused,
	// the new CA's accepted.
	otherPEM, err := os.ReadFile(p.otherCAFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := tlstest.WriteFileAtomic(p.caFile, otherPEM); err != nil {
		t.Fatal(err)
	}
	if _, se, _ := handshake(t, serverCfg, client); se == nil {
		t.Fatal("client CA rotated away: the old CA's client was still accepted")
	}
	// The server certificate is still from the first CA; this client trusts
	// it through a bundle holding both.
	both := filepath.Join(p.dir, "both.crt")
	if err := os.WriteFile(both, append(append([]byte{}, p.ca.CertPEM...), otherPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	intruder := mustLoad(t, (&ClientTLS{Enabled: true, CAFile: both, CertFile: p.intruder.Cert, KeyFile: p.intruder.Key}).Load)
	if _, se, ce := handshake(t, serverCfg, intruder); se != nil || ce != nil {
		t.Fatalf("client of the new client CA: server %v, client %v", se, ce)
	}
}

func TestClientTLSReloadsClientCertificate(t *testing.T) {
	p := newPKI(t)
	serverCfg := mustLoad(t, (&ServerTLS{CertFile: p.server.Cert, KeyFile: p.server.Key, ClientCAFile: p.caFile, RequireClientCert: true}).Load)
	// The client starts with the intruder's pair at the client's paths.
	dir := t.TempDir()
	bad, err := p.otherCA.Client("client")
	if err != nil {
		t.Fatal(err)
	}
	files, err := bad.Write(dir, "client")
	if err != nil {
		t.Fatal(err)
	}
	client := mustLoad(t, (&ClientTLS{Enabled: true, CAFile: p.caFile, CertFile: files.Cert, KeyFile: files.Key}).Load)
	if _, se, _ := handshake(t, serverCfg, client); se == nil {
		t.Fatal("client certificate from another CA accepted")
	}
	good, err := p.ca.Client("client")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.Write(dir, "client"); err != nil {
		t.Fatal(err)
	}
	if _, se, ce := handshake(t, serverCfg, client); se != nil || ce != nil {
		t.Fatalf("after the client certificate was rotated: server %v, client %v", se, ce)
	}
}

// One PeerTLS config serves both ends of a kvagent peer link; a peer of
// another CA is refused in either direction.
func TestPeerTLS(t *testing.T) {
	p := newPKI(t)
	a := mustIssue(t, p.ca.Peer, p.dir, "peer-a", "127.0.0.1")
	b := mustIssue(t, p.ca.Peer, p.dir, "peer-b", "127.0.0.1")
	x := mustIssue(t, p.otherCA.Peer, p.dir, "peer-x", "127.0.0.1")
	cfgA := mustLoad(t, (&PeerTLS{CertFile: a.Cert, KeyFile: a.Key, CAFile: p.caFile}).Load)
	cfgB := mustLoad(t, (&PeerTLS{CertFile: b.Cert, KeyFile: b.Key, CAFile: p.caFile}).Load)
	cfgX := mustLoad(t, (&PeerTLS{CertFile: x.Cert, KeyFile: x.Key, CAFile: p.otherCAFile}).Load)
	if _, se, ce := handshake(t, cfgA, cfgB); se != nil || ce != nil {
		t.Fatalf("a serves b: server %v, client %v", se, ce)
	}
	if _, se, ce := handshake(t, cfgB, cfgA); se != nil || ce != nil {
		t.Fatalf("b serves a: server %v, client %v", se, ce)
	}
	if _, _, ce := handshake(t, cfgA, cfgX); ce == nil {
		t.Fatal("peer of another CA accepted peer a's certificate")
	}
	if _, se, _ := handshake(t, cfgA, cfgX.Clone()); se == nil {
		t.Fatal("peer a accepted a client certificate of another CA")
	}
	if cfgA.Certificates != nil || cfgA.GetCertificate == nil || cfgA.ClientCAs == nil {
		t.Fatal("peer config: want GetCertificate (reloading) and ClientCAs set, as the transfer engine checks")
	}
}

// Validation errors name the key; they never quote a key or password.
func TestTLSConfigErrors(t *testing.T) {
	p := newPKI(t)
	keyPEM, err := os.ReadFile(p.server.Key)
	if err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(p.dir, "garbage.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		tls  ServerTLS
		want string
	}{
		{"key without cert", ServerTLS{KeyFile: p.server.Key}, "extproc.tls.key_file: set without extproc.tls.cert_file"},
		{"cert without key", ServerTLS{CertFile: p.server.Cert}, "extproc.tls.key_file: required"},
		{"missing file", ServerTLS{CertFile: filepath.Join(p.dir, "nope.crt"), KeyFile: p.server.Key}, "extproc.tls.cert_file: open "},
		{"mismatched key", ServerTLS{CertFile: p.server.Cert, KeyFile: p.client.Key}, "extproc.tls.cert_file: certificate"},
		{"swapped cert and key", ServerTLS{CertFile: p.server.Key, KeyFile: p.server.Cert}, "extproc.tls.cert_file:"},
		{"bad CA", ServerTLS{CertFile: p.server.Cert, KeyFile: p.server.Key, ClientCAFile: notPEM}, "extproc.tls.client_ca_file: CA bundle"},
		{"key as CA", ServerTLS{CertFile: p.server.Cert, KeyFile: p.server.Key, ClientCAFile: p.server.Key}, "want CERTIFICATE"},
		{"require without CA", ServerTLS{CertFile: p.server.Cert, KeyFile: p.server.Key, RequireClientCert: true}, "extproc.tls.require_client_cert: needs extproc.tls.client_ca_file"},
		{"min version", ServerTLS{CertFile: p.server.Cert, KeyFile: p.server.Key, MinVersion: "1.1"}, `extproc.tls.min_version: "1.1"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.tls.Validate("extproc.tls")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), string(keyPEM[40:80])) {
				t.Fatalf("error quotes key material: %v", err)
			}
		})
	}
	valid := ServerTLS{CertFile: p.server.Cert, KeyFile: p.server.Key, ClientCAFile: p.caFile, RequireClientCert: true, MinVersion: "1.3"}
	if err := valid.Validate("extproc.tls"); err != nil {
		t.Fatalf("valid TLS section refused: %v", err)
	}
}

// FuzzParseCABundle: any bytes in a CA file give a pool or an error that
// names the block, never a panic; a bundle it accepts holds only
// certificates that parse.
func FuzzParseCABundle(f *testing.F) {
	ca, err := tlstest.NewCA("fuzz CA")
	if err != nil {
		f.Fatal(err)
	}
	leaf, err := ca.Client("fuzz client")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ca.CertPEM)
	f.Add(append(append([]byte{}, ca.CertPEM...), leaf.CertPEM...))
	f.Add(leaf.KeyPEM)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("not pem"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		pool, err := parseCABundle(b)
		if (pool == nil) == (err == nil) {
			t.Fatalf("pool %v with error %v", pool, err)
		}
	})
}
