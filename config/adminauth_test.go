package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/secretfiles"
)

// A non-loopback admin address without a token stops the start, and the
// error says how to opt out; loopback, a token or the explicit opt-out
// pass.
func TestAdminExposureRefusedWithoutAuth(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	const token = "0123456789abcdef0123456789abcdef"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Default()
	c.Extproc.Admin = ":9003"
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `extproc.admin: ":9003" is not a loopback address`) || !strings.Contains(err.Error(), "extproc.admin_auth.allow_unauthenticated: true") {
		t.Fatalf("exposed admin without a token: got %v", err)
	}
	c.Extproc.AdminAuth = secretfiles.AdminAuth{AllowUnauthenticated: true}
	if err := c.Validate(); err != nil {
		t.Fatalf("allow_unauthenticated: %v", err)
	}
	c.Extproc.AdminAuth = secretfiles.AdminAuth{TokenFile: tokenFile}
	if err := c.Validate(); err != nil {
		t.Fatalf("token_file: %v", err)
	}
	if got, err := c.Extproc.AdminAuth.Token(); err != nil || got != token {
		t.Fatalf("Token() = %q, %v; want the file's token without its newline", got, err)
	}

	c = Default()
	c.Indexer.Listen = "0.0.0.0:9400"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "indexer.listen: ") || !strings.Contains(err.Error(), "indexer.admin_auth.token_file") {
		t.Fatalf("exposed indexer without a token: got %v", err)
	}
	t.Setenv("KVGATE_TEST_ADMIN_TOKEN", token)
	c.Indexer.AdminAuth = secretfiles.AdminAuth{TokenEnv: "KVGATE_TEST_ADMIN_TOKEN"}
	if err := c.Validate(); err != nil {
		t.Fatalf("token_env: %v", err)
	}
}

func TestAdminAuthErrorsNameTheKeyNotTheToken(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("tooshort-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	spaced := filepath.Join(dir, "spaced")
	if err := os.WriteFile(spaced, []byte("abcdefgh secret-with-space"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("0123456789abcdef-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KVGATE_TEST_SHORT", "short-secret")
	cases := []struct {
		auth secretfiles.AdminAuth
		want string
	}{
		{secretfiles.AdminAuth{TokenFile: short}, "extproc.admin_auth.token_file: token is 15 bytes, want at least 16"},
		{secretfiles.AdminAuth{TokenFile: spaced}, "extproc.admin_auth.token_file: token byte 8 is a space"},
		{secretfiles.AdminAuth{TokenFile: filepath.Join(dir, "missing")}, "extproc.admin_auth.token_file: open "},
		{secretfiles.AdminAuth{TokenEnv: "KVGATE_TEST_SHORT"}, "extproc.admin_auth.token_env: token is 12 bytes"},
		{secretfiles.AdminAuth{TokenEnv: "KVGATE_TEST_UNSET_VARIABLE"}, "extproc.admin_auth.token_env: environment variable KVGATE_TEST_UNSET_VARIABLE is not set"},
		{secretfiles.AdminAuth{TokenFile: good, TokenEnv: "KVGATE_TEST_SHORT"}, "extproc.admin_auth: set token_file or token_env, not both"},
		{secretfiles.AdminAuth{TokenFile: good, AllowUnauthenticated: true}, "extproc.admin_auth.allow_unauthenticated: true contradicts"},
	}
	for _, tc := range cases {
		c := Default()
		c.Extproc.AdminAuth = tc.auth
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.auth, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("error quotes the token: %v", err)
		}
	}
}
