package extprocd

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// On SIGTERM the HTTP /readyz must turn 503 while in-flight streams
// drain, like the gRPC readiness service, so that a kubelet httpGet probe
// (the chart's probe when the ext_proc port serves TLS) takes the pod out
// of rotation before it stops.
func TestExtprocReadyzTurns503WhileDraining(t *testing.T) {
	tokDir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: "qwen3", BlockSize: 16, Tokenizer: tokDir}}
	cfg.Engines = []config.Engine{{Endpoint: "127.0.0.1:18009", Model: "qwen3", DPRanks: 1, Role: "both"}}
	cfg.Extproc.HealthCheck.Disabled, cfg.Extproc.EngineMetrics.Disabled = true, true
	cfg.Extproc.Listen, cfg.Extproc.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Extproc.DrainGrace = yamlconf.Duration(200 * time.Millisecond)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	type addrs struct{ grpc, admin net.Addr }
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(runCtx, cfg, Options{Drain: 30 * time.Second, Log: slog.New(slog.DiscardHandler),
			Listening: func(g, a net.Addr) { ready <- addrs{g, a} }})
	}()
	var a addrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("extproc: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("extproc not ready")
	}
	readyz := "http://" + a.admin.String() + "/readyz"
	if got := httpStatus(t, readyz, ""); got != http.StatusOK {
		t.Fatalf("/readyz before SIGTERM: %d, want 200", got)
	}

	// A routed request whose response has not come back yet keeps its
	// ext_proc stream, and so the drain, open.
	conn, err := grpc.NewClient(a.grpc.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h, err := envoyharness.New(conn, envoyharness.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancelStream := context.WithTimeout(context.Background(), time.Minute)
	defer cancelStream()
	x, err := h.Start(sctx, &envoyharness.Request{Method: "POST", Path: "/v1/chat/completions",
		Headers: []envoyharness.Header{{Name: "content-type", Value: "application/json"}},
		Body:    []byte(`{"model":"qwen3","messages":[{"role":"user","content":"hold the stream"}],"max_tokens":4}`)})
	if err != nil {
		t.Fatal(err)
	}
	if x.Forward == nil {
		t.Fatalf("request not routed: local reply %+v", x.Local)
	}

	stop() // SIGTERM
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := httpStatus(t, readyz, "")
		if got == http.StatusServiceUnavailable {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("extproc stopped (%v) before /readyz reported draining (last status %d)", err, got)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d while draining", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancelStream()
	x.Close(context.Background())
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("extproc: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("extproc did not stop after its last stream ended")
	}
}
