package discovery

// Helpers and the pure tests of label and EndpointSlice discovery; the
// tests that watch run against a real API server (kubernetes_kubeapi_test.go,
// build tag kubeapiserver): no client-go fake is left.

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
)

const ns = "llm"

func readyPod(name, ip string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbls},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "vllm",
			Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}, {Name: "http", ContainerPort: 8000}},
		}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			PodIP: ip,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			},
		},
	}
}

func setReady(p *corev1.Pod, ready bool) *corev1.Pod {
	p = p.DeepCopy()
	s := corev1.ConditionFalse
	if ready {
		s = corev1.ConditionTrue
	}
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			p.Status.Conditions[i].Status = s
		}
	}
	return p
}

func vllmLabels(role string) map[string]string {
	l := map[string]string{"app": "vllm", kubeselect.DefaultModelLabel: "llama"}
	if role != "" {
		l[kubeselect.DefaultRoleLabel] = role
	}
	return l
}

func ptr[T any](v T) *T { return &v }

func slice(name string, lbls map[string]string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	l := map[string]string{discoveryv1.LabelServiceName: "vllm"}
	for k, v := range lbls {
		l[k] = v
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8000))}, {Name: ptr("grpc"), Port: ptr(int32(9000))}},
		Endpoints:   eps,
	}
}

func TestSlicePortChoice(t *testing.T) {
	s := slice("s", nil)
	c := kubeselect.Config{}.WithDefaults()
	if _, err := slicePort(s, c); err == nil {
		t.Error("two ports and no port name: accepted")
	}
	c.PortName = "grpc"
	if p, err := slicePort(s, c); err != nil || p != 9000 {
		t.Errorf("port named grpc: %d, %v", p, err)
	}
	c.PortName = "nope"
	if _, err := slicePort(s, c); err == nil {
		t.Error("missing port name: accepted")
	}
	s.Ports = s.Ports[:1]
	c.PortName = ""
	if p, err := slicePort(s, c); err != nil || p != 8000 {
		t.Errorf("only port: %d, %v", p, err)
	}
}
