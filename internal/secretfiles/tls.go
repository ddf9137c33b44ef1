package secretfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// ServerTLS configures TLS (and optionally client-certificate auth) on a
// listener. TLS is on when cert_file is set.
//
//	tls:
//	  cert_file: /etc/kvgate/tls/tls.crt      # PEM chain, leaf first
//	  key_file: /etc/kvgate/tls/tls.key
//	  client_ca_file: /etc/kvgate/tls/ca.crt  # verify client certificates against these CAs
//	  require_client_cert: true               # mTLS: refuse clients without one
//	  min_version: "1.2"                      # "1.2" (default) or "1.3"
//
// The files are re-read on every handshake: a rotated certificate, key or
// CA bundle takes effect for the next connection, without a restart.
type ServerTLS struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
	// RequireClientCert refuses clients that present no certificate; with
	// client_ca_file but without it, a certificate is verified if given.
	RequireClientCert bool   `yaml:"require_client_cert"`
	MinVersion        string `yaml:"min_version"`
}

// ClientTLS configures TLS on outgoing connections (Redis, kvagent peers).
//
//	tls:
//	  enabled: true
//	  ca_file: /etc/kvgate/redis-tls/ca.crt   # empty = the system roots
//	  cert_file: /etc/kvgate/redis-tls/tls.crt  # client certificate (mTLS), optional
//	  key_file: /etc/kvgate/redis-tls/tls.key
//	  server_name: redis.internal             # empty = the host dialled
//	  min_version: "1.2"
//
// The client certificate is re-read on every handshake; the CA bundle is
// read at start (append a new CA to the bundle and restart before
// switching servers to certificates it signed).
type ClientTLS struct {
	Enabled    bool   `yaml:"enabled"`
	CAFile     string `yaml:"ca_file"`
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"`
	MinVersion string `yaml:"min_version"`
}

// PeerTLS is mutual TLS between equals (kvagent peer transfers): each side
// presents cert_file and requires the other's certificate to be signed by
// a CA in ca_file. One *tls.Config serves both directions, as the kvagent
// TCP transfer engine takes it.
//
//	tls: {cert_file: /etc/kvgate/peer/tls.crt, key_file: /etc/kvgate/peer/tls.key, ca_file: /etc/kvgate/peer/ca.crt}
type PeerTLS struct {
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	CAFile     string `yaml:"ca_file"`
	MinVersion string `yaml:"min_version"`
}

// Enabled reports whether the listener serves TLS.
func (x *ServerTLS) Enabled() bool { return x.CertFile != "" }

// Enabled reports whether peers talk TLS.
func (x *PeerTLS) Enabled() bool { return x.CertFile != "" }

// tlsVersion maps min_version to crypto/tls; TLS 1.0 and 1.1 are not
// offered (RFC 8996 deprecates them; HTTP/2, hence gRPC, needs 1.2).
func tlsVersion(path, v string) (uint16, error) {
	switch v {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("%s.min_version: %q is not one of \"1.2\", \"1.3\"", path, v)
}

// Validate reports the first invalid value; path is the section's key path.
// It loads the files, so a wrong path or a key that does not match its
// certificate stops the process at start with the key named.
func (x *ServerTLS) Validate(path string) error {
	if !x.Enabled() {
		switch {
		case x.KeyFile != "":
			return fmt.Errorf("%s.key_file: set without %s.cert_file", path, path)
		case x.ClientCAFile != "":
			return fmt.Errorf("%s.client_ca_file: set without %s.cert_file (client certificates need TLS)", path, path)
		case x.RequireClientCert:
			return fmt.Errorf("%s.require_client_cert: set without %s.cert_file", path, path)
		case x.MinVersion != "":
			return fmt.Errorf("%s.min_version: set without %s.cert_file", path, path)
		}
		return nil
	}
	_, err := x.load(path)
	return err
}

// Load returns the listener's TLS configuration, or nil when TLS is off.
// Every handshake gets the certificate and client CAs as the files hold
// them then.
func (x *ServerTLS) Load() (*tls.Config, error) {
	if !x.Enabled() {
		return nil, nil
	}
	return x.load("tls")
}

func (x *ServerTLS) load(path string) (*tls.Config, error) {
	minV, err := tlsVersion(path, x.MinVersion)
	if err != nil {
		return nil, err
	}
	if x.KeyFile == "" {
		return nil, fmt.Errorf("%s.key_file: required with %s.cert_file", path, path)
	}
	if x.RequireClientCert && x.ClientCAFile == "" {
		return nil, fmt.Errorf("%s.require_client_cert: needs %s.client_ca_file (the CAs client certificates are verified against)", path, path)
	}
	pair, err := newKeyPairFiles(x.CertFile, x.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s.cert_file: %w", path, err)
	}
	var cas *caFile
	if x.ClientCAFile != "" {
		if cas, err = newCAFile(x.ClientCAFile); err != nil {
			return nil, fmt.Errorf("%s.client_ca_file: %w", path, err)
		}
	}
	auth := tls.NoClientCert
	switch {
	case x.RequireClientCert:
		auth = tls.RequireAndVerifyClientCert
	case cas != nil:
		auth = tls.VerifyClientCertIfGiven
	}
	return serverConfig(minV, pair, cas, auth), nil
}

// serverConfig builds a config whose GetConfigForClient hands each
// handshake the current certificate and client CA pool: ClientCAs is a
// field, not a callback, so reloading it takes a fresh config per
// handshake (grpc-go's credentials.NewTLS wraps GetConfigForClient to keep
// its ALPN "h2" and minimum version on the returned config).
func serverConfig(minV uint16, pair *keyPairFiles, cas *caFile, auth tls.ClientAuthType) *tls.Config {
	getCert := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return pair.current() }
	base := &tls.Config{MinVersion: minV, GetCertificate: getCert, ClientAuth: auth}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.GetConfigForClient = nil
		if cas != nil {
			pool, err := cas.current()
			if err != nil {
				return nil, err
			}
			c.ClientCAs = pool
		}
		return c, nil
	}
	return base
}

