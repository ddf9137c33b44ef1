package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/logbuffer"

	"github.com/kvgate/kvgate/daemon"
	"github.com/kvgate/kvgate/daemon/kvagentd"
	"github.com/kvgate/kvgate/daemon/plannerd"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

const listenerTestToken = "c0ffee00c0ffee00c0ffee00c0ffee00"

// writeToken writes the admin token file the configs below point at.
func writeToken(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(p, []byte(listenerTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// httpGet returns the status and body of GET url with an optional
// Authorization header.
func httpGet(t *testing.T, url, authorization string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// The kvagent's admin listener (served by `kvgate kvagent`) wants the
// token on /metrics and leaves the probes open; beyond loopback without a
// token the command refuses to start.
func TestKvagentAdminListenerNeedsTheToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := writeToken(t, dir)
	section := func(admin, auth string) string {
		return fmt.Sprintf("kvagent:\n  socket: %s\n  shm_path: %s\n  block_bytes: 4096\n  host_blocks: 8\n  admin: %s\n%s",
			filepath.Join(dir, "kvagent.sock"), filepath.Join(dir, "arena"), admin, auth)
	}

	exposed := filepath.Join(dir, "exposed.yaml")
	os.WriteFile(exposed, []byte(section("0.0.0.0:9500", "")), 0o600)
	var out, errb bytes.Buffer
	if code := dispatch([]string{"kvagent", "--config", exposed}, nil, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), `kvagent.admin: "0.0.0.0:9500" is not a loopback address and kvagent.admin_auth has no token`) {
		t.Fatalf("exposed admin without a token: exit %d, stderr %q", code, errb.String())
	}

	served := filepath.Join(dir, "served.yaml")
	os.WriteFile(served, []byte(section("127.0.0.1:0", "  admin_auth: {token_file: "+tokenFile+"}\n")), 0o600)
	admin := startDaemon(t, kvagentd.Spec, []string{"--config", served}, `admin on (http://\S+)`)
	for _, auth := range []string{"", "Bearer wrong-token-wrong-token-00"} {
		if code, _ := httpGet(t, admin+"/metrics", auth); code != http.StatusUnauthorized {
			t.Errorf("/metrics with %q: %d, want 401", auth, code)
		}
	}
	if code, body := httpGet(t, admin+"/metrics", "Bearer "+listenerTestToken); code != http.StatusOK || !strings.Contains(body, "kvgate_kvagent_") {
		t.Errorf("/metrics with the token: %d, kvgate_kvagent_ metrics present: %v", code, strings.Contains(body, "kvgate_kvagent_"))
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := httpGet(t, admin+p, ""); code != http.StatusOK {
			t.Errorf("%s without a token: %d %q, want 200 (kubelet probes send no token)", p, code, body)
		}
	}
}

// The planner's admin listener wants the token on /metrics; /healthz
// stays open (503 before a first decision, never 401).
func TestPlannerAdminListenerNeedsTheToken(t *testing.T) {
	eps := startPlannerEngines(t, 1)
	dir := t.TempDir()
	tokenFile := writeToken(t, dir)
	profile := filepath.Join(dir, "p.json")
	os.WriteFile(profile, []byte(`{"prefill":[{"input_tokens":100,"concurrency":1,"ttft_seconds":0.05,"tokens_per_second":5000}],
"decode":[{"context_tokens":100,"batch":4,"itl_seconds":0.01,"tokens_per_second":400}]}`), 0o644)
	cfgPath := filepath.Join(dir, "planner.yaml")
	os.WriteFile(cfgPath, []byte(`
planner:
  interval: 200ms
  profile: `+profile+`
  admin: 127.0.0.1:0
  admin_auth: {token_file: `+tokenFile+`}
  pools: [{name: aggregated, min: 1, max: 2, endpoints: ["`+eps[0]+`"]}]
`), 0o600)
	admin := startDaemon(t, plannerd.Spec, []string{"--config", cfgPath, "--advisory"}, `admin on (http://\S+)`)
	for _, auth := range []string{"", "Basic " + listenerTestToken, "Bearer " + listenerTestToken + "0"} {
		if code, _ := httpGet(t, admin+"/metrics", auth); code != http.StatusUnauthorized {
			t.Errorf("/metrics with %q: %d, want 401", auth, code)
		}
	}
	if code, body := httpGet(t, admin+"/metrics", "Bearer "+listenerTestToken); code != http.StatusOK || !strings.Contains(body, "kvgate_planner_") {
		t.Errorf("/metrics with the token: %d, kvgate_planner_ metrics present: %v", code, strings.Contains(body, "kvgate_planner_"))
	}
	if code, _ := httpGet(t, admin+"/healthz", ""); code == http.StatusUnauthorized {
		t.Errorf("/healthz without a token: 401, want it open")
	}

	// --admin beyond loopback is held to the same rule as the file.
	var out, errb bytes.Buffer
	noToken := filepath.Join(dir, "no-token.yaml")
	os.WriteFile(noToken, []byte("planner: {profile: "+profile+"}\n"), 0o600)
	if code := dispatch([]string{"planner", "--config", noToken, "--engines", eps[0], "--admin", "0.0.0.0:9410"}, nil, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), `--admin "0.0.0.0:9410" is not a loopback address`) {
		t.Errorf("--admin 0.0.0.0:9410 without a token: exit %d, stderr %q", code, errb.String())
	}
}

// startDaemon runs spec's command line until the test ends (then checks
// it stopped with exit 0) and returns what addrRe's group matched on its
// stdout: the address it announced.
func startDaemon(t *testing.T, spec daemon.Spec, args []string, addrRe string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr logbuffer.Buffer
	done := make(chan int, 1)
	go func() { done <- spec.Exec(ctx, args, &stdout, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("kvgate %s: exit %d after its context ended; stderr: %s", spec.Name, code, stderr.String())
		}
	})
	re := regexp.MustCompile(addrRe)
	var addr string
	poll.Until(t, "kvgate "+spec.Name+" to announce its address", time.Minute, func() error {
		select {
		case code := <-done:
			t.Fatalf("kvgate %s: exit %d: %s", spec.Name, code, stderr.String())
		default:
		}
		m := re.FindStringSubmatch(stdout.String())
		if m == nil {
			return fmt.Errorf("stdout %q", stdout.String())
		}
		addr = m[1]
		return nil
	})
	return addr
}
