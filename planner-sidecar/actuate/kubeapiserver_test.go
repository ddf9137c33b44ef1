//go:build kubeapiserver

package actuate

// Runs only with -tags kubeapiserver and kube-apiserver and etcd on PATH
// (they are not in the default test environment): a real API server, so
// the scale subresource, merge patches and discovery-based kind mapping
// are the server's, not client-go's fakes.

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kvgate/kvgate/internal/testkit/freeport"
	"github.com/kvgate/kvgate/internal/testkit/poll"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

func start(t *testing.T, name string, args ...string) {
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not on PATH (this test needs it; run without -tags kubeapiserver otherwise)", name)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
}

func TestKubernetesAgainstRealAPIServer(t *testing.T) {
	dir := t.TempDir()
	etcdPort, peerPort, apiPort := freeport.Pick(t), freeport.Pick(t), freeport.Pick(t)
	start(t, "etcd", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort))
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	keyFile := filepath.Join(dir, "sa.key")
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
	tokens := filepath.Join(dir, "tokens.csv")
	os.WriteFile(tokens, []byte("planner-test-token,admin,1,system:masters\n"), 0o600)
	start(t, "kube-apiserver",
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--secure-port", fmt.Sprint(apiPort), "--bind-address", "127.0.0.1", "--cert-dir", filepath.Join(dir, "certs"),
		"--token-auth-file", tokens, "--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kvgate.test", "--service-account-key-file", keyFile,
		"--service-account-signing-key-file", keyFile, "--service-cluster-ip-range", "10.96.0.0/16")
	kubeconfig := filepath.Join(dir, "kubeconfig")
	os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: t, cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}}]
users: [{name: t, user: {token: planner-test-token}}]
contexts: [{name: t, context: {cluster: t, user: t}}]
current-context: t
`, apiPort)), 0o600)

	targets := map[string]Target{"decode": {Group: "apps", Kind: "Deployment", Name: "decode", Namespace: "default", PodSelector: "app=decode"}}
	var k *Kubernetes
	var cs *kubernetes.Clientset
	ctx := context.Background()
	poll.Until(t, "the API server ready", 60*time.Second, func() error {
		var err error
		if k, err = KubernetesFromKubeconfig(kubeconfig, targets); err != nil {
			return err
		}
		cs = k.pods.(*kubernetes.Clientset)
		_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	one := int32(1)
	labels := map[string]string{"app": "decode"}
	_, err := cs.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "decode"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No scheduler or kubelet runs: the pod is created directly and its IP
	// set through the status subresource, as a kubelet would.
	p, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "decode-a", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.PodIP = "10.1.2.3"
	p.Status.PodIPs = []corev1.PodIP{{IP: "10.1.2.3"}}
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if cur, err := k.Current(ctx); err != nil || cur["decode"] != 1 {
		t.Fatalf("current %v %v", cur, err)
	}
	if err := k.Apply(ctx, plan.Decision{Desired: map[string]int{"decode": 3}, Drain: map[string][]string{"decode": {"10.1.2.3:8000"}}}); err != nil {
		t.Fatal(err)
	}
	d, _ := cs.AppsV1().Deployments("default").Get(ctx, "decode", metav1.GetOptions{})
	if *d.Spec.Replicas != 3 {
		t.Fatalf("replicas %d", *d.Spec.Replicas)
	}
	p, _ = cs.CoreV1().Pods("default").Get(ctx, "decode-a", metav1.GetOptions{})
	if p.Labels[DrainingLabel] != "true" || p.Annotations[DeletionCostAnnotation] != "-1000" {
		t.Fatalf("pod %v %v", p.Labels, p.Annotations)
	}
}