// Validate reports the first invalid value (loading the files, as
// ServerTLS.Validate does); path is the section's key path.
func (x *ClientTLS) Validate(path string) error {
	if !x.Enabled {
		for _, kv := range [][2]string{{"ca_file", x.CAFile}, {"cert_file", x.CertFile}, {"key_file", x.KeyFile}, {"server_name", x.ServerName}, {"min_version", x.MinVersion}} {
			if kv[1] != "" {
				return fmt.Errorf("%s.%s: set but %s.enabled is false", path, kv[0], path)
			}
		}
		return nil
	}
	_, err := x.load(path)
	return err
}

// Load returns the client TLS configuration, or nil when TLS is off.
func (x *ClientTLS) Load() (*tls.Config, error) {
	if !x.Enabled {
		return nil, nil
	}
	return x.load("tls")
}

func (x *ClientTLS) load(path string) (*tls.Config, error) {
	minV, err := tlsVersion(path, x.MinVersion)
	if err != nil {
		return nil, err
	}
	c := &tls.Config{MinVersion: minV, ServerName: x.ServerName}
	if x.CAFile != "" {
		ca, err := newCAFile(x.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.ca_file: %w", path, err)
		}
		c.RootCAs, _ = ca.current()
	}
	switch {
	case x.CertFile != "" && x.KeyFile == "":
		return nil, fmt.Errorf("%s.key_file: required with %s.cert_file", path, path)
	case x.CertFile == "" && x.KeyFile != "":
		return nil, fmt.Errorf("%s.cert_file: required with %s.key_file", path, path)
	case x.CertFile != "":
		pair, err := newKeyPairFiles(x.CertFile, x.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s.cert_file: %w", path, err)
		}
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.current() }
	}
	return c, nil
}

// Validate checks the section, loading the files; path is the section's
// key path (kvagent.peer.tls).
func (x *PeerTLS) Validate(path string) error {
	if !x.Enabled() {
		if x.KeyFile != "" || x.CAFile != "" || x.MinVersion != "" {
			return fmt.Errorf("%s.cert_file: required when key_file, ca_file or min_version is set", path)
		}
		return nil
	}
	_, err := x.load(path)
	return err
}

// Load returns one configuration for both directions of a peer link, or
// nil when TLS is off: as a server it presents cert_file and requires a
// client certificate signed by ca_file (both re-read per handshake); as a
// client it presents the same certificate and verifies the server against
// ca_file (read at start) and the dialled host name or IP.
func (x *PeerTLS) Load() (*tls.Config, error) {
	if !x.Enabled() {
		return nil, nil
	}
	return x.load("tls")
}

func (x *PeerTLS) load(path string) (*tls.Config, error) {
	minV, err := tlsVersion(path, x.MinVersion)
	if err != nil {
		return nil, err
	}
	switch {
	case x.KeyFile == "":
		return nil, fmt.Errorf("%s.key_file: required with %s.cert_file", path, path)
	case x.CAFile == "":
		return nil, errors.New(path + ".ca_file: required: peers verify each other against it (mutual TLS)")
	}
	pair, err := newKeyPairFiles(x.CertFile, x.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s.cert_file: %w", path, err)
	}
	cas, err := newCAFile(x.CAFile)
	if err != nil {
		return nil, fmt.Errorf("%s.ca_file: %w", path, err)
	}
	c := serverConfig(minV, pair, cas, tls.RequireAndVerifyClientCert)
	var roots *x509.CertPool
	roots, _ = cas.current()
	c.RootCAs = roots
	c.ClientCAs = roots // read by whoever inspects the outer config (the transfer engine checks it is set)
	c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.current() }
	return c, nil
}
