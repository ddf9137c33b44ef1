package discovery

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

func testPool(selector map[string]string, ports ...int) *giev1.InferencePool {
	p := &giev1.InferencePool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns}}
	p.Spec.Selector.MatchLabels = map[giev1.LabelKey]giev1.LabelValue{}
	for k, v := range selector {
		p.Spec.Selector.MatchLabels[giev1.LabelKey(k)] = giev1.LabelValue(v)
	}
	for _, n := range ports {
		p.Spec.TargetPorts = append(p.Spec.TargetPorts, giev1.Port{Number: giev1.PortNumber(n)})
	}
	return p
}

func poolWorker(ep, events, replay string, draining bool) kvfleet.Worker {
	return kvfleet.Worker{ID: kvfleet.WorkerID{Endpoint: ep}, Model: "llama", Role: kvfleet.RoleBoth, Draining: draining, Events: events, Replay: replay}
}

// Each ready selected pod times each target port is a worker; target port
// i's events and replay ports are the base + i; not ready, unselected and
// other-namespace pods stay out; a terminating or kvgate.io/draining pod
// drains.
func TestWorkersFromPool(t *testing.T) {
	cfg := kubeselect.InferencePool{Name: "pool", Namespace: ns, EventsPort: 5557, ReplayPort: 5600}
	pool := testPool(map[string]string{"app": "vllm"}, 8000, 8001)
	a := readyPod("a", "10.1.0.1", vllmLabels(""))
	b := readyPod("b", "10.1.0.2", vllmLabels(""))
	now := metav1.Now()
	b.DeletionTimestamp = &now
	c := setReady(readyPod("c", "10.1.0.3", vllmLabels("")), false)
	d := readyPod("d", "10.1.0.4", map[string]string{"app": "web", kubeselect.DefaultModelLabel: "llama"})
	e := readyPod("e", "10.1.0.5", vllmLabels(""))
	e.Namespace = "elsewhere"
	f := readyPod("f", "10.1.0.6", vllmLabels(""))
	f.Annotations = map[string]string{kubeselect.DrainingKey: "true", kubeselect.EventsPortAnnotation: "7000", kubeselect.ReplayPortAnnotation: "0"}

	ws, skipped := workersFromPool(pool, []*corev1.Pod{f, e, d, c, b, a}, cfg)
	want := []kvfleet.Worker{
		poolWorker("10.1.0.1:8000", "tcp://10.1.0.1:5557", "tcp://10.1.0.1:5600", false),
		poolWorker("10.1.0.1:8001", "tcp://10.1.0.1:5558", "tcp://10.1.0.1:5601", false),
		poolWorker("10.1.0.2:8000", "tcp://10.1.0.2:5557", "tcp://10.1.0.2:5600", true),
		poolWorker("10.1.0.2:8001", "tcp://10.1.0.2:5558", "tcp://10.1.0.2:5601", true),
		poolWorker("10.1.0.6:8000", "tcp://10.1.0.6:7000", "", true),
		poolWorker("10.1.0.6:8001", "tcp://10.1.0.6:7001", "", true),
	}
	if !slices.Equal(ws, want) || len(skipped) != 0 {
		t.Fatalf("workers:\n %+v\nwant:\n %+v\nskipped %v", ws, want, skipped)
	}

	// A changed selector re-selects from the same pods; one port fewer
	// drops that port's workers.
	pool2 := testPool(map[string]string{"app": "web"}, 8000)
	ws, _ = workersFromPool(pool2, []*corev1.Pod{a, d}, cfg)
	if want := []kvfleet.Worker{poolWorker("10.1.0.4:8000", "tcp://10.1.0.4:5557", "tcp://10.1.0.4:5600", false)}; !slices.Equal(ws, want) {
		t.Fatalf("after selector change: %+v, want %+v", ws, want)
	}

	// A pool whose selector is empty selects nothing, not everything.
	if ws, _ := workersFromPool(testPool(nil, 8000), []*corev1.Pod{a}, cfg); len(ws) != 0 {
		t.Errorf("empty selector selected %+v", ws)
	}
}

