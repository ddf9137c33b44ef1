package extprocd

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/logbuffer"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/testkit/redistest"
	"github.com/kvgate/kvgate/lab/testkit/tlstest"
)

const (
	testAdminToken    = "admin-token-9d8c7b6a5f4e3d2c1b0a"
	testRedisPassword = "redis-pass-e4d3c2b1a0f9e8d7"
)

// TestExtprocMutualTLS runs `kvgate extproc` in process with mTLS on the
// ext_proc listener, a bearer token on the admin listener and the Redis
// index behind an ACL user whose password comes from a file. A client of
// the right CA gets a request routed; a client that trusts another CA, or
// presents a certificate of another CA, or none, fails at the handshake
// and no request reaches routing. Nothing the process logs while starting,
// serving and refusing contains the password or the token.
func TestExtprocMutualTLS(t *testing.T) {
	tokDir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	dir := t.TempDir()
	pki := tlstest.NewExtprocPKI(t, dir)
	caFile, otherFile, server, envoy, intruder := pki.CAFile, pki.OtherCAFile, pki.Server, pki.Envoy, pki.Intruder

	rs := redistest.Standalone(t)
	redistest.RequirePassword(t, rs, "kvgate", testRedisPassword, "other-admin-password-1234")
	ctx := context.Background()
	pwFile := filepath.Join(dir, "redis-password")
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(pwFile, []byte(testRedisPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(testAdminToken), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := config.Default()
	cfg.Models = []config.Model{{Name: "qwen3", BlockSize: 16, Tokenizer: tokDir}}
	cfg.Engines = []config.Engine{{Endpoint: "127.0.0.1:18001", Model: "qwen3", DPRanks: 1, Role: "both"}, {Endpoint: "127.0.0.1:18002", Model: "qwen3", DPRanks: 1, Role: "both"}}
	cfg.Extproc.HealthCheck.Disabled, cfg.Extproc.EngineMetrics.Disabled = true, true
	cfg.Extproc.Listen, cfg.Extproc.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Extproc.TLS = secretfiles.ServerTLS{CertFile: server.Cert, KeyFile: server.Key, ClientCAFile: caFile, RequireClientCert: true}
	cfg.Extproc.AdminAuth = secretfiles.AdminAuth{TokenFile: tokenFile}
	cfg.Index.Backend = "redis"
	cfg.Index.Redis.Addrs, cfg.Index.Redis.Username, cfg.Index.Redis.PasswordFile = []string{rs.Addr()}, "kvgate", pwFile
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	var logs logbuffer.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	runCtx, stop := context.WithCancel(ctx)
	type addrs struct{ grpc, admin net.Addr }
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(runCtx, cfg, Options{Drain: time.Second, Log: log,
			Listening: func(g, a net.Addr) { ready <- addrs{g, a} }})
	}()
	var a addrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("extproc: %v\n%s", err, logs.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("extproc not ready\n%s", logs.String())
	}
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("extproc: %v", err)
		}
	})

	admin := "http://" + a.admin.String()
	requests := func() float64 { return scrapeSum(t, admin+"/metrics", "kvgate_extproc_requests_total") }

	// The admin listener wants the token (probes excepted).
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "Bearer wrong-token-0123456789", http.StatusUnauthorized},
		{"/debug/decisions", "", http.StatusUnauthorized},
		{"/debug/decisions", "Bearer " + testAdminToken, http.StatusOK},
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
	} {
		if got := httpStatus(t, admin+tc.path, tc.auth); got != tc.want {
			t.Errorf("GET %s (Authorization %.12q): %d, want %d", tc.path, tc.auth, got, tc.want)
		}
	}

	clientTLS := func(c secretfiles.ClientTLS) credentials.TransportCredentials {
		t.Helper()
		c.Enabled = true
		tc, err := c.Load()
		if err != nil {
			t.Fatal(err)
		}
		return credentials.NewTLS(tc)
	}
	chat := &envoyharness.Request{Method: "POST", Path: "/v1/chat/completions",
		Headers: []envoyharness.Header{{Name: "content-type", Value: "application/json"}},
		Body:    []byte(`{"model":"qwen3","messages":[{"role":"user","content":"Which worker holds my prefix?"}],"max_tokens":4}`)}
	route := func(creds credentials.TransportCredentials) (*envoyharness.Exchange, error) {
		conn, err := grpc.NewClient(a.grpc.String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		h, err := envoyharness.New(conn, envoyharness.MustShipped("envoy-mtls.yaml").WithWorkers("127.0.0.1:18001", "127.0.0.1:18002"))
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		x, err := h.Start(rctx, chat)
		if err != nil {
			return nil, err
		}
		defer x.Close(rctx)
		return x, nil
	}

	before := requests()
	x, err := route(clientTLS(secretfiles.ClientTLS{CAFile: caFile, CertFile: envoy.Cert, KeyFile: envoy.Key}))
	if err != nil {
		t.Fatalf("right CA and client certificate: %v", err)
	}
	if x.Local != nil || x.Forward == nil || x.Forward.RouteErr != nil {
		t.Fatalf("right CA: not routed: local %+v forward %+v", x.Local, x.Forward)
	}
	if up := x.Forward.Upstream; up != cfg.Engines[0].Endpoint && up != cfg.Engines[1].Endpoint {
		t.Fatalf("routed to %q, not an engine", up)
	}
	routed := requests()
	if routed != before+1 {
		t.Fatalf("kvgate_extproc_requests_total went %v → %v for one routed request", before, routed)
	}

	for _, tc := range []struct {
		name    string
		creds   secretfiles.ClientTLS
		wantMsg string
	}{
		{"client trusts another CA", secretfiles.ClientTLS{CAFile: otherFile, CertFile: envoy.Cert, KeyFile: envoy.Key}, "certificate signed by unknown authority"},
		{"client certificate of another CA", secretfiles.ClientTLS{CAFile: caFile, CertFile: intruder.Cert, KeyFile: intruder.Key}, ""},
		{"no client certificate", secretfiles.ClientTLS{CAFile: caFile}, ""},
	} {
		x, err := route(clientTLS(tc.creds))
		if err == nil && x.Local == nil {
			t.Errorf("%s: the request got through (forward %+v)", tc.name, x.Forward)
			continue
		}
		if err == nil {
			err = x.Local.Err
		}
		t.Logf("%s: refused: %v", tc.name, err)
		// The client sees the refusal as the server's TLS alert, or, when
		// a TLS 1.3 client finished its half of the handshake before the
		// server refused its certificate, as the connection closing under
		// its first write; either way gRPC reports Unavailable, and the
		// routing counter below shows nothing got through.
		if err == nil || !strings.Contains(err.Error(), "code = Unavailable") {
			t.Errorf("%s: error %v, want the stream refused (Unavailable)", tc.name, err)
		}
		if tc.wantMsg != "" && !strings.Contains(err.Error(), tc.wantMsg) {
			t.Errorf("%s: error %v, want it to say %q", tc.name, err, tc.wantMsg)
		}
	}
	// Plain text to the TLS listener is refused as well.
	if x, err := route(insecure.NewCredentials()); err == nil && x.Local == nil {
		t.Error("plain-text client got a request through the TLS listener")
	}
	if after := requests(); after != routed {
		t.Errorf("refused clients reached routing: kvgate_extproc_requests_total %v → %v", routed, after)
	}

	// A rotated server certificate is presented to the next connection.
	next, err := pki.CA.Server("extproc-rotated", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := next.Write(dir, "extproc"); err != nil {
		t.Fatal(err)
	}
	envoyTLS, err := (&secretfiles.ClientTLS{Enabled: true, CAFile: caFile, CertFile: envoy.Cert, KeyFile: envoy.Key}).Load()
	if err != nil {
		t.Fatal(err)
	}
	envoyTLS.NextProtos = []string{"h2"}
	tc, err := tls.Dial("tcp", a.grpc.String(), envoyTLS)
	if err != nil {
		t.Fatalf("handshake after rotation: %v", err)
	}
	if cn := tc.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "extproc-rotated" {
		t.Errorf("after rotating the files the server presents %q, want extproc-rotated", cn)
	}
	tc.Close()
	if x, err := route(clientTLS(secretfiles.ClientTLS{CAFile: caFile, CertFile: envoy.Cert, KeyFile: envoy.Key})); err != nil || x.Forward == nil {
		t.Errorf("routing after rotation: %v", err)
	}

	out := logs.String()
	for _, secret := range []string{testRedisPassword, testAdminToken} {
		if strings.Contains(out, secret) {
			t.Errorf("the log contains a secret (%.6s…):\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "ext_proc listener serves TLS") {
		t.Errorf("no start-up log captured (the secret check would prove nothing):\n%s", out)
	}
}

func httpStatus(t *testing.T, url, auth string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// scrapeSum adds up every sample of one metric family from /metrics (the
// token sent).
func scrapeSum(t *testing.T, url, name string) float64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
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
