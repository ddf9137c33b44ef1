package extprocd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// extprocReplica runs Serve in this process, as `kvgate extproc`
// would, until stop (SIGTERM) is called.
type extprocReplica struct {
	grpc, admin net.Addr
	stop        context.CancelFunc
	done        chan error
}

func startReplica(t *testing.T, cfg config.Config, drain time.Duration) *extprocReplica {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	r := &extprocReplica{stop: stop, done: make(chan error, 1)}
	type addrs struct{ grpc, admin net.Addr }
	ready := make(chan addrs, 1)
	go func() {
		r.done <- Serve(ctx, cfg, Options{Drain: drain, Log: slog.New(slog.DiscardHandler),
			Listening: func(g, a net.Addr) { ready <- addrs{g, a} }})
	}()
	select {
	case a := <-ready:
		r.grpc, r.admin = a.grpc, a.admin
	case err := <-r.done:
		t.Fatalf("extproc: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("extproc not ready")
	}
	t.Cleanup(func() {
		stop()
		<-r.done
	})
	return r
}

func limitsConfig(t *testing.T, engines ...string) config.Config {
	t.Helper()
	tokDir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: "qwen3", BlockSize: 16, Tokenizer: tokDir}}
	for _, e := range engines {
		cfg.Engines = append(cfg.Engines, config.Engine{Endpoint: e, Model: "qwen3", DPRanks: 1, Role: "both"})
	}
	cfg.Extproc.HealthCheck.Disabled, cfg.Extproc.EngineMetrics.Disabled = true, true
	cfg.Extproc.Listen, cfg.Extproc.Admin = "127.0.0.1:0", "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Envoy sends a BUFFERED body as one gRPC message (ext_proc.cc
// handleDataBufferedMode). A 5 MiB body, under max_body_bytes (8 MiB), is
// over grpc-go's default 4 MiB receive limit: without MaxRecvMsgSize it
// failed with RESOURCE_EXHAUSTED (500 fail-closed, unrouted fail-open).
func TestExtprocRoutesFiveMiBBufferedBody(t *testing.T) {
	cfg := limitsConfig(t, "10.0.0.1:8000")
	r := startReplica(t, cfg, time.Second)
	conn, err := grpc.NewClient(r.grpc.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// envoy-buffered-failopen.yaml, failing closed so that a refused message
	// shows as an error instead of an unrouted pass-through.
	hcfg := envoyharness.MustShipped("envoy-buffered-failopen.yaml").WithWorkers("10.0.0.1:8000")
	hcfg.FailureModeAllow = false
	hcfg.MessageTimeout = time.Minute // a shared 2-core machine
	h, err := envoyharness.New(conn, hcfg)
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 5<<20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// An embeddings request: routed on load, so the test measures the
	// transport, not the tokenizer.
	x, err := h.Start(ctx, &envoyharness.Request{Method: "POST", Path: "/v1/embeddings", Body: body,
		Headers: []envoyharness.Header{{Name: "content-type", Value: "application/json"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Cancel()
	if x.Local != nil {
		t.Fatalf("5 MiB BUFFERED body: local reply %d %s (%v)", x.Local.Status, x.Local.Cause, x.Local.Err)
	}
	if x.Forward.Upstream != "10.0.0.1:8000" || len(x.Forward.Body) != len(body) {
		t.Fatalf("routed to %q with %d bytes", x.Forward.Upstream, len(x.Forward.Body))
	}
}

// SIGTERM on one of two replicas loses no request: readiness fails first,
// Envoy's health check (envoy.yaml: 1 s interval, 2 failures) moves new
// streams to the other replica within the drain grace, then GOAWAY
// closes the draining replica to new streams and its in-flight ones end.
// (The signal handler cancels this same context: signal.NotifyContext in
// Run.)
func TestSIGTERMOnOneOfTwoReplicasLosesNoRequest(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("content-type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	defer backend.Close()
	worker := backend.Listener.Addr().String()
	cfg := limitsConfig(t, worker)
	cfg.Extproc.DrainGrace = yamlconf.Duration(3500 * time.Millisecond)
	a := startReplica(t, cfg, 10*time.Second)
	b := startReplica(t, cfg, 10*time.Second)
	p, err := envoyharness.NewProxy(envoyharness.DefaultConfig(), envoyharness.ProxyOptions{
		ExtProc: []string{a.grpc.String(), b.grpc.String()}, Workers: []string{worker}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	if err := p.WaitHealthy(wctx); err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(p)
	defer gw.Close()

	var sent, failed atomic.Int64
	var failures sync.Map
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				body := fmt.Sprintf(`{"model":"qwen3","messages":[{"role":"user","content":"client %d request %d"}],"max_tokens":4}`, c, i)
				resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", bytes.NewReader([]byte(body)))
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					failures.Store(fmt.Sprintf("%d/%d", c, i), err.Error())
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
					failures.Store(fmt.Sprintf("%d/%d", c, i), resp.Status)
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	before := sent.Load()
	a.stop() // SIGTERM
	// Past the grace (GOAWAY) and until replica a has stopped.
	select {
	case err := <-a.done:
		if err != nil {
			t.Errorf("replica a: %v", err)
		}
		a.done <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("replica a did not stop")
	}
	afterStop := sent.Load()
	time.Sleep(500 * time.Millisecond)
	close(stopLoad)
	wg.Wait()
	if h := p.Healthy(); h[0] || !h[1] {
		t.Errorf("health after drain %v, want [false true]", h)
	}
	if n := failed.Load(); n != 0 {
		failures.Range(func(k, v any) bool { t.Logf("request %v: %v", k, v); return true })
		t.Fatalf("%d of %d requests failed across the drain", n, sent.Load())
	}
	if afterStop-before < 10 || sent.Load()-afterStop < 3 {
		t.Fatalf("too few requests to tell: %d before, %d during the drain, %d after", before, afterStop-before, sent.Load()-afterStop)
	}
	t.Logf("%d requests, none failed: %d before SIGTERM, %d during the drain, %d after replica a stopped", sent.Load(), before, afterStop-before, sent.Load()-afterStop)
}
