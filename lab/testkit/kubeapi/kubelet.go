//go:build kubeapiserver

package kubeapi

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// FakeNode is the node name CreatePod binds pods to. No Node object is
// needed: the API server does not check spec.nodeName on create.
const FakeNode = "kvgate-test-node"

// CreatePod creates pod already bound to FakeNode, as the scheduler would
// have bound it. Binding matters for deletion: the API server deletes an
// unbound pod at once, but a bound one only gets a deletionTimestamp and
// stays until its kubelet confirms (k8s.io/kubernetes
// pkg/registry/core/pod/strategy.go, podStrategy.CheckGracefulDelete sets a
// zero grace period when spec.nodeName is empty), which is the terminating
// state discovery must see.
func CreatePod(t testing.TB, cs kubernetes.Interface, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	pod = pod.DeepCopy()
	if pod.Spec.NodeName == "" {
		pod.Spec.NodeName = FakeNode
	}
	out, err := cs.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubeapi: creating pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return out
}

// SetPodReady writes the pod's status as the kubelet's status manager does
// (k8s.io/kubernetes pkg/kubelet/status/status_manager.go, through the
// pods/status subresource): phase Running, the pod IP, and the Ready and
// ContainersReady conditions set to ready.
func SetPodReady(t testing.TB, cs kubernetes.Interface, namespace, name, podIP string, ready bool) {
	t.Helper()
	ctx := context.Background()
	pod, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("kubeapi: getting pod %s/%s: %v", namespace, name, err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.NewTime(time.Now())
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = podIP
	pod.Status.PodIPs = []corev1.PodIP{{IP: podIP}}
	pod.Status.HostIP = "127.0.0.1"
	if pod.Status.StartTime == nil {
		pod.Status.StartTime = &now
	}
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: status, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: status, LastTransitionTime: now},
	}
	if _, err := cs.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("kubeapi: updating pod status %s/%s: %v", namespace, name, err)
	}
}

// FinishPodDeletion removes a pod whose graceful deletion has begun, as its
// kubelet does once the containers have stopped: a delete with grace period
// zero (pkg/kubelet/status/status_manager.go, syncPod's final delete).
func FinishPodDeletion(t testing.TB, cs kubernetes.Interface, namespace, name string) {
	t.Helper()
	zero := int64(0)
	if err := cs.CoreV1().Pods(namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatalf("kubeapi: final delete of pod %s/%s: %v", namespace, name, err)
	}
}
