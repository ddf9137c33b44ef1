package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/daemon/extprocd"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// Bad flags and files exit 2 with a message naming the flag (or the key of
// the file); --help exits 0 and says what the gateway is not.
func TestGatewayUsageErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kv := write("kvgate.yaml", "models: [{name: m, block_size: 16, tokenizer: /x}]\nengines: [{endpoint: 127.0.0.1:8001, model: m}]\n")
	badKV := write("bad.yaml", "models: [{name: m, block_size: 0, tokenizer: /x}]\n")
	noEngines := write("none.yaml", "models: [{name: m, block_size: 16, tokenizer: /x}]\n")
	notEnvoy := write("envoy.yaml", "static_resources: {listeners: 3}\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--workers or --config: required"},
		{[]string{"--workers", "10.0.0.1"}, `--workers: entry 0 "10.0.0.1"`},
		{[]string{"--workers", "127.0.0.1:8001, 127.0.0.1:8001"}, `--workers: entry 1 "127.0.0.1:8001": listed twice`},
		{[]string{"--workers", "localhost:8001"}, `--workers: entry 0 "localhost:8001"`},
		{[]string{"--workers", "127.0.0.1:8001", "--extproc", ":9002"}, `--extproc: entry 0 ":9002": want host:port: the host is empty`},
		{[]string{"--workers", "127.0.0.1:8001", "--extproc", "127.0.0.1:0"}, `--extproc: entry 0 "127.0.0.1:0": port "0"`},
		{[]string{"--workers", "127.0.0.1:8001", "--listen", "8080"}, `--listen "8080"`},
		{[]string{"--workers", "127.0.0.1:8001", "--drain", "0s"}, "--drain must be positive"},
		{[]string{"--workers", "127.0.0.1:8001", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"--workers", "127.0.0.1:8001", "--served-by-header", "x served"}, `--served-by-header "x served": not an HTTP header name`},
		{[]string{"--workers", "127.0.0.1:8001", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"--envoy-config", filepath.Join(dir, "missing.yaml")}, "--envoy-config: open "},
		{[]string{"--envoy-config", notEnvoy, "--workers", "127.0.0.1:8001"}, "--envoy-config " + notEnvoy + ": "},
		{[]string{"--envoy-config", "../../envoy/envoy-mtls.yaml", "--workers", "127.0.0.1:8001"}, "cluster kvgate-extproc (ext_proc) has a transport_socket (TLS)"},
		{[]string{"--envoy-config", "../../envoy/envoy-original-dst.yaml", "--workers", "127.0.0.1:8001"}, "--workers: cluster "},
		// Istio's ext_proc cluster comes from the mesh: no endpoints in the file.
		{[]string{"--envoy-config", "../../envoy/istio/envoyfilter.yaml"}, "--extproc: required: the Envoy config's ext_proc cluster "},
		{[]string{"--config", badKV}, "--config: config " + badKV + ": models[0].block_size"},
		{[]string{"--config", noEngines}, "--workers: required: --config " + noEngines + " lists no engines"},
		{[]string{"--config", kv, "--envoy-config", "../../envoy/envoy-original-dst.yaml", "--extproc", "127.0.0.1:9002"}, "does not fit --envoy-config ../../envoy/envoy-original-dst.yaml"},
	} {
		var out, errOut strings.Builder
		code := dispatch(append([]string{"gateway"}, c.args...), strings.NewReader(""), &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("gateway %q: exit %d, stderr %q; want exit 2 naming %q", c.args, code, errOut.String(), c.want)
		}
	}
	var out, errOut strings.Builder
	// Asked-for help is on stdout (cli.Commands.Dispatch).
	if code := dispatch([]string{"gateway", "--help"}, strings.NewReader(""), &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "NOT FOR PRODUCTION") || !strings.Contains(out.String(), "-allow-client-debug") || errOut.Len() > 0 {
		t.Errorf("gateway --help: exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
}

// Where the ext_proc replicas and the workers come from: flags first, then
// the kvgate configuration, then the Envoy file's own endpoints.
func TestGatewayPlanSources(t *testing.T) {
	dir := t.TempDir()
	kv := filepath.Join(dir, "kvgate.yaml")
	if err := os.WriteFile(kv, []byte(`models: [{name: m, block_size: 16, tokenizer: /x}]
extproc: {listen: "0.0.0.0:9102", allow_plaintext: true}
engines: [{endpoint: "[0:0:0:0:0:0:0:1]:8001", model: m}, {endpoint: 127.0.0.2:8001, model: m}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		f                gatewayFlags
		extproc, workers []string
		strips           bool
	}{
		{gatewayFlags{listen: "127.0.0.1:8080", cfgPath: kv}, []string{"127.0.0.1:9102"}, []string{"[::1]:8001", "127.0.0.2:8001"}, true},
		{gatewayFlags{listen: "127.0.0.1:8080", cfgPath: kv, extproc: "a.example:1,b.example:2", workers: "[::1]:9", allowDebug: true},
			[]string{"a.example:1", "b.example:2"}, []string{"[::1]:9"}, false},
		// The Envoy file's own ext_proc endpoint (127.0.0.1:9002).
		{gatewayFlags{listen: "127.0.0.1:8080", workers: "127.0.0.1:8001"}, []string{"127.0.0.1:9002"}, []string{"127.0.0.1:8001"}, true},
		// ORIGINAL_DST: no worker list.
		{gatewayFlags{listen: "127.0.0.1:8080", envoyFile: "../../envoy/envoy-header-routing.yaml"}, []string{"127.0.0.1:9002"}, nil, true},
	} {
		p, err := planGateway(c.f)
		if err != nil {
			t.Errorf("%+v: %v", c.f, err)
			continue
		}
		strips := slices.ContainsFunc(p.envoy.StripHeaders, func(m envoyharness.HeaderMatcher) bool { return m.Prefix == "x-kvgate-" })
		if !slices.Equal(p.extproc, c.extproc) || !slices.Equal(p.workers, c.workers) || strips != c.strips || p.exposed {
			t.Errorf("%+v: extproc %v workers %v strips x-kvgate-* %v exposed %v; want %v %v %v false", c.f, p.extproc, p.workers, strips, p.exposed, c.extproc, c.workers, c.strips)
		}
	}
}

// sseWorker is an engine answering one streamed chat completion: its first
// event at once, the rest only after release is closed, so a client that
// sees the first event before release has proof that nothing buffered it.
type sseWorker struct {
	release chan struct{}
	mu      sync.Mutex
	headers []http.Header // of each completion request
}

func (w *sseWorker) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		return
	case "/metrics":
		rw.Header().Set("content-type", "text/plain; version=0.0.4")
		return
	case "/v1/chat/completions":
	default:
		http.NotFound(rw, r)
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	w.mu.Lock()
	w.headers = append(w.headers, r.Header.Clone())
	w.mu.Unlock()
	rw.Header().Set("content-type", "text/event-stream")
	chunk := func(content string) string {
		return fmt.Sprintf(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", content)
	}
	_, _ = io.WriteString(rw, chunk("first"))
	rw.(http.Flusher).Flush()
	select {
	case <-w.release:
	case <-r.Context().Done():
		return
	}
	_, _ = io.WriteString(rw, chunk("second"))
	_, _ = io.WriteString(rw, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":2,"total_tokens":22}}`+"\n\n")
	_, _ = io.WriteString(rw, "data: [DONE]\n\n")
}

// kvgate-lab gateway as its own process, in front of a real kvgate extproc:
// the request is routed to the engine kvgate chose (the client's own
// routing and debug headers stripped before ext_proc), the SSE stream
// reaches the client event by event, and SIGTERM closes the listener while
// the stream in flight finishes; then the process exits 0.
func TestGatewayProcessRoutesStreamsAndDrains(t *testing.T) {
	tokDir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	worker := &sseWorker{release: make(chan struct{})}
	ws := httptest.NewServer(worker)
	defer ws.Close()
	workerAddr := strings.TrimPrefix(ws.URL, "http://")

	cfg := config.Default()
	cfg.Models = []config.Model{{Name: "qwen3", BlockSize: 16, Tokenizer: tokDir}}
	cfg.Extproc.Listen, cfg.Extproc.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Extproc.DrainGrace = 0
	cfg.Engines = []config.Engine{{Endpoint: workerAddr, Model: "qwen3", DPRanks: 1, Role: "both"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	extDone := make(chan error, 1)
	ready := make(chan net.Addr, 1)
	go func() {
		extDone <- extprocd.Serve(ctx, cfg, extprocd.Options{Drain: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Listening: func(g, _ net.Addr) { ready <- g }})
	}()
	defer func() { cancel(); <-extDone }()
	var extAddr net.Addr
	select {
	case extAddr = <-ready:
	case err := <-extDone:
		t.Fatalf("extproc: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("extproc not listening")
	}

	gw := startProc(t, "gateway", ".", []string{runAsKVGateEnv + "=1"}, kvgateExecutable(t), "gateway",
		"--extproc", extAddr.String(), "--workers", workerAddr, "--listen", "127.0.0.1:0", "--drain", "30s")
	m := gw.waitOutput(t, gw.stdout, regexp.MustCompile(`^kvgate-lab gateway: DEVELOPMENT GATEWAY, NOT FOR PRODUCTION: http://(\S+) plays envoy/envoy.yaml \(embedded\)`), time.Minute)
	gwAddr := m[1]
	gw.waitOutput(t, gw.stderr, regexp.MustCompile(`"level":"WARN","msg":"development gateway, not for production"`), time.Second)
	gw.waitOutput(t, gw.stderr, regexp.MustCompile(`"msg":"ext_proc replicas healthy"`), time.Minute)

	body := `{"model":"qwen3","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"Hello there, how are you today?"}]}`
	req, _ := http.NewRequest("POST", "http://"+gwAddr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-gateway-destination-endpoint", "10.6.6.6:1") // a client naming its own upstream
	req.Header.Set("x-kvgate-debug", "1")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("content-type") != "text/event-stream" || resp.Header.Get("x-kvgate-debug") != "" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	// The development aid: the engine that answered, by default.
	if got := resp.Header.Values(servedByHeader); !slices.Equal(got, []string{workerAddr}) {
		t.Errorf("%s: %q, want the engine %s", servedByHeader, got, workerAddr)
	}
	rd := bufio.NewReader(resp.Body)
	first, err := rd.ReadString('\n')
	if err != nil || !strings.Contains(first, `"content":"first"`) {
		t.Fatalf("first event %q: %v", first, err)
	}
	worker.mu.Lock()
	h := worker.headers[0]
	worker.mu.Unlock()
	if got := h.Values("x-gateway-destination-endpoint"); !slices.Equal(got, []string{workerAddr}) || h.Get("x-kvgate-debug") != "" {
		t.Errorf("the engine saw x-gateway-destination-endpoint %q, x-kvgate-debug %q: want kvgate's choice only", got, h.Get("x-kvgate-debug"))
	}

	// SIGTERM while the stream is open: the listener closes, the stream goes on.
	gw.signal(syscall.SIGTERM)
	gw.waitOutput(t, gw.stderr, regexp.MustCompile(`"msg":"draining: listener closed`), 10*time.Second)
	poll.True(t, "the draining gateway to stop accepting connections", 10*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", gwAddr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	close(worker.release)
	rest, err := io.ReadAll(rd)
	if err != nil || !strings.Contains(string(rest), `"content":"second"`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest of the stream %q: %v", rest, err)
	}
	if code := gw.exitCode(t, 30*time.Second); code != 0 {
		t.Fatalf("gateway exit %d after SIGTERM", code)
	}
	if !strings.Contains(gw.stderr.String(), `"msg":"drained"`) {
		t.Errorf("no drained line:\n%s", gw.stderr.String())
	}
}
