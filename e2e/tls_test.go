package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/procs"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/testkit/redistest"
	"github.com/kvgate/kvgate/lab/testkit/tlstest"
)

// Transport security with real processes: `kvgate indexer` and `kvgate
// extproc` on the Redis index behind an ACL user (password from the
// environment), admin listeners on every interface behind bearer tokens,
// and the ext_proc listener on mutual TLS. Envoy's side, with the right
// client certificate, gets a request routed; one with a certificate of an
// unrelated CA is refused at the handshake. The processes' whole output
// never contains the password or the tokens.
func TestTransportSecurityProcesses(t *testing.T) {
	const (
		redisPassword = "e2e-redis-pass-0a1b2c3d4e5f6071"
		extprocToken  = "e2e-extproc-token-8f7e6d5c4b3a2910"
		indexerToken  = "e2e-indexer-token-1029384756abcdef"
	)
	tokDir, err := modelfiles.Model(modelName)
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	dir := t.TempDir()
	pki := tlstest.NewExtprocPKI(t, dir)
	caFile, server, envoy, intruder := pki.CAFile, pki.Server, pki.Envoy, pki.Intruder

	rs := redistest.Standalone(t)
	redistest.RequirePassword(t, rs, "kvgate", redisPassword, "e2e-admin-only-password")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The processes inherit the test's environment.
	t.Setenv("KVGATE_E2E_REDIS_PASSWORD", redisPassword)
	t.Setenv("KVGATE_E2E_INDEXER_TOKEN", indexerToken)
	tokenFile := filepath.Join(dir, "extproc-token")
	if err := os.WriteFile(tokenFile, []byte(extprocToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	extproc := map[string]any{
		"health_check":   map[string]any{"disabled": true},
		"engine_metrics": map[string]any{"disabled": true},
		"tls":            map[string]any{"cert_file": server.Cert, "key_file": server.Key, "client_ca_file": caFile, "require_client_cert": true},
		"admin_auth":     map[string]any{"token_file": tokenFile},
	}
	indexer := map[string]any{"admin_auth": map[string]any{"token_env": "KVGATE_E2E_INDEXER_TOKEN"}}
	cfg := map[string]any{
		"models":  []map[string]any{{"name": modelName, "block_size": blockSize, "tokenizer": tokDir}},
		"engines": []map[string]any{{"endpoint": "127.0.0.1:18101", "model": modelName}, {"endpoint": "127.0.0.1:18102", "model": modelName}},
		"index": map[string]any{"backend": "redis", "redis": map[string]any{
			"addrs": []string{rs.Addr()}, "username": "kvgate", "password_env": "KVGATE_E2E_REDIS_PASSWORD", "prefix": "e2e-tls:"}},
		"extproc": extproc,
		"indexer": indexer,
	}
	cfgPath := filepath.Join(dir, "kvgate.yaml")

	// Non-loopback admin addresses: the listeners bind every interface
	// (the tests reach them on loopback); the tokens guard them.
	var ext, idx *procs.Proc
	var listen, adminPort, indexerPort string
	for attempt := 1; ; attempt++ {
		l, err1 := freeport.Addr()
		ap, err2 := freeport.Port()
		ip, err3 := freeport.Port()
		if err := firstErr(err1, err2, err3); err != nil {
			t.Fatal(err)
		}
		listen, adminPort, indexerPort = l, fmt.Sprint(ap), fmt.Sprint(ip)
		extproc["listen"], extproc["admin"], indexer["listen"] = listen, "0.0.0.0:"+adminPort, "0.0.0.0:"+indexerPort
		writeConfig(t, cfgPath, cfg)
		idx = procs.Start(t, "indexer", kvgateBin, "indexer", "--config", cfgPath)
		ext = procs.Start(t, "extproc", kvgateBin, "extproc", "--config", cfgPath, "--drain", "1s")
		err1 = idx.WaitHTTP(ctx, "http://127.0.0.1:"+indexerPort+"/readyz")
		err2 = ext.WaitHTTP(ctx, "http://127.0.0.1:"+adminPort+"/readyz")
		if err := firstErr(err1, err2); err == nil {
			break
		} else if attempt == startAttempts || ctx.Err() != nil {
			t.Fatal(err)
		}
		idx.Stop()
		ext.Stop()
	}

	for _, tc := range []struct {
		url, token string
		want       int
	}{
		{"http://127.0.0.1:" + adminPort + "/metrics", "", http.StatusUnauthorized},
		{"http://127.0.0.1:" + adminPort + "/metrics", indexerToken, http.StatusUnauthorized},
		{"http://127.0.0.1:" + adminPort + "/metrics", extprocToken, http.StatusOK},
		{"http://127.0.0.1:" + adminPort + "/debug/decisions", "", http.StatusUnauthorized},
		{"http://127.0.0.1:" + indexerPort + "/status", "", http.StatusUnauthorized},
		{"http://127.0.0.1:" + indexerPort + "/status", extprocToken, http.StatusUnauthorized},
		{"http://127.0.0.1:" + indexerPort + "/status", indexerToken, http.StatusOK},
		{"http://127.0.0.1:" + indexerPort + "/healthz", "", http.StatusOK},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tc.url, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s (token %.12q): %d, want %d", tc.url, tc.token, resp.StatusCode, tc.want)
		}
	}

	route := func(c secretfiles.ClientTLS) (*envoyharness.Exchange, error) {
		c.Enabled = true
		tc, err := c.Load()
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(listen, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		h, err := envoyharness.New(conn, envoyharness.MustShipped("envoy-mtls.yaml").WithWorkers("127.0.0.1:18101", "127.0.0.1:18102"))
		if err != nil {
			return nil, err
		}
		x, err := h.Start(ctx, &envoyharness.Request{Method: "POST", Path: "/v1/chat/completions",
			Headers: []envoyharness.Header{{Name: "content-type", Value: "application/json"}},
			Body:    []byte(`{"model":"qwen3","messages":[{"role":"user","content":"hello over mTLS"}],"max_tokens":4}`)})
		if err != nil {
			return nil, err
		}
		defer x.Close(ctx)
		return x, nil
	}
	x, err := route(secretfiles.ClientTLS{CAFile: caFile, CertFile: envoy.Cert, KeyFile: envoy.Key})
	if err != nil || x.Forward == nil || x.Forward.RouteErr != nil {
		t.Fatalf("mTLS with the right certificates: err %v, exchange %+v", err, x)
	}
	if up := x.Forward.Upstream; up != "127.0.0.1:18101" && up != "127.0.0.1:18102" {
		t.Fatalf("routed to %q", up)
	}
	routed := requestsTotal(t, ctx, "http://127.0.0.1:"+adminPort+"/metrics", extprocToken)
	// The refusal reaches the client as the server's TLS alert or, when a
	// TLS 1.3 client finished its half of the handshake first, as the
	// connection closing under its first write: Unavailable either way.
	if _, err := route(secretfiles.ClientTLS{CAFile: caFile, CertFile: intruder.Cert, KeyFile: intruder.Key}); err == nil || !strings.Contains(err.Error(), "code = Unavailable") {
		t.Fatalf("client certificate of another CA: %v, want the stream refused", err)
	}
	if _, err := route(secretfiles.ClientTLS{CAFile: filepath.Join(dir, "other.crt"), CertFile: envoy.Cert, KeyFile: envoy.Key}); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("client trusting another CA: %v, want a verification failure", err)
	}
	if after := requestsTotal(t, ctx, "http://127.0.0.1:"+adminPort+"/metrics", extprocToken); routed != 1 || after != routed {
		t.Fatalf("kvgate_extproc_requests_total: %v after the routed request, %v after the refused ones; want 1 and 1", routed, after)
	}

	ext.Stop()
	idx.Stop()
	for _, p := range []*procs.Proc{ext, idx} {
		out := p.Output()
		if !strings.Contains(out, "kvgate") {
			t.Fatalf("%s: no output captured, the secret check would prove nothing", p.Name)
		}
		for _, secret := range []string{redisPassword, extprocToken, indexerToken} {
			if strings.Contains(out, secret) {
				t.Errorf("%s output contains a secret (%.8s…):\n%s", p.Name, secret, out)
			}
		}
	}
}

// A non-loopback admin address without a token stops the process at
// start, with the key and the opt-out named.
func TestExposedAdminWithoutAuthRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ cmd, yaml, key string }{
		{"extproc", "extproc:\n  admin: 0.0.0.0:0\n", "extproc.admin"},
		{"indexer", "indexer:\n  listen: \":0\"\n", "indexer.listen"},
	} {
		path := filepath.Join(dir, tc.cmd+".yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		p := procs.Start(t, tc.cmd, kvgateBin, tc.cmd, "--config", path)
		select {
		case <-p.Exited():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s with an exposed admin address and no token kept running", tc.cmd)
		}
		out := p.Output()
		if !strings.Contains(out, tc.key+": ") || !strings.Contains(out, "allow_unauthenticated: true") {
			t.Errorf("%s: output %q, want an error naming %s and allow_unauthenticated", tc.cmd, out, tc.key)
		}
	}
}

// requestsTotal sums kvgate_extproc_requests_total from /metrics.
func requestsTotal(t *testing.T, ctx context.Context, url, token string) float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %v", url, resp.Status, err)
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "kvgate_extproc_requests_total") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}