// Pods that cannot be used are skipped with a reason that names the pod
// and the fault; the others still count.
func TestWorkersFromPoolSkips(t *testing.T) {
	cfg := kubeselect.InferencePool{Name: "pool", Namespace: ns, EventsPort: 5557}
	pool := testPool(map[string]string{"app": "vllm"}, 8000, 8001)
	good := readyPod("good", "10.1.0.1", vllmLabels(""))
	noModel := readyPod("nomodel", "10.1.0.2", map[string]string{"app": "vllm"})
	badAnn := readyPod("badann", "10.1.0.3", vllmLabels(""))
	badAnn.Annotations = map[string]string{kubeselect.EventsPortAnnotation: "http"}
	tooHigh := readyPod("toohigh", "10.1.0.4", vllmLabels(""))
	tooHigh.Annotations = map[string]string{kubeselect.ReplayPortAnnotation: "65535"}
	badRole := readyPod("badrole", "10.1.0.5", map[string]string{"app": "vllm", kubeselect.DefaultModelLabel: "llama", kubeselect.DefaultRoleLabel: "chef"})
	dup := readyPod("zdup", "10.1.0.1", vllmLabels(""))
	noIP := readyPod("noip", "", vllmLabels(""))

	ws, skipped := workersFromPool(pool, []*corev1.Pod{good, noModel, badAnn, tooHigh, badRole, dup, noIP}, cfg)
	want := []kvfleet.Worker{
		poolWorker("10.1.0.1:8000", "tcp://10.1.0.1:5557", "", false),
		poolWorker("10.1.0.1:8001", "tcp://10.1.0.1:5558", "", false),
	}
	if !slices.Equal(ws, want) {
		t.Fatalf("workers %+v, want %+v", ws, want)
	}
	reasons := strings.Join(skipped, "\n")
	for _, frag := range []string{"pod nomodel: no model label", "pod badann: annotation kvgate.io/events-port=\"http\"",
		"pod toohigh: annotation kvgate.io/replay-port=65535", "pod badrole: role", "pod zdup: endpoint 10.1.0.1:8000 already taken",
		"pod noip: bad pod IP"} {
		if !strings.Contains(reasons, frag) {
			t.Errorf("skip reasons lack %q:\n%s", frag, reasons)
		}
	}

	// The configured model stands in for a missing label.
	cfg.Model = "llama"
	if ws, _ := workersFromPool(pool, []*corev1.Pod{noModel}, cfg); len(ws) != 2 || ws[0].Model != "llama" {
		t.Errorf("default model: %+v", ws)
	}
}

func objective(name, pool string, priority any) *unstructured.Unstructured {
	spec := map[string]any{"poolRef": map[string]any{"name": pool}}
	if priority != nil {
		spec["priority"] = priority
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.x-k8s.io/v1alpha2", "kind": "InferenceObjective",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
	}}
}

// An objective counts when its poolRef names the pool (and its group);
// no priority is 0, GIE's default; a deleted one or another pool's does
// not count; an unreadable priority is skipped with a reason.
func TestObjectivePriorities(t *testing.T) {
	cfg := kubeselect.InferencePool{Name: "pool", Namespace: ns}
	otherGroup := objective("othergroup", "pool", int64(9))
	unstructured.SetNestedField(otherGroup.Object, "example.com", "spec", "poolRef", "group")
	explicitGroup := objective("explicit", "pool", int64(3))
	unstructured.SetNestedField(explicitGroup.Object, kubeselect.InferencePoolGroup, "spec", "poolRef", "group")
	deleted := objective("deleted", "pool", int64(7))
	now := metav1.Now()
	deleted.SetDeletionTimestamp(&now)
	got, skipped := objectivePriorities([]*unstructured.Unstructured{
		objective("critical", "pool", int64(10)), objective("batch", "pool", int64(-1)), objective("plain", "pool", nil),
		objective("foreign", "other", int64(5)), otherGroup, explicitGroup, deleted, objective("bad", "pool", "high"),
	}, cfg)
	want := map[string]int{"critical": 10, "batch": -1, "plain": 0, "explicit": 3}
	if len(got) != len(want) {
		t.Fatalf("priorities %v, want %v", got, want)
	}
	for k, v := range want {
		if p, ok := got[k]; !ok || p != v {
			t.Errorf("objective %s: %d (%v), want %d", k, p, ok, v)
		}
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "inferenceobjective bad: spec.priority") {
		t.Errorf("skipped %v", skipped)
	}
}
