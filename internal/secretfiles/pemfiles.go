package secretfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// keyPairFiles is a certificate and its key on disk, re-read on every
// handshake so that a rotated pair (cert-manager, a Kubernetes Secret
// volume swapping its ..data symlink) is served without a restart. The
// files are small and handshakes are rare next to requests (Envoy and
// go-redis keep connections open), so re-reading costs microseconds where
// the handshake costs a millisecond; comparing the bytes (not mtimes) makes
// the reload exact whatever the filesystem's timestamp resolution.
//
// While a rotation is half done (new certificate, old key) the pair does
// not match: the previous pair keeps being served and the failure is
// logged once, until both files agree again.
type keyPairFiles struct {
	certPath, keyPath string

	mu              sync.Mutex
	certPEM, keyPEM []byte
	cert            *tls.Certificate
	lastErr         string
}

func newKeyPairFiles(certPath, keyPath string) (*keyPairFiles, error) {
	k := &keyPairFiles{certPath: certPath, keyPath: keyPath}
	if _, err := k.current(); err != nil {
		return nil, err
	}
	return k, nil
}

// current returns the pair as the files hold it now, or the last good one
// when they cannot be read or do not match.
func (k *keyPairFiles) current() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	certPEM, err := ReadBounded(k.certPath, MaxPEMBytes)
	var keyPEM []byte
	if err == nil {
		keyPEM, err = ReadBounded(k.keyPath, MaxPEMBytes)
	}
	if err == nil && k.cert != nil && bytes.Equal(certPEM, k.certPEM) && bytes.Equal(keyPEM, k.keyPEM) {
		return k.cert, nil
	}
	if err == nil {
		var c tls.Certificate
		// X509KeyPair's errors describe the mismatch or the PEM block
		// type, never the key material.
		if c, err = tls.X509KeyPair(certPEM, keyPEM); err == nil {
			k.certPEM, k.keyPEM, k.cert, k.lastErr = certPEM, keyPEM, &c, ""
			return k.cert, nil
		}
		err = fmt.Errorf("certificate %s with key %s: %w", k.certPath, k.keyPath, err)
	}
	if k.cert == nil {
		return nil, err
	}
	if msg := err.Error(); msg != k.lastErr {
		k.lastErr = msg
		slog.Default().Warn("tls: keeping the previous certificate", "cert_file", k.certPath, "key_file", k.keyPath, "err", err)
	}
	return k.cert, nil
}

// caFile is a PEM bundle of CA certificates, re-read like keyPairFiles.
type caFile struct {
	path string

	mu      sync.Mutex
	pem     []byte
	pool    *x509.CertPool
	lastErr string
}

func newCAFile(path string) (*caFile, error) {
	c := &caFile{path: path}
	if _, err := c.current(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *caFile) current() (*x509.CertPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := ReadBounded(c.path, MaxPEMBytes)
	if err == nil && c.pool != nil && bytes.Equal(b, c.pem) {
		return c.pool, nil
	}
	if err == nil {
		var pool *x509.CertPool
		if pool, err = parseCABundle(b); err == nil {
			c.pem, c.pool, c.lastErr = b, pool, ""
			return pool, nil
		}
		err = fmt.Errorf("CA bundle %s: %w", c.path, err)
	}
	if c.pool == nil {
		return nil, err
	}
	if msg := err.Error(); msg != c.lastErr {
		c.lastErr = msg
		slog.Default().Warn("tls: keeping the previous CA bundle", "file", c.path, "err", err)
	}
	return c.pool, nil
}

// parseCABundle accepts only CERTIFICATE blocks, all of which must parse:
// AppendCertsFromPEM would silently skip a corrupt one and leave a bundle
// that trusts less than the operator thinks.
func parseCABundle(b []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is %q, want CERTIFICATE", n+1, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return pool, nil
}
