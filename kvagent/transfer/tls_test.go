package transfer

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// testCA is a certificate authority made up for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue makes a certificate for 127.0.0.1 usable as server and client.
func (ca *testCA) issue(t testing.TB, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func mutualTLS(cert tls.Certificate, trust *x509.CertPool) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: trust, ClientCAs: trust, MinVersion: tls.VersionTLS13}
}

func TestTCPMutualTLS(t *testing.T) {
	ca := newTestCA(t, "kvgate test CA")
	other := newTestCA(t, "someone else's CA")
	good := func(name string) *tls.Config { return mutualTLS(ca.issue(t, name), ca.pool) }

	// tlsPair starts a target with targetTLS and an initiator with
	// initTLS, and reads 256 KiB; it returns the error and what landed.
	tlsPair := func(t *testing.T, initTLS, targetTLS *tls.Config) (error, []byte, *tcpEndpoint, *tcpEndpoint) {
		t.Helper()
		a, _ := newTestAgent(t, TCPConfig{Name: "a", Streams: 2, TLS: initTLS})
		b, _ := newTestAgent(t, TCPConfig{Name: "b", TLS: targetTLS})
		rh := mustRegister(t, b, Region{Kind: DRAM, Addr: pattern(20, 256<<10)})
		local := make([]byte, 256<<10)
		lh := mustRegister(t, a, Region{Kind: DRAM, Addr: local})
		load(t, a, b)
		err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: 256 << 10}}, "b", []Desc{{Region: rh, Len: 256 << 10}}))
		return err, local, a, b
	}

	t.Run("both trusted", func(t *testing.T) {
		err, local, _, _ := tlsPair(t, good("a"), good("b"))
		if err != nil {
			t.Fatalf("transfer over mutual TLS: %v", err)
		}
		if !bytes.Equal(local, pattern(20, 256<<10)) {
			t.Fatal("bytes differ")
		}
	})
	t.Run("ReadAccess sees the verified client certificate", func(t *testing.T) {
		var got []string
		a, _ := newTestAgent(t, TCPConfig{Name: "a", TLS: good("node-a")})
		b, _ := newTestAgent(t, TCPConfig{Name: "b", TLS: good("b"), ReadAccess: func(r ReadRequest) (func(), error) {
			if r.PeerCert != nil {
				got = append(got, r.PeerCert.Subject.CommonName)
			}
			return nil, nil
		}})
		rh := mustRegister(t, b, Region{Kind: DRAM, Addr: make([]byte, 4096)})
		lh := mustRegister(t, a, Region{Kind: DRAM, Addr: make([]byte, 4096)})
		load(t, a, b)
		if err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: 4096}}, "b", []Desc{{Region: rh, Len: 4096}})); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != "node-a" {
			t.Fatalf("ReadAccess saw client certificates %q, want [node-a]", got)
		}
	})
	failsClosed := func(t *testing.T, err error, local []byte, a *tcpEndpoint, want string) {
		t.Helper()
		if err == nil {
			t.Fatal("transfer succeeded")
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want one mentioning %q", err, want)
		}
		if !bytes.Equal(local, make([]byte, len(local))) {
			t.Fatal("bytes landed despite the refused handshake")
		}
		if got := counter(t, a.metrics.errors, reasonTLS); got != 1 {
			t.Fatalf("errors{reason=tls} = %v, want 1 (error: %v)", got, err)
		}
	}
	t.Run("target certificate from an unknown CA", func(t *testing.T) {
		init := mutualTLS(ca.issue(t, "a"), ca.pool)
		target := mutualTLS(other.issue(t, "b"), ca.pool)
		err, local, a, _ := tlsPair(t, init, target)
		failsClosed(t, err, local, a, "certificate signed by unknown authority")
	})
	t.Run("initiator certificate from an unknown CA", func(t *testing.T) {
		init := mutualTLS(other.issue(t, "a"), ca.pool)
		err, local, a, b := tlsPair(t, init, good("b"))
		failsClosed(t, err, local, a, "tls")
		// The target counts the refusal after it sent the alert.
		poll.True(t, "the target to count the refused handshake", time.Minute, func() bool { return counter(t, b.metrics.errors, reasonRejected) >= 1 })
	})
	t.Run("initiator without a certificate", func(t *testing.T) {
		a, _ := newTestAgent(t, TCPConfig{Name: "a", TLS: &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{}, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, nil }}})
		b, _ := newTestAgent(t, TCPConfig{Name: "b", TLS: good("b")})
		rh := mustRegister(t, b, Region{Kind: DRAM, Addr: make([]byte, 4096)})
		lh := mustRegister(t, a, Region{Kind: DRAM, Addr: make([]byte, 4096)})
		load(t, a, b)
		if err := await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: 4096}}, "b", []Desc{{Region: rh, Len: 4096}})); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("transfer without a client certificate: %v, want a certificate error", err)
		}
	})
	t.Run("plaintext initiator", func(t *testing.T) {
		err, local, _, _ := tlsPair(t, nil, good("b"))
		if err == nil {
			t.Fatal("plaintext transfer to a TLS target succeeded")
		}
		if !bytes.Equal(local, make([]byte, len(local))) {
			t.Fatal("bytes landed over plaintext")
		}
	})
	t.Run("config without a certificate", func(t *testing.T) {
		if _, err := NewTCP(TCPConfig{Name: "a", TLS: &tls.Config{RootCAs: ca.pool}}); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("NewTCP with a TLS config without a certificate: %v", err)
		}
	})
}
