//go:build kubeapiserver

package extprocd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gieclient "sigs.k8s.io/gateway-api-inference-extension/client-go/clientset/versioned"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc"
	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/lab/testkit/kubeapi"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// The extproc process as an InferencePool's picker, against a real API
// server: ready once the pool is there; when the pool is deleted it keeps
// routing on the last workers but fails readiness (the gRPC readiness
// service and /readyz, which says why) and the present gauge drops to 0;
// when the pool is back, ready again.
func TestExtprocInferencePoolReadiness(t *testing.T) {
	srv := kubeapi.Start(t)
	const ns = "picker"
	srv.Namespace(t, ns)
	ctx := context.Background()
	gie, err := gieclient.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	pools := gie.InferenceV1().InferencePools(ns)
	pool := &giev1.InferencePool{ObjectMeta: metav1.ObjectMeta{Name: "qwen-pool", Namespace: ns}}
	pool.Spec.Selector.MatchLabels = map[giev1.LabelKey]giev1.LabelValue{"app": "vllm"}
	pool.Spec.TargetPorts = []giev1.Port{{Number: 8000}}
	pool.Spec.EndpointPickerRef = &giev1.EndpointPickerRef{Name: "kvgate", Port: &giev1.Port{Number: 9002}}
	if _, err := pools.Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pod's address is only written into the API server: the router's
	// probes are off and it publishes no KV events, so nothing dials it.
	kubeapi.CreatePod(t, srv.Clientset, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns, Labels: map[string]string{"app": "vllm", kubeselect.DefaultModelLabel: "qwen3"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}},
	})
	kubeapi.SetPodReady(t, srv.Clientset, ns, "a", "10.244.0.21", true)

	tokDir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: "qwen3", BlockSize: 16, Tokenizer: tokDir}}
	cfg.Extproc.HealthCheck.Disabled, cfg.Extproc.EngineMetrics.Disabled = true, true
	cfg.Extproc.Listen, cfg.Extproc.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Extproc.Discovery.InferencePool = &kubeselect.InferencePool{Kubeconfig: srv.Kubeconfig, Name: "qwen-pool", Namespace: ns}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	type addrs struct{ grpc, admin net.Addr }
	ready := make(chan addrs, 1)
	routers := make(chan *extproc.Router, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(runCtx, cfg, Options{Drain: time.Second, Log: slog.New(slog.DiscardHandler),
			Listening:   func(g, a net.Addr) { ready <- addrs{g, a} },
			RouterReady: func(r *extproc.Router) { routers <- r }})
	}()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("extproc: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("extproc did not stop")
		}
	})
	var a addrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("extproc: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("extproc not listening")
	}
	router := <-routers
	conn, err := grpc.NewClient(a.grpc.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	readyz := "http://" + a.admin.String() + "/readyz"
	metrics := "http://" + a.admin.String() + "/metrics"

	expect := func(what string, status int, body string, grpcStatus healthpb.HealthCheckResponse_ServingStatus, present string) {
		t.Helper()
		poll.Until(t, what, 30*time.Second, func() error {
			code, text := get(t, readyz)
			if code != status || !strings.Contains(text, body) {
				return fmt.Errorf("/readyz %d %q, want %d with %q", code, text, status, body)
			}
			resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: server.HealthReadiness})
			if err != nil || resp.Status != grpcStatus {
				return fmt.Errorf("gRPC readiness %v (%v), want %v", resp.GetStatus(), err, grpcStatus)
			}
			if _, m := get(t, metrics); !strings.Contains(m, `kvgate_discovery_inferencepool_present{pool="picker/qwen-pool"} `+present) {
				return fmt.Errorf("present gauge not %s", present)
			}
			return nil
		})
	}
	routeTo := func(want string) {
		t.Helper()
		poll.Until(t, "a routing decision to "+want, 30*time.Second, func() error {
			d, rerr := router.Decide(ctx, &server.Request{Method: "POST", Path: "/v1/chat/completions",
				Body: []byte(`{"model":"qwen3","messages":[{"role":"user","content":"hello"}]}`), Headers: map[string]string{"content-type": "application/json"}})
			if rerr != nil {
				return fmt.Errorf("%d %s", rerr.Status, rerr.Body)
			}
			d.Ticket.Finish(server.OutcomeOK)
			if d.Endpoint != want {
				return fmt.Errorf("routed to %s", d.Endpoint)
			}
			return nil
		})
	}

	expect("ready with the pool", http.StatusOK, "ready", healthpb.HealthCheckResponse_SERVING, "1")
	routeTo("10.244.0.21:8000")

	if err := pools.Delete(ctx, "qwen-pool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("readiness failing once the pool is deleted", http.StatusServiceUnavailable, "InferencePool not found: picker/qwen-pool",
		healthpb.HealthCheckResponse_NOT_SERVING, "0")
	routeTo("10.244.0.21:8000") // the last set is kept

	pool.ResourceVersion = ""
	if _, err := pools.Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("ready again once the pool is back", http.StatusOK, "ready", healthpb.HealthCheckResponse_SERVING, "1")
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
