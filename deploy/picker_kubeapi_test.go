//go:build kubeapiserver

package deploy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kvgate/kvgate/lab/testkit/kubeapi"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// The InferencePool scenario as installed: the chart's objects applied to a
// real API server, and the extproc container as rendered (args and
// ConfigMap) running the real binary with the credentials of the chart's
// extproc ServiceAccount, not an admin's. Its Role is then enough for the
// process: it finds the pool, the ready pod × both target ports as workers
// and an InferenceObjective naming the pool, and turns ready (the gRPC
// readiness service its probe asks). Substituted: the listen addresses
// (free loopback ports), the tokenizer path, the client's kubeconfig (the
// ServiceAccount's identity instead of the in-cluster token), and no
// engine probes or KV-event ports (nothing listens at the pod's address).
// startRenderedPicker applies the InferencePool rendering, a ready pod and
// an InferenceObjective, and starts the rendered extproc with the client
// identity given; it returns the process and its gRPC and admin addresses.
func startRenderedPicker(t *testing.T, srv *kubeapi.Server, identity kubeapi.Identity) (p *process, grpcAddr, admin string) {
	t.Helper()
	tokenizer, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	ms := mustRender(t, inferencePoolValues, map[string]any{"config": map[string]any{
		"models": []any{map[string]any{"name": "qwen3", "block_size": 16, "tokenizer": tokenizer}},
		"extproc": map[string]any{
			"health_check":   map[string]any{"disabled": true},
			"engine_metrics": map[string]any{"disabled": true},
			"discovery":      map[string]any{"inference_pool": map[string]any{"events_port": nil, "replay_port": nil}},
		},
	}})
	srv.Namespace(t, releaseNamespace)
	for _, m := range ms {
		if _, ok := renderOnlyKinds[m.Kind]; ok {
			continue
		}
		if _, err := applyDoc(t, srv, m.YAML, releaseNamespace); err != nil {
			t.Fatalf("%s refused: %v", m, err)
		}
	}
	kubeapi.CreatePod(t, srv.Clientset, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vllm-0", Namespace: releaseNamespace, Labels: map[string]string{"app": "vllm-qwen3"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}},
	})
	kubeapi.SetPodReady(t, srv.Clientset, releaseNamespace, "vllm-0", "10.244.0.21", true)
	objective := []byte(`apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceObjective
metadata: {name: batch, namespace: ` + releaseNamespace + `}
spec:
  priority: -1
  poolRef: {name: ` + releaseName + `}
`)
	if _, err := applyDoc(t, srv, objective, releaseNamespace); err != nil {
		t.Fatalf("InferenceObjective: %v", err)
	}

	objs := decodeAll(t, ms)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(renderedConfig(t, objs)), &cfg); err != nil {
		t.Fatal(err)
	}
	dig(t, cfg, "extproc", "discovery", "inference_pool")["kubeconfig"] = identity.Kubeconfig
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p = startRendered(t, container(t, objs, "extproc"), string(out), `ext_proc gRPC on (\S+, admin on http://\S+)`,
		"--listen=127.0.0.1:0", "--admin=127.0.0.1:0")
	var ok bool
	grpcAddr, admin, ok = strings.Cut(p.addr, ", admin on http://")
	if !ok {
		t.Fatalf("start-up line %q", p.addr)
	}
	return p, grpcAddr, admin
}

func TestRenderedPickerRunsAsItsServiceAccount(t *testing.T) {
	srv := kubeapi.Start(t)
	ctx := context.Background()
	p, grpcAddr, admin := startRenderedPicker(t, srv, srv.ServiceAccount(t, releaseNamespace, releaseName+"-extproc"))
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	poll.Until(t, "the picker ready as its ServiceAccount", time.Minute, func() error {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
		if err != nil {
			return err
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("readiness %v\n%s", resp.Status, p.stderr)
		}
		return nil
	})
	token := secretValue(tokenSecretName)
	for _, want := range []string{
		`kvgate_discovery_inferencepool_present\{[^}]*\} 1\n`,
		`kvgate_discovery_inferencepool_workers\{[^}]*\} 2\n`, // one pod × targetPorts 8000, 8001
		`kvgate_discovery_inferencepool_objectives\{[^}]*\} 1\n`,
	} {
		re := regexp.MustCompile(want)
		poll.Until(t, "metrics matching "+want, time.Minute, func() error {
			req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/metrics", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if !re.Match(body) {
				return fmt.Errorf("%s: no match\n%s", resp.Status, p.stderr)
			}
			return nil
		})
	}
	p.stop(t)
}

// The same process as an identity no Role is bound to: it cannot list the
// pool or the pods, knows no worker, and must not say it is ready (it did:
// readiness only waited for start-up). /readyz names why.
func TestRenderedPickerWithoutItsRoleIsNotReady(t *testing.T) {
	srv := kubeapi.Start(t)
	ctx := context.Background()
	p, grpcAddr, admin := startRenderedPicker(t, srv, srv.ServiceAccount(t, releaseNamespace, "not-the-picker"))
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Started (the start-up line is printed after readiness is first
	// decided), yet not ready, and still not after the informers' first
	// retries have been refused.
	token := secretValue(tokenSecretName)
	for i := 0; i < 3; i++ {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
		if err != nil || resp.Status == healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("readiness without RBAC: %v %v\n%s", resp, err, p.stderr)
		}
		req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "no worker set yet") {
			t.Fatalf("/readyz without RBAC: %s %q", r.Status, body)
		}
		time.Sleep(time.Second)
	}
	p.stop(t)
}
