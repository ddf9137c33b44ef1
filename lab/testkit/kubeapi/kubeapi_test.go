//go:build kubeapiserver

package kubeapi

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
)

// The kit's own check: the server answers, the upstream CRDs are served, and
// the kubelet stand-ins move a pod through the states discovery reads.
func TestServerRunsPodLifecycleAndServesCRDs(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"},
		{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Resource: "inferenceobjectives"},
		{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"},
	} {
		if _, err := s.Dynamic.Resource(gvr).Namespace("default").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("%s not served: %v", gvr, err)
		}
	}

	s.Namespace(t, "kit")
	CreatePod(t, s.Clientset, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "kit"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "engine"}}},
	})
	SetPodReady(t, s.Clientset, "kit", "p", "10.1.0.7", true)
	p, err := s.Clientset.CoreV1().Pods("kit").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.PodIP != "10.1.0.7" || p.Status.Conditions[3].Status != corev1.ConditionTrue {
		t.Fatalf("status not written: %+v", p.Status)
	}
	// A bound pod's delete is graceful: it stays, terminating, until the
	// kubelet's final delete.
	if err := s.Clientset.CoreV1().Pods("kit").Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err = s.Clientset.CoreV1().Pods("kit").Get(ctx, "p", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("pod after graceful delete: %v, deletionTimestamp %v", err, p.GetDeletionTimestamp())
	}
	FinishPodDeletion(t, s.Clientset, "kit", "p")
	if _, err := s.Clientset.CoreV1().Pods("kit").Get(ctx, "p", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod still there after the final delete: %v", err)
	}

	// Server-side apply, and the server's own validation refusing a bad
	// object (an InferencePool without a selector breaks its CRD schema).
	good := []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: applied}
data: {a: b}
---
apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: pool}
spec:
  selector: {matchLabels: {app: engine}}
  targetPorts: [{number: 8000}]
  endpointPickerRef: {name: kvgate-extproc, port: {number: 9002}}
`)
	if err := s.Apply(t, good, "kit", "kvgate-test"); err != nil {
		t.Fatalf("apply: %v", err)
	}
	bad := []byte(`apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: broken}
spec:
  targetPorts: [{number: 8000}]
`)
	if err := s.Apply(t, bad, "kit", "kvgate-test"); err == nil {
		t.Fatal("an InferencePool without a selector was accepted")
	}
	// A user without any role binding is refused: RBAC is on.
	nobody, err := kubernetes.NewForConfig(s.User(t, "nobody").Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nobody.CoreV1().Pods("kit").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing pods as a user with no role: got %v, want Forbidden", err)
	}
}
