package adminhttp

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/secretfiles"
)

func adminMux() http.Handler {
	mux := http.NewServeMux()
	for _, p := range []string{"/metrics", "/debug/decisions", "/status", "/healthz", "/readyz"} {
		mux.HandleFunc("GET "+p, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served "+p) })
	}
	return mux
}

func get(t *testing.T, h http.Handler, path, authorization string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func TestAdminAuthBearerToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	const token = "a3f1c9e07b2d4f6a8c0e1f2a3b4c5d6e"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	h := WithAdminAuth(adminMux(), "extproc.admin", "0.0.0.0:9003", secretfiles.AdminAuth{TokenFile: tokenFile}, slog.New(slog.NewJSONHandler(&logs, nil)))

	for _, path := range []string{"/metrics", "/debug/decisions", "/status"} {
		for _, auth := range []string{"", "Bearer", "Bearer ", "Basic " + token, "Bearer wrong-token-wrong-token-1", "Bearer " + token + "x", "Bearer " + token[:len(token)-1], token, "Bearer " + strings.Repeat("a", 10000)} {
			if code, body := get(t, h, path, auth); code != http.StatusUnauthorized || strings.Contains(body, "served") {
				t.Errorf("%s with Authorization %.40q: %d %q, want 401", path, auth, code, body)
			}
		}
		for _, auth := range []string{"Bearer " + token, "bearer " + token, "Bearer  " + token + " "} {
			if code, body := get(t, h, path, auth); code != http.StatusOK || body != "served "+path {
				t.Errorf("%s with the token (%q): %d %q, want 200", path, auth[:8], code, body)
			}
		}
	}
	// Probes stay open for the kubelet.
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := get(t, h, path, ""); code != http.StatusOK {
			t.Errorf("%s without a token: %d, want 200", path, code)
		}
	}
	if w := httptest.NewRecorder(); true {
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("401 without a WWW-Authenticate: Bearer challenge: %q", w.Header().Get("WWW-Authenticate"))
		}
	}

	// A rotated token applies to the next request.
	const rotated = "0f9e8d7c6b5a49382716f5e4d3c2b1a0"
	if err := os.WriteFile(tokenFile, []byte(rotated), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, h, "/metrics", "Bearer "+token); code != http.StatusUnauthorized {
		t.Errorf("old token after rotation: %d, want 401", code)
	}
	if code, _ := get(t, h, "/metrics", "Bearer "+rotated); code != http.StatusOK {
		t.Errorf("rotated token: %d, want 200", code)
	}
	// An unreadable token file fails closed.
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, h, "/metrics", "Bearer "+rotated); code != http.StatusServiceUnavailable {
		t.Errorf("token file gone: %d, want 503", code)
	}
	if strings.Contains(logs.String(), token) || strings.Contains(logs.String(), rotated) {
		t.Errorf("a token reached the log:\n%s", logs.String())
	}
}

func TestAdminAuthTokenFromEnv(t *testing.T) {
	const token = "env-token-0123456789abcdef"
	t.Setenv("KVGATE_TEST_ADMIN_TOKEN", token)
	h := WithAdminAuth(adminMux(), "indexer.listen", "10.0.0.5:9400", secretfiles.AdminAuth{TokenEnv: "KVGATE_TEST_ADMIN_TOKEN"}, slog.New(slog.DiscardHandler))
	if code, _ := get(t, h, "/status", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if code, _ := get(t, h, "/status", "Bearer "+token); code != http.StatusOK {
		t.Errorf("token: %d, want 200", code)
	}
}

// Without a token the handler is unchanged (config validation has refused
// a non-loopback address unless allow_unauthenticated), and an explicit
// opt-out is logged.
func TestAdminAuthOffWithoutToken(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	h := WithAdminAuth(adminMux(), "extproc.admin", "127.0.0.1:9003", secretfiles.AdminAuth{}, log)
	if code, _ := get(t, h, "/metrics", ""); code != http.StatusOK {
		t.Errorf("loopback without a token: %d, want 200", code)
	}
	if logs.Len() != 0 {
		t.Errorf("loopback: unexpected log %s", logs.String())
	}
	h = WithAdminAuth(adminMux(), "extproc.admin", ":9003", secretfiles.AdminAuth{AllowUnauthenticated: true}, log)
	if code, _ := get(t, h, "/metrics", ""); code != http.StatusOK {
		t.Errorf("allow_unauthenticated: %d, want 200", code)
	}
	if !strings.Contains(logs.String(), "without authentication") {
		t.Errorf("allow_unauthenticated not logged: %s", logs.String())
	}
}

func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"", "Bearer abc", "bearer  abc ", "Basic abc", "Bearer", "Bearer\tx", "Bearer " + strings.Repeat("z", 5000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok, ok := BearerToken(header)
		if !ok {
			if tok != "" {
				t.Fatalf("refused header returned token %q", tok)
			}
			return
		}
		if tok == "" || len(tok) > secretfiles.MaxAdminTokenBytes || tok != strings.TrimSpace(tok) {
			t.Fatalf("accepted token %q from %q", tok, header)
		}
		if !strings.HasSuffix(strings.TrimSpace(header), tok) {
			t.Fatalf("token %q is not the end of %q", tok, header)
		}
	})
}
