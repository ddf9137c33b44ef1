package config

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/kv/indexconfig"
	"github.com/kvgate/kvgate/lab/testkit/tlstest"
)

// The TLS and secret sections as config composes them: parsed from YAML,
// validated under their key paths. How they load and reload is tested in
// internal/secretfiles.

// writePKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate to dir.
func writePKI(t *testing.T, dir string) (caFile string, server, client tlstest.Files) {
	t.Helper()
	ca, err := tlstest.NewCA("kvgate test CA")
	if err != nil {
		t.Fatal(err)
	}
	if caFile, err = ca.Write(dir, "ca"); err != nil {
		t.Fatal(err)
	}
	s, err := ca.Server("server", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.Client("client")
	if err != nil {
		t.Fatal(err)
	}
	if server, err = s.Write(dir, "server"); err != nil {
		t.Fatal(err)
	}
	if client, err = c.Write(dir, "client"); err != nil {
		t.Fatal(err)
	}
	return caFile, server, client
}

// extproc.tls is validated under its key path when the whole file is.
func TestExtprocTLSErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	caFile, server, client := writePKI(t, dir)
	c := Default()
	c.Extproc.TLS = secretfiles.ServerTLS{CertFile: server.Cert, KeyFile: client.Key}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "extproc.tls.cert_file: certificate") {
		t.Fatalf("mismatched key: %v, want extproc.tls.cert_file named", err)
	}
	c.Extproc.TLS = secretfiles.ServerTLS{CertFile: server.Cert, KeyFile: server.Key, ClientCAFile: caFile, RequireClientCert: true, MinVersion: "1.3"}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid TLS section refused: %v", err)
	}
}

func TestTLSSectionsFromYAML(t *testing.T) {
	dir := t.TempDir()
	caFile, server, client := writePKI(t, dir)
	pw := filepath.Join(dir, "redis-password")
	if err := os.WriteFile(pw, []byte("s3cret-redis-pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := `
index:
  backend: redis
  redis:
    addrs: ["127.0.0.1:6379"]
    username: kvgate
    password_file: ` + pw + `
    tls: {enabled: true, ca_file: ` + caFile + `, cert_file: ` + client.Cert + `, key_file: ` + client.Key + `, server_name: redis.internal, min_version: "1.3"}
extproc:
  tls: {cert_file: ` + server.Cert + `, key_file: ` + server.Key + `, client_ca_file: ` + caFile + `, require_client_cert: true}
`
	c, err := Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := secretfiles.Password(c.Index.Redis.PasswordFile, c.Index.Redis.PasswordEnv); err != nil || got != "s3cret-redis-pass" {
		t.Fatalf("password: %q %v (want the file's content less its newline)", got, err)
	}
	cfg, err := c.Index.Redis.TLS.Load()
	if err != nil || cfg.ServerName != "redis.internal" || cfg.MinVersion != tls.VersionTLS13 || cfg.RootCAs == nil || cfg.GetClientCertificate == nil {
		t.Fatalf("redis TLS: %+v %v", cfg, err)
	}
	if !c.Extproc.TLS.Enabled() || !c.Extproc.TLS.RequireClientCert {
		t.Fatalf("extproc.tls: %+v", c.Extproc.TLS)
	}
}

func TestRedisAuthErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KVGATE_TEST_REDIS_PW", "hunter2-hunter2")
	cases := []struct {
		redis indexconfig.RedisIndex
		want  string
	}{
		{indexconfig.RedisIndex{PasswordEnv: "KVGATE_TEST_REDIS_PW", PasswordFile: empty}, "index.redis: set password_env or password_file, not both"},
		{indexconfig.RedisIndex{PasswordFile: empty}, "index.redis.password_file: " + empty + " is empty"},
		{indexconfig.RedisIndex{PasswordFile: filepath.Join(dir, "missing")}, "index.redis.password_file: open "},
		{indexconfig.RedisIndex{Username: "kv gate", PasswordEnv: "KVGATE_TEST_REDIS_PW"}, "index.redis.username: byte 2"},
		{indexconfig.RedisIndex{Username: "kvgate"}, "index.redis.username: an ACL user needs a password"},
		{indexconfig.RedisIndex{TLS: secretfiles.ClientTLS{CAFile: empty}}, "index.redis.tls.ca_file: set but index.redis.tls.enabled is false"},
		{indexconfig.RedisIndex{TLS: secretfiles.ClientTLS{Enabled: true, CAFile: empty}}, "index.redis.tls.ca_file: CA bundle"},
		{indexconfig.RedisIndex{TLS: secretfiles.ClientTLS{Enabled: true, KeyFile: empty}}, "index.redis.tls.cert_file: required with index.redis.tls.key_file"},
	}
	for _, tc := range cases {
		c := Default()
		c.Index.Backend = "redis"
		tc.redis.Addrs = []string{"127.0.0.1:6379"}
		tc.redis.WorkerTTL = yamlconf.Duration(time.Second)
		c.Index.Redis = tc.redis
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.redis, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error quotes the password: %v", err)
		}
	}
}
