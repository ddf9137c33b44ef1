package discovery

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

func withEngine(lbls map[string]string, key, kind string) map[string]string {
	lbls[key] = kind
	return lbls
}

func kindsOf(ws []kvfleet.Worker) map[string]string {
	m := map[string]string{}
	for _, w := range ws {
		m[w.ID.Endpoint] = w.Kind
	}
	return m
}

// A discovered worker's engine kind (which KV-event format its stream is
// decoded in) comes from GIE's engine-type pod label, or the section's
// default_engine for pods without it; a pod labelled with a kind kvgate
// does not know is skipped with the reason, not decoded as vLLM. Pods,
// EndpointSlices (the Service's labels) and InferencePools all read it.
func TestDiscoveredWorkersCarryTheirEngineKind(t *testing.T) {
	key := kubeselect.DefaultEngineLabel
	trt := readyPod("trt", "10.2.0.1", withEngine(vllmLabels(""), key, "trtllm"))
	sgl := readyPod("sgl", "10.2.0.2", withEngine(vllmLabels(""), key, "sglang"))
	plain := readyPod("plain", "10.2.0.3", vllmLabels(""))
	odd := readyPod("odd", "10.2.0.4", withEngine(vllmLabels(""), key, "tensorflow"))
	pods := []*corev1.Pod{trt, sgl, plain, odd}

	c := kubeselect.Config{Namespace: ns, LabelSelector: "app=vllm", PortName: "http"}.WithDefaults()
	ws, skipped := workersFromPods(pods, c)
	want := map[string]string{"10.2.0.1:8000": "trtllm", "10.2.0.2:8000": "sglang", "10.2.0.3:8000": ""}
	if got := kindsOf(ws); len(got) != len(want) || got["10.2.0.1:8000"] != "trtllm" || got["10.2.0.2:8000"] != "sglang" || got["10.2.0.3:8000"] != "" {
		t.Fatalf("pods: kinds %v, want %v", got, want)
	}
	if r := strings.Join(skipped, "\n"); !strings.Contains(r, "pod odd: label "+key+": unknown engine kind \"tensorflow\"") {
		t.Fatalf("pods: skip reasons %q lack the unknown kind", r)
	}

	// default_engine stands in for a missing label; a custom label key is read.
	c.DefaultEngine = "sglang"
	ws, _ = workersFromPods([]*corev1.Pod{plain}, c)
	if len(ws) != 1 || ws[0].Kind != "sglang" {
		t.Fatalf("default_engine sglang: %+v", ws)
	}
	c.EngineLabel = "example.com/engine"
	ws, _ = workersFromPods([]*corev1.Pod{readyPod("own", "10.2.0.5", withEngine(vllmLabels(""), "example.com/engine", "trtllm"))}, c)
	if len(ws) != 1 || ws[0].Kind != "trtllm" {
		t.Fatalf("engine_label example.com/engine: %+v", ws)
	}

	sc := kubeselect.Config{Namespace: ns, Service: "vllm", PortName: "http"}.WithDefaults()
	ws, _ = workersFromSlices([]*discoveryv1.EndpointSlice{
		slice("s", withEngine(map[string]string{kubeselect.DefaultModelLabel: "llama"}, key, "trtllm"),
			discoveryv1.Endpoint{Addresses: []string{"10.3.0.1"}}),
	}, sc)
	if len(ws) != 1 || ws[0].Kind != "trtllm" {
		t.Fatalf("endpoint slices: %+v", ws)
	}

	pc := kubeselect.InferencePool{Name: "pool", Namespace: ns, EventsPort: 5557, DefaultEngine: "sglang"}
	ws, skipped = workersFromPool(testPool(map[string]string{"app": "vllm"}, 8000), pods, pc)
	got := kindsOf(ws)
	if len(got) != 3 || got["10.2.0.1:8000"] != "trtllm" || got["10.2.0.2:8000"] != "sglang" || got["10.2.0.3:8000"] != "sglang" {
		t.Fatalf("pool: kinds %v, want trtllm, sglang and the default sglang", got)
	}
	if r := strings.Join(skipped, "\n"); !strings.Contains(r, "pod odd: label "+key) {
		t.Fatalf("pool: skip reasons %q lack the unknown kind", r)
	}
}

// The keys are validated where the section is: a default kind kvgate
// does not know, or a label key that is not a Kubernetes label name, is
// refused naming the key.
func TestEngineKeysAreValidated(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{kubeselect.Config{Namespace: ns, LabelSelector: "app=vllm", Port: 8000, DefaultEngine: "tgi"}.Validate(), "kubernetes.default_engine"},
		{kubeselect.Config{Namespace: ns, LabelSelector: "app=vllm", Port: 8000, EngineLabel: "bad key!"}.Validate(), "kubernetes.engine_label"},
		{kubeselect.InferencePool{Name: "pool", DefaultEngine: "tgi"}.Validate(), "inference_pool.default_engine"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("got %v, want an error naming %s", tc.err, tc.want)
		}
	}
	for _, kind := range []string{"", "vllm", "sglang", "trtllm"} {
		if err := (kubeselect.InferencePool{Name: "pool", DefaultEngine: kind}).Validate(); err != nil {
			t.Errorf("default_engine %q: %v", kind, err)
		}
	}
}
