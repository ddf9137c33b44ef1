//go:build kubeapiserver

package actuate

// Against a real API server (lab/testkit/kubeapi: kube-apiserver and
// etcd built from the Go modules, `make kube-test`), so that the scale
// subresource, merge patches, discovery-based kind mapping and RBAC are the
// server's, not client-go's fakes. The actuator runs as the planner's own
// ServiceAccount with planner-sidecar/rbac.yaml applied: a permission the
// manifest lacks fails here.

import (
	"context"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvgate/kvgate/lab/testkit/kubeapi"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

func TestKubernetesAgainstRealAPIServer(t *testing.T) {
	srv := kubeapi.Start(t)
	ctx := context.Background()
	cs := srv.Clientset
	// rbac.yaml names namespace llm.
	srv.Namespace(t, "llm")
	manifest, err := os.ReadFile("../rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Apply(t, manifest, "llm", "kvgate-test"); err != nil {
		t.Fatalf("rbac.yaml refused by the API server: %v", err)
	}

	one := int32(1)
	labels := map[string]string{"app": "decode"}
	if _, err := cs.AppsV1().Deployments("llm").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "decode"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller-manager, scheduler or kubelet runs: the test plays them.
	kubeapi.CreatePod(t, cs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "decode-a", Namespace: "llm", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}}})
	kubeapi.SetPodReady(t, cs, "llm", "decode-a", "10.1.2.3", true)

	planner := srv.ServiceAccount(t, "llm", "kvgate-planner")
	targets := map[string]Target{"decode": {Group: "apps", Kind: "Deployment", Name: "decode", Namespace: "llm", PodSelector: "app=decode"}}
	k, err := KubernetesFromKubeconfig(planner.Kubeconfig, targets)
	if err != nil {
		t.Fatal(err)
	}
	if cur, err := k.Current(ctx); err != nil || cur["decode"] != 1 {
		t.Fatalf("current %v %v", cur, err)
	}
	if err := k.Apply(ctx, plan.Decision{Desired: map[string]int{"decode": 3}, Drain: map[string][]string{"decode": {"10.1.2.3:8000"}}}); err != nil {
		t.Fatalf("apply as the planner's ServiceAccount: %v", err)
	}
	d, err := cs.AppsV1().Deployments("llm").Get(ctx, "decode", metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 3 {
		t.Fatalf("replicas after scale-up: %v %v", d.Spec.Replicas, err)
	}
	// Drain: the pod is marked for discovery (label) and for the
	// ReplicaSet controller's scale-down choice (deletion cost).
	p, err := cs.CoreV1().Pods("llm").Get(ctx, "decode-a", metav1.GetOptions{})
	if err != nil || p.Labels[DrainingLabel] != "true" || p.Annotations[DeletionCostAnnotation] != "-1000" {
		t.Fatalf("drained pod %v %v (%v)", p.Labels, p.Annotations, err)
	}
	if cur, err := k.Current(ctx); err != nil || cur["decode"] != 3 {
		t.Fatalf("current after scale-up %v %v", cur, err)
	}
	if err := k.Apply(ctx, plan.Decision{Desired: map[string]int{"decode": 1}}); err != nil {
		t.Fatal(err)
	}
	if d, _ = cs.AppsV1().Deployments("llm").Get(ctx, "decode", metav1.GetOptions{}); *d.Spec.Replicas != 1 {
		t.Fatalf("replicas after scale-down: %d", *d.Spec.Replicas)
	}

	// Exactly what the actuator needs (rbac.yaml's comment): each verb the
	// code calls is allowed, and nothing beside it, as the server decides.
	sa := "system:serviceaccount:llm:kvgate-planner"
	for _, c := range []struct {
		group, resource, sub, verb string
		allowed                    bool
	}{
		{"apps", "deployments", "scale", "get", true},
		{"apps", "deployments", "scale", "update", true},
		{"apps", "deployments", "scale", "patch", true},
		{"apps", "statefulsets", "scale", "get", true},
		{"apps", "statefulsets", "scale", "update", true},
		{"", "pods", "", "list", true},
		{"", "pods", "", "get", true},
		{"", "pods", "", "patch", true},
		{"apps", "deployments", "", "update", false},
		{"apps", "deployments", "", "delete", false},
		{"", "pods", "", "delete", false},
		{"", "pods", "exec", "create", false},
		{"", "secrets", "", "get", false},
		{"", "configmaps", "", "list", false},
	} {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:llm", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "llm", Group: c.group, Resource: c.resource,
				Subresource: c.sub, Verb: c.verb},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != c.allowed {
			t.Errorf("%s %s/%s/%s: allowed %v, want %v (%s)", c.verb, c.group, c.resource, c.sub, sar.Status.Allowed, c.allowed, sar.Status.Reason)
		}
	}
	// And in another namespace nothing.
	other, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: sa, ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "default", Group: "apps", Resource: "deployments", Subresource: "scale", Verb: "update"},
	}}, metav1.CreateOptions{})
	if err != nil || other.Status.Allowed {
		t.Fatalf("scale in another namespace allowed=%v err=%v", other.Status.Allowed, err)
	}
}

// Errors name the pool and what failed, as the server words it; a pool that
// can be scaled is scaled even when another cannot.
func TestKubernetesErrorsNameThePoolAgainstRealAPIServer(t *testing.T) {
	srv := kubeapi.Start(t)
	ctx := context.Background()
	srv.Namespace(t, "llm")
	one := int32(1)
	labels := map[string]string{"app": "prefill"}
	if _, err := srv.Clientset.AppsV1().Deployments("llm").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "prefill"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod of another workload shares the IP the drain names: only the
	// target's selector counts.
	kubeapi.CreatePod(t, srv.Clientset, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "llm", Labels: map[string]string{"app": "other"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}})
	kubeapi.SetPodReady(t, srv.Clientset, "llm", "other", "10.9.9.9", true)
	k, err := KubernetesFromKubeconfig(srv.Kubeconfig, map[string]Target{
		"prefill":    {Group: "apps", Kind: "Deployment", Name: "prefill", Namespace: "llm", PodSelector: "app=prefill"},
		"decode":     {Group: "apps", Kind: "Deployment", Name: "missing", Namespace: "llm"},
		"aggregated": {Group: "example.com", Kind: "Unknown", Name: "x", Namespace: "llm"},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = k.Apply(ctx, plan.Decision{
		Desired: map[string]int{"prefill": 2, "decode": 2, "aggregated": 1},
		Drain:   map[string][]string{"prefill": {"10.9.9.9:80"}},
	})
	for _, want := range []string{"pool decode: scale llm/missing to 2", "not found", "pool prefill: drain 10.9.9.9:80: no pod with IP 10.9.9.9", "pool aggregated", "Unknown.example.com"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	d, err := srv.Clientset.AppsV1().Deployments("llm").Get(ctx, "prefill", metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 2 {
		t.Fatalf("the pool that could be scaled was not: %v %v", d.Spec.Replicas, err)
	}
	p, _ := srv.Clientset.CoreV1().Pods("llm").Get(ctx, "other", metav1.GetOptions{})
	if p.Labels[DrainingLabel] != "" {
		t.Fatalf("a pod outside the target's selector was marked: %v", p.Labels)
	}
}
