//go:build helm || kubeapiserver

package deploy

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/testkit/redistest"
)

// container returns the first container of the workload with that
// component label.
func container(t *testing.T, objs map[string]runtime.Object, component string) corev1.Container {
	t.Helper()
	for _, w := range workloads(objs) {
		if w.template.Labels["app.kubernetes.io/component"] == component {
			return w.template.Spec.Containers[0]
		}
	}
	t.Fatalf("no %s workload rendered", component)
	return corev1.Container{}
}

// process is a kvgate process started from a rendered container.
type process struct {
	cmd    *exec.Cmd
	stderr *strings.Builder
	addr   string
}

// startRendered runs the container's args against cfg (the rendered config
// written to a file) plus extra flags, and waits for the line announcing
// its address (readyRe's first group).
func startRendered(t *testing.T, c corev1.Container, cfg string, readyRe string, extra ...string) *process {
	t.Helper()
	cfgFile := filepath.Join(t.TempDir(), configKey)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, a := range c.Args {
		args = append(args, strings.Replace(a, configFlag, "--config="+cfgFile, 1))
	}
	args = append(args, extra...)
	p := &process{cmd: exec.Command(kvgateBinary(t), args...), stderr: &strings.Builder{}}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			p.cmd.Env = append(p.cmd.Env, e.Name+"="+os.Getenv(e.Name))
		}
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(readyRe)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		close(addr)
	}()
	// A hang guard, not a timing assertion: startup takes well under a second.
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("kvgate %v exited before serving: %v\n%s", args, p.cmd.Wait(), p.stderr)
		}
		p.addr = a
	case <-time.After(2 * time.Minute):
		t.Fatalf("kvgate %v did not start serving\n%s", args, p.stderr)
	}
	return p
}

// stop sends SIGTERM (what Kubernetes sends) and expects a clean exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v\n%s", err, p.stderr)
	}
}

// The extproc container, exactly as rendered (args and ConfigMap), boots
// the real binary: it serves gRPC health "liveness" and "readiness" (what
// the chart's probes ask) and exits cleanly on SIGTERM. Only the listen
// addresses move to free loopback ports, and the tokenizer path points at
// the one `make models` fetched.
func TestRenderedExtprocBoots(t *testing.T) {
	tokenizer, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, mustRender(t, "", map[string]any{"config": map[string]any{
		"models": []any{map[string]any{"name": "qwen3", "block_size": 16, "tokenizer": tokenizer}},
	}}))
	p := startRendered(t, container(t, objs, "extproc"), renderedConfig(t, objs), `ext_proc gRPC on (\S+),`,
		"--listen=127.0.0.1:0", "--admin=127.0.0.1:0")
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, svc := range []string{"liveness", "readiness"} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("gRPC health %q (the chart's probe): %v", svc, err)
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("gRPC health %q: %v, want SERVING", svc, resp.Status)
		}
	}
	p.stop(t)
}

// The full scenario's in-chart Redis and indexer, as rendered: a real
// redis-server runs with the StatefulSet's arguments (memory bound, LRU,
// requirepass from the Secret), and the indexer container, with the
// password from the same Secret, connects to it, answers its liveness
// probe and stops cleanly. Substituted: the Redis address (the Service's
// DNS name → the test server) and the indexer's listen port.
func TestRenderedIndexerAndRedisBoot(t *testing.T) {
	objs := decodeAll(t, mustRender(t, "testdata/values-full.yaml", nil))
	cfgText := renderedConfig(t, objs) // sets REDIS_PASSWORD for the test
	redisC := container(t, objs, "redis")
	if len(redisC.Args) == 0 || redisC.Args[0] != "redis-server" {
		t.Fatalf("redis args %v: want redis-server first", redisC.Args)
	}
	// Kubernetes expands $(VAR) in args from the container's env.
	expand := func(a string) string {
		return os.Expand(strings.ReplaceAll(strings.ReplaceAll(a, "$(", "${"), ")", "}"), os.Getenv)
	}
	var extra []string
	password := ""
	for i := 1; i < len(redisC.Args); i++ {
		switch a := redisC.Args[i]; a {
		case "--port", "--dir": // redistest picks its own
			i++
		case "--requirepass":
			// Applied once started (below): redistest checks the server
			// with an unauthenticated PING.
			i++
			password = expand(redisC.Args[i])
		default:
			extra = append(extra, expand(a))
		}
	}
	if password == "" || password != os.Getenv("REDIS_PASSWORD") {
		t.Fatalf("in-chart Redis args %v: want --requirepass $(REDIS_PASSWORD) with a password Secret", redisC.Args)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := redistest.StartStandalone(ctx, redistest.Options{ExtraArgs: extra})
	if err != nil {
		t.Fatalf("redis-server with the chart's args %v: %v", extra, err)
	}
	defer srv.Close()
	if err := srv.Client().ConfigSet(ctx, "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}

	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
		t.Fatal(err)
	}
	redisCfg := dig(t, cfg, "index", "redis")
	if got := fmt.Sprint(redisCfg["addrs"]); got != "[kvgate-redis:6379]" {
		t.Fatalf("index.redis.addrs %s, want the in-chart Service", got)
	}
	redisCfg["addrs"] = []any{srv.Addr()}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := startRendered(t, container(t, objs, "indexer"), string(out), `on http://(\S+)`, "--listen=127.0.0.1:0")
	resp, err := http.Get("http://" + p.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("indexer /healthz (the chart's liveness probe): %s", resp.Status)
	}
	// /metrics wants the admin token the chart mounts (the test wrote
	// secretValue into the mounted file) and the monitors send.
	for auth, want := range map[string]int{"": http.StatusUnauthorized, "Bearer " + secretValue(tokenSecretName): http.StatusOK} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+p.addr+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("indexer /metrics with Authorization %.12q…: %s, want %d", auth, resp.Status, want)
		}
	}
	p.stop(t)
}
