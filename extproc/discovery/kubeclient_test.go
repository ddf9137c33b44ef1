package discovery

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// fromAPI is obj as the dynamic client hands it over: its JSON (what the
// API server sends) decoded by the unstructured codec.
func fromAPI(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	u, _, err := unstructured.UnstructuredJSONScheme.Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return u.(*unstructured.Unstructured)
}

// Each watched kind comes back from its unstructured form as the typed
// client would have decoded it: every field the worker computation reads
// (conditions, ports, pointers, selectors, deletion timestamps) intact.
func TestToTypedMatchesTypedDecoding(t *testing.T) {
	deleting := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	pod := setReady(readyPod("a", "10.0.0.1", map[string]string{"app": "vllm", "kvgate.io/model": "qwen"}), true)
	pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	pod.DeletionTimestamp = &deleting
	pod.Annotations = map[string]string{"kvgate.io/draining": "true"}

	serving, terminating, port, name := true, true, int32(8000), "http"
	slice := &discoveryv1.EndpointSlice{
		TypeMeta:    metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta:  metav1.ObjectMeta{Name: "vllm-x", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "vllm"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.2"},
			Conditions: discoveryv1.EndpointConditions{Serving: &serving, Terminating: &terminating}}},
		Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}

	pool := testPool(map[string]string{"app": "vllm"}, 8000, 8001)
	pool.TypeMeta = metav1.TypeMeta{APIVersion: "inference.networking.k8s.io/v1", Kind: "InferencePool"}

	for _, c := range []struct {
		want    runtime.Object
		convert func(any) (any, error)
	}{
		{pod, toTyped[corev1.Pod]},
		{slice, toTyped[discoveryv1.EndpointSlice]},
		{pool, toTyped[giev1.InferencePool]},
	} {
		got, err := c.convert(fromAPI(t, c.want))
		if err != nil {
			t.Fatalf("%T: %v", c.want, err)
		}
		// Semantic: a timestamp read back from JSON is the same instant in
		// another *time.Location.
		if !apiequality.Semantic.DeepEqual(got, c.want) {
			t.Errorf("%T:\n got %+v\nwant %+v", c.want, got, c.want)
		}
	}

	// InferenceObjective stays unstructured (no Go type in the GIE module).
	u := objective("batch", "qwen-pool", int64(-1))
	if got, err := toTyped[unstructured.Unstructured](u); err != nil || got != u {
		t.Errorf("unstructured: got %v, %v; want the same object", got, err)
	}
	// A tombstone passes through untouched.
	tomb := struct{ Key string }{"llm/a"}
	if got, err := toTyped[corev1.Pod](tomb); err != nil || got != tomb {
		t.Errorf("tombstone: got %v, %v", got, err)
	}
}

// The informer's cache holds the converted objects; listCached selects by
// label as a typed lister does and getCached finds one by name.
func TestInformerCacheHoldsTypedObjects(t *testing.T) {
	client, err := dynamic.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"}) // never started: no request is made
	if err != nil {
		t.Fatal(err)
	}
	inf := informerFor[corev1.Pod](client, podResource, ns, 0, nil)
	a := readyPod("a", "10.0.0.1", map[string]string{"app": "vllm"})
	b := readyPod("b", "10.0.0.2", map[string]string{"app": "other"})
	for _, p := range []*corev1.Pod{a, b} {
		p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		typed, err := toTyped[corev1.Pod](fromAPI(t, p))
		if err != nil {
			t.Fatal(err)
		}
		if err := inf.GetStore().Add(typed); err != nil {
			t.Fatal(err)
		}
	}
	sel, err := labels.Parse("app=vllm")
	if err != nil {
		t.Fatal(err)
	}
	got := listCached[corev1.Pod](inf, sel)
	if len(got) != 1 || got[0].Name != "a" || got[0].Status.PodIP != "10.0.0.1" {
		t.Fatalf("listCached(app=vllm) = %+v, want pod a", got)
	}
	if all := listCached[corev1.Pod](inf, labels.Everything()); len(all) != 2 {
		t.Fatalf("listCached(everything) = %d pods, want 2", len(all))
	}
	if p := getCached[corev1.Pod](inf, ns, "b"); p == nil || p.Status.PodIP != "10.0.0.2" {
		t.Fatalf("getCached(b) = %+v", p)
	}
	if p := getCached[corev1.Pod](inf, ns, "gone"); p != nil {
		t.Fatalf("getCached(gone) = %+v, want nil", p)
	}
}
