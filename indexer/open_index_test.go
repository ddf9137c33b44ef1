package indexer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/kv/indexconfig"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/redistest"
	"github.com/kvgate/kvgate/lab/testkit/tlstest"
)

const (
	aclUser     = "kvgate-indexer"
	aclPassword = "acl-pass-7f3e9b2c41d8a6e5"
	adminPass   = "admin-pass-5c1d9e8f7a6b4c3d"
)

// aclServer starts redis-server, adds an ACL user for kvgate and gives the
// default user a password, so that only authenticated clients get in.
func aclServer(t *testing.T, extra ...string) *redistest.Server {
	t.Helper()
	var s *redistest.Server
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		args := extra
		if len(extra) > 0 {
			// The TLS port is picked here (redistest picks the plain one);
			// another process may take it first, then we retry.
			args = append([]string{"--tls-port", fmt.Sprint(freeport.Pick(t))}, extra...)
		}
		if s, err = redistest.StartStandalone(context.Background(), redistest.Options{ExtraArgs: args}); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	redistest.RequirePassword(t, s, aclUser, aclPassword, adminPass)
	return s
}

func tlsPort(t *testing.T, s *redistest.Server) string {
	t.Helper()
	c := s.NewClient()
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "AUTH", "default", adminPass).Err(); err != nil {
		t.Fatal(err)
	}
	v, err := c.ConfigGet(ctx, "tls-port").Result()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + v["tls-port"]
}

func redisIndexConfig(addr string) indexconfig.Index {
	return indexconfig.Index{Backend: "redis", Redis: indexconfig.RedisIndex{
		Addrs: []string{addr}, Prefix: "tls-test:", BlockTTL: yamlconf.Duration(time.Hour), WorkerTTL: yamlconf.Duration(30 * time.Second)}}
}

// roundTrip stores a block and matches it back through the kvindex.
func roundTrip(t *testing.T, idx kvindex.Index) {
	t.Helper()
	ctx := context.Background()
	w := kvfleet.WorkerID{Endpoint: "10.0.0.1:8000"}
	if err := idx.Store(ctx, w, kvfleet.TierDevice, kvindex.ChainBlocks([]uint64{11, 22})); err != nil {
		t.Fatalf("store: %v", err)
	}
	m, err := kvindex.MatchMap(ctx, idx, []uint64{11, 22, 33})
	if err != nil {
		t.Fatalf("match: %v", err)
	}
	if got := m[w][kvfleet.TierDevice]; got != 2 {
		t.Fatalf("matched depth %d on the device tier, want 2 (%v)", got, m)
	}
}

func TestOpenIndexRedisACLUser(t *testing.T) {
	s := aclServer(t)
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, []byte(aclPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	c := redisIndexConfig(s.Addr())
	c.Redis.Username, c.Redis.PasswordFile = aclUser, pwFile
	idx, err := OpenIndex(ctx, c)
	if err != nil {
		t.Fatalf("ACL user with password_file: %v", err)
	}
	roundTrip(t, idx)
	idx.Close()

	t.Setenv("KVGATE_TEST_REDIS_PASSWORD", aclPassword)
	c = redisIndexConfig(s.Addr())
	c.Redis.Username, c.Redis.PasswordEnv = aclUser, "KVGATE_TEST_REDIS_PASSWORD"
	idx, err = OpenIndex(ctx, c)
	if err != nil {
		t.Fatalf("ACL user with password_env: %v", err)
	}
	roundTrip(t, idx)
	idx.Close()

	// Refusals: no credentials, a wrong password, a wrong user. The error
	// says why and never quotes a password.
	wrong := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrong, []byte("wrong-password-0000"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		user, password string
		want           string
	}{
		{"anonymous", "", "", "NOAUTH"},
		{"wrong password", aclUser, wrong, "WRONGPASS"},
		{"wrong user", "someone-else", pwFile, "WRONGPASS"},
	} {
		c := redisIndexConfig(s.Addr())
		c.Redis.Username, c.Redis.PasswordFile = tc.user, tc.password
		idx, err := OpenIndex(ctx, c)
		if err == nil {
			idx.Close()
			t.Errorf("%s: opened", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), aclPassword) || strings.Contains(err.Error(), "wrong-password") {
			t.Errorf("%s: error %v, want %s and no password", tc.name, err, tc.want)
		}
	}

	// A rotated password file is what the next connection authenticates with.
	opts, err := redisOptions(indexconfig.RedisIndex{Username: aclUser, PasswordFile: pwFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pwFile, []byte("rotated-password-123"), 0o600); err != nil {
		t.Fatal(err)
	}
	if u, p, err := opts.CredentialsProviderContext(ctx); err != nil || u != aclUser || p != "rotated-password-123" {
		t.Fatalf("credentials after rotation: %q %v", u, err)
	}
}

// Debian's redis-server is built with TLS: the index connects over TLS
// (with the ACL user) and refuses a server its CA did not sign, and the
// server refuses a client without a certificate of its CA.
func TestOpenIndexRedisTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := tlstest.NewCA("redis test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlstest.NewCA("unrelated CA")
	if err != nil {
		t.Fatal(err)
	}
	caFile, _ := ca.Write(dir, "ca")
	otherFile, _ := other.Write(dir, "other")
	srvLeaf, err := ca.Server("redis", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := srvLeaf.Write(dir, "redis")
	cliLeaf, err := ca.Client("kvgate")
	if err != nil {
		t.Fatal(err)
	}
	cli, _ := cliLeaf.Write(dir, "client")
	badLeaf, err := other.Client("intruder")
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := badLeaf.Write(dir, "intruder")
	s := aclServer(t, "--tls-cert-file", srv.Cert, "--tls-key-file", srv.Key, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "yes")
	addr := tlsPort(t, s)
	t.Setenv("KVGATE_TEST_REDIS_PASSWORD", aclPassword)
	ctx := context.Background()

	open := func(tls secretfiles.ClientTLS) (kvindex.Index, error) {
		c := redisIndexConfig(addr)
		c.Redis.Username, c.Redis.PasswordEnv, c.Redis.TLS = aclUser, "KVGATE_TEST_REDIS_PASSWORD", tls
		return OpenIndex(ctx, c)
	}
	idx, err := open(secretfiles.ClientTLS{Enabled: true, CAFile: caFile, CertFile: cli.Cert, KeyFile: cli.Key})
	if err != nil {
		t.Fatalf("TLS with the right CA and client certificate: %v", err)
	}
	roundTrip(t, idx)
	idx.Close()

	for _, tc := range []struct {
		name string
		tls  secretfiles.ClientTLS
		want string
	}{
		{"client trusts another CA", secretfiles.ClientTLS{Enabled: true, CAFile: otherFile, CertFile: cli.Cert, KeyFile: cli.Key}, "certificate"},
		{"client certificate of another CA", secretfiles.ClientTLS{Enabled: true, CAFile: caFile, CertFile: bad.Cert, KeyFile: bad.Key}, ""},
		{"no client certificate", secretfiles.ClientTLS{Enabled: true, CAFile: caFile}, ""},
		{"server name mismatch", secretfiles.ClientTLS{Enabled: true, CAFile: caFile, CertFile: cli.Cert, KeyFile: cli.Key, ServerName: "redis.example"}, "redis.example"},
	} {
		idx, err := open(tc.tls)
		if err == nil {
			idx.Close()
			t.Errorf("%s: opened", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
	// Plain text to the TLS port fails too (no silent downgrade).
	if idx, err := open(secretfiles.ClientTLS{}); err == nil {
		idx.Close()
		t.Error("plain-text client opened the TLS port")
	}
}
