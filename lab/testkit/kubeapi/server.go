//go:build kubeapiserver

// Package kubeapi runs a real Kubernetes API server for tests: kube-apiserver
// and etcd built from the Go modules (assets/, never a downloaded binary),
// started on free loopback ports by controller-runtime's envtest, with the
// upstream CRDs kvgate uses installed from their own modules' manifests. No
// kubelet or controller-manager runs: tests play them (kubelet.go).
package kubeapi

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Server is a running API server.
type Server struct {
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	// Kubeconfig is a kubeconfig file holding Config, for code that takes a
	// path (kvgate's discovery and planner do).
	Kubeconfig string
	Clientset  kubernetes.Interface
	Dynamic    dynamic.Interface
	// Mapper maps kinds to resources from the server's own discovery, so
	// that CRDs installed after start are found once they are served.
	Mapper *restmapper.DeferredDiscoveryRESTMapper

	env *envtest.Environment
}

// Start runs etcd and kube-apiserver for the test and stops them in its
// cleanup. The first call on a machine builds the binaries (minutes).
func Start(t testing.TB) *Server {
	t.Helper()
	env := &envtest.Environment{
		BinaryAssetsDirectory: binaries(t),
		CRDDirectoryPaths:     crdPaths(t),
		ErrorIfCRDPathMissing: true,
		// A loaded 2-core machine starts a cold API server in tens of
		// seconds; envtest's 20 s default fails there for no fault of ours.
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	if os.Getenv("KVGATE_KUBE_LOG") != "" {
		env.AttachControlPlaneOutput = true
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		t.Fatalf("kubeapi: starting etcd and kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("kubeapi: stopping the control plane: %v", err)
		}
	})
	s := &Server{Config: cfg, env: env}
	if s.Clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatalf("kubeapi: %v", err)
	}
	if s.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatalf("kubeapi: %v", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatalf("kubeapi: %v", err)
	}
	s.Mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	s.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(s.Kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatalf("kubeapi: %v", err)
	}
	return s
}

// Identity is a client authenticated as one user name in some groups (a
// client certificate the API server trusts), for running kvgate's code as a
// particular identity and checking what RBAC lets it do.
type Identity struct {
	Config *rest.Config
	// Kubeconfig is a kubeconfig file holding Config.
	Kubeconfig string
}

// User provisions an identity. A ServiceAccount is the user
// "system:serviceaccount:NAMESPACE:NAME" in the groups
// "system:serviceaccounts" and "system:serviceaccounts:NAMESPACE" (what the
// API server's token authenticator reports for it: k8s.io/apiserver
// pkg/authentication/serviceaccount/util.go, UserInfo), so RBAC bindings to
// a ServiceAccount subject apply to it exactly.
func (s *Server) User(t testing.TB, name string, groups ...string) Identity {
	t.Helper()
	u, err := s.env.AddUser(envtest.User{Name: name, Groups: groups}, &rest.Config{QPS: 1000, Burst: 2000})
	if err != nil {
		t.Fatalf("kubeapi: adding user %s: %v", name, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatalf("kubeapi: kubeconfig for %s: %v", name, err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatalf("kubeapi: %v", err)
	}
	return Identity{Config: u.Config(), Kubeconfig: path}
}

// ServiceAccount is User for the ServiceAccount namespace/name.
func (s *Server) ServiceAccount(t testing.TB, namespace, name string) Identity {
	return s.User(t, "system:serviceaccount:"+namespace+":"+name,
		"system:serviceaccounts", "system:serviceaccounts:"+namespace, "system:authenticated")
}

// Namespace creates namespace name (a test's own, so that tests sharing a
// server do not see each other's objects).
func (s *Server) Namespace(t testing.TB, name string) {
	t.Helper()
	_, err := s.Clientset.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("kubeapi: creating namespace %s: %v", name, err)
	}
}
