//go:build kubeapiserver

package kubeapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// KubernetesRelease is the k8s.io/kubernetes release the API server is built
// from (assets/go.mod pins it; this constant only names it in messages).
const KubernetesRelease = "v1.37.2"

// assetsDir is the nested, test-only module that pins kube-apiserver and
// etcd. It is a module of its own because k8s.io/kubernetes requires its ~33
// staging modules at v0.0.0 and replaces them with its own folders, and a
// dependency's replace lines are ignored: the nested go.mod replaces each with
// its published release instead, apart from kvgate's own module graph.
func assetsDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "assets")
}

// repoRoot is the kvgate checkout that holds this kit.
func repoRoot() string {
	return filepath.Join(assetsDir(), "..", "..", "..", "..")
}

// binaries returns the folder holding kube-apiserver and etcd, building them
// first when the folder for the current pins is missing. The folder is named
// by a hash of the nested module's files, so a changed pin builds anew and an
// unchanged one is reused across test packages, runs and clones' caches. A
// file lock serialises the build between test binaries that start together.
// KVGATE_KUBE_ASSETS names a folder already holding both binaries (another
// checkout's .cache/kubeassets/<hash>), skipping the build and its check.
func binaries(t testing.TB) string {
	t.Helper()
	if env := os.Getenv("KVGATE_KUBE_ASSETS"); env != "" {
		return env
	}
	src := assetsDir()
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum", "etcd/main.go"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatalf("kubeapi: reading the assets module: %v", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	cache := filepath.Join(repoRoot(), ".cache", "kubeassets")
	dir := filepath.Join(cache, hex.EncodeToString(h.Sum(nil))[:16])
	if ready(dir) {
		return dir
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatalf("kubeapi: %v", err)
	}
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("kubeapi: %v", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("kubeapi: locking the assets cache: %v", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if ready(dir) { // another test binary built them while this one waited
		return dir
	}
	tmp, err := os.MkdirTemp(cache, "build-")
	if err != nil {
		t.Fatalf("kubeapi: %v", err)
	}
	defer os.RemoveAll(tmp)
	t.Logf("kubeapi: building kube-apiserver (k8s.io/kubernetes %s) and etcd into %s; the first build compiles the API server's whole tree (minutes on 2 cores), later runs reuse it", KubernetesRelease, dir)
	start := time.Now()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", tmp+string(filepath.Separator),
		"k8s.io/kubernetes/cmd/kube-apiserver", "./etcd")
	cmd.Dir = src
	// The nested module is built as itself, never as part of a workspace
	// or with the outer module's flags.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubeapi: building kube-apiserver and etcd in %s: %v\n%s", src, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatalf("kubeapi: %v", err)
	}
	t.Logf("kubeapi: built in %s", time.Since(start).Round(time.Second))
	return dir
}

func ready(dir string) bool {
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// crdSource is one upstream module whose own manifests hold CRDs the tests
// install: never hand-written copies.
type crdSource struct {
	module, version string
	files           []string // relative to the module's root
}

// crdSources are the CRDs kvgate's charts and discovery use.
var crdSources = []crdSource{
	// InferencePool, inference.networking.k8s.io/v1: the Gateway API
	// Inference Extension release kvgate's discovery is built against.
	{"sigs.k8s.io/gateway-api-inference-extension", "v1.6.2", []string{
		"config/crd/bases/inference.networking.k8s.io_inferencepools.yaml",
	}},
	// InferenceObjective, inference.networking.x-k8s.io/v1alpha2: v1.5.0 is
	// the last GIE release that carries it (v1.6 moved it, with the EPP, to
	// llm-d/llm-d-router, which the module proxy here does not serve).
	{"sigs.k8s.io/gateway-api-inference-extension", "v1.5.0", []string{
		"config/crd/bases/inference.networking.x-k8s.io_inferenceobjectives.yaml",
	}},
	// HTTPRoute, Gateway, ReferenceGrant, … (the standard channel).
	{"sigs.k8s.io/gateway-api", "v1.6.3", []string{"config/crd/standard"}},
}

// crdPaths downloads (or finds in the module cache) each source module and
// returns the CRD paths inside it.
func crdPaths(t testing.TB) []string {
	t.Helper()
	var paths []string
	for _, s := range crdSources {
		cmd := exec.Command("go", "mod", "download", "-json", s.module+"@"+s.version)
		cmd.Dir = assetsDir()
		cmd.Env = append(os.Environ(), "GOWORK=off")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kubeapi: go mod download %s@%s: %v", s.module, s.version, err)
		}
		var m struct{ Dir, Error string }
		if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
			t.Fatalf("kubeapi: go mod download %s@%s: %s %v", s.module, s.version, m.Error, err)
		}
		for _, f := range s.files {
			paths = append(paths, filepath.Join(m.Dir, f))
		}
	}
	return paths
}
