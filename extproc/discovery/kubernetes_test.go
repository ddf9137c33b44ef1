package discovery

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/internal/kvfleet"
)

const ns = "llm"

// watcher runs a source and records every set it reports.
type watcher struct {
	t       *testing.T
	mu      sync.Mutex
	sets    [][]kvfleet.Worker
	changed chan struct{}
	inCall  atomic.Int32
	stop    func()
}

func watch(t *testing.T, src Source) *watcher {
	t.Helper()
	w := &watcher{t: t, changed: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func(ws []kvfleet.Worker) {
			if w.inCall.Add(1) != 1 {
				t.Error("onChange called concurrently")
			}
			defer w.inCall.Add(-1)
			w.mu.Lock()
			w.sets = append(w.sets, ws)
			w.mu.Unlock()
			select {
			case w.changed <- struct{}{}:
			default:
			}
		})
	}()
	w.stop = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after cancel")
		}
	}
	t.Cleanup(w.stop)
	return w
}

func (w *watcher) calls() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.sets)
}

// waitFor waits until the latest reported set equals want. The deadline
// only bounds a broken test; it asserts nothing about speed.
func (w *watcher) waitFor(want []kvfleet.Worker) {
	w.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		w.mu.Lock()
		var last []kvfleet.Worker
		n := len(w.sets)
		if n > 0 {
			last = w.sets[n-1]
		}
		w.mu.Unlock()
		if n > 0 && slices.Equal(last, want) {
			return
		}
		select {
		case <-w.changed:
		case <-deadline:
			w.t.Fatalf("after %d sets, latest:\n %+v\nwant:\n %+v", n, last, want)
		}
	}
}

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

func mustKubernetes(t *testing.T, client kubernetes.Interface, c kubeselect.Config) *KubernetesSource {
	t.Helper()
	src, err := NewKubernetes(client, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func podWorker(ip string, rank int, role kvfleet.Role, draining bool) kvfleet.Worker {
	ep := ip + ":8000"
	return kvfleet.Worker{
		ID: kvfleet.WorkerID{Endpoint: ep, DPRank: rank}, Model: "llama", Role: role, Draining: draining,
		Events: fmt.Sprintf("tcp://%s:%d", ip, 5557+rank),
	}
}

func TestKubernetesPodsLifecycle(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	pods := client.CoreV1().Pods(ns)
	src := mustKubernetes(t, client, kubeselect.Config{
		Namespace: ns, LabelSelector: "app=vllm", PortName: "http", EventsPort: 5557, Debounce: 10 * time.Millisecond,
	})
	w := watch(t, src)
	w.waitFor(nil) // the first set is reported even when empty

	// A pod that is not ready, and a ready pod outside the selector, stay
	// out; the ready selected pod is in.
	a := readyPod("a", "10.1.0.1", vllmLabels("prefill"))
	if _, err := pods.Create(ctx, setReady(a, false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other := readyPod("other", "10.1.0.9", map[string]string{"app": "web", kubeselect.DefaultModelLabel: "llama"})
	if _, err := pods.Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := readyPod("b", "10.1.0.2", vllmLabels(""))
	if _, err := pods.Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.2", 0, kvfleet.RoleBoth, false)})

	// a becomes ready.
	if _, err := pods.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.1", 0, kvfleet.RolePrefill, false), podWorker("10.1.0.2", 0, kvfleet.RoleBoth, false)})

	// b gets the draining label; a is being deleted (still ready).
	bd := b.DeepCopy()
	bd.Labels[kubeselect.DrainingKey] = "true"
	if _, err := pods.Update(ctx, bd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ad := a.DeepCopy()
	now := metav1.Now()
	ad.DeletionTimestamp = &now
	if _, err := pods.Update(ctx, ad, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.1", 0, kvfleet.RolePrefill, true), podWorker("10.1.0.2", 0, kvfleet.RoleBoth, true)})

	// The draining annotation works too, and removing the label undrains.
	bu := b.DeepCopy()
	bu.Annotations = map[string]string{kubeselect.DrainingKey: "true"}
	if _, err := pods.Update(ctx, bu, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Update(ctx, setReady(ad, false), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.2", 0, kvfleet.RoleBoth, true)})
	if _, err := pods.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.2", 0, kvfleet.RoleBoth, false)})

	// Deleted pods leave.
	for _, name := range []string{"a", "b"} {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.waitFor(nil)

	// Consecutive sets always differ: no onChange without a change.
	w.mu.Lock()
	for i := 1; i < len(w.sets); i++ {
		if slices.Equal(w.sets[i-1], w.sets[i]) {
			t.Errorf("sets %d and %d are equal: %+v", i-1, i, w.sets[i])
		}
	}
	w.mu.Unlock()
	if st := src.Stats(); st.Changes != int64(w.calls()) || st.Workers != 0 {
		t.Errorf("stats %+v after %d calls", st, w.calls())
	}
}

func TestKubernetesDPRanksAndSkips(t *testing.T) {
	client := fake.NewClientset(
		readyPod("ok", "10.1.0.1", vllmLabels("decode")),
		readyPod("nomodel", "10.1.0.2", map[string]string{"app": "vllm"}),
		readyPod("badrole", "10.1.0.3", map[string]string{"app": "vllm", kubeselect.DefaultModelLabel: "llama", kubeselect.DefaultRoleLabel: "router"}),
		readyPod("noip", "", vllmLabels("")),
	)
	src := mustKubernetes(t, client, kubeselect.Config{
		Namespace: ns, LabelSelector: "app=vllm", Port: 8000, EventsPort: 5557, ReplayPort: 5600, DPRanks: 2,
	})
	w := watch(t, src)
	want := []kvfleet.Worker{podWorker("10.1.0.1", 0, kvfleet.RoleDecode, false), podWorker("10.1.0.1", 1, kvfleet.RoleDecode, false)}
	want[0].Replay, want[1].Replay = "tcp://10.1.0.1:5600", "tcp://10.1.0.1:5601"
	w.waitFor(want)
	if st := src.Stats(); st.Skipped != 3 || st.Workers != 2 {
		t.Errorf("stats %+v, want 3 skipped (no model, bad role, no IP), 2 workers", st)
	}
}

func TestKubernetesDefaultModelAndIPv6(t *testing.T) {
	p := readyPod("v6", "fd00::5", map[string]string{"app": "vllm"})
	src := mustKubernetes(t, fake.NewClientset(p), kubeselect.Config{
		Namespace: ns, LabelSelector: "app=vllm", Port: 8000, Model: "llama", EventsPort: 5557,
	})
	w := watch(t, src)
	w.waitFor([]kvfleet.Worker{{ID: kvfleet.WorkerID{Endpoint: "[fd00::5]:8000"}, Model: "llama",
		Events: "tcp://[fd00::5]:5557"}})
}

// TestKubernetesDebounce checks that a burst of pod creations is coalesced:
// at most one onChange per Debounce interval (plus the initial one and one
// for the trailing edge), bounded by the measured elapsed time so that a slow
// machine cannot make it fail.
func TestKubernetesDebounce(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	const debounce = 200 * time.Millisecond
	src := mustKubernetes(t, client, kubeselect.Config{Namespace: ns, LabelSelector: "app=vllm", Port: 8000, Debounce: debounce})
	w := watch(t, src)
	w.waitFor(nil)
	start := time.Now()
	var want []kvfleet.Worker
	for i := range 60 {
		ip := fmt.Sprintf("10.2.0.%d", i+1)
		if _, err := client.CoreV1().Pods(ns).Create(ctx, readyPod(fmt.Sprint("p", i), ip, vllmLabels("")), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, kvfleet.Worker{ID: kvfleet.WorkerID{Endpoint: ip + ":8000"}, Model: "llama"})
	}
	sortWorkers(want)
	w.waitFor(want)
	elapsed := time.Since(start)
	bound := 1 + int(elapsed/debounce) + 1
	if got := w.calls() - 1; got > bound {
		t.Errorf("%d onChange calls for a burst of 60 pods over %v; at most %d with a %v debounce", got, elapsed, bound, debounce)
	}
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

func endpoint(ip string, ready, serving, terminating *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}}
}

func TestKubernetesEndpointSlices(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	eps := client.DiscoveryV1().EndpointSlices(ns)
	src := mustKubernetes(t, client, kubeselect.Config{
		Namespace: ns, Service: "vllm", PortName: "http", EventsPort: 5557, Debounce: 10 * time.Millisecond,
	})
	w := watch(t, src)
	w.waitFor(nil)

	yes, no := ptr(true), ptr(false)
	lbls := map[string]string{kubeselect.DefaultModelLabel: "llama", kubeselect.DefaultRoleLabel: "decode"}
	s1 := slice("vllm-abc", lbls,
		endpoint("10.1.0.1", yes, yes, no),
		endpoint("10.1.0.2", nil, nil, nil), // nil ready/serving = true, nil terminating = false
		endpoint("10.1.0.3", no, no, no),    // not serving: out
	)
	// A slice of another Service is ignored.
	foreign := slice("web-xyz", lbls, endpoint("10.9.0.1", yes, yes, no))
	foreign.Labels[discoveryv1.LabelServiceName] = "web"
	for _, s := range []*discoveryv1.EndpointSlice{s1, foreign} {
		if _, err := eps.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.1", 0, kvfleet.RoleDecode, false), podWorker("10.1.0.2", 0, kvfleet.RoleDecode, false)})

	// 10.1.0.1 terminates but still serves: draining. 10.1.0.2 stops serving.
	s1b := s1.DeepCopy()
	s1b.Endpoints[0] = endpoint("10.1.0.1", no, yes, yes)
	s1b.Endpoints[1] = endpoint("10.1.0.2", no, no, no)
	if _, err := eps.Update(ctx, s1b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.1", 0, kvfleet.RoleDecode, true)})

	// A second slice listing the same address as ready: one worker, not draining.
	s2 := slice("vllm-def", lbls, endpoint("10.1.0.1", yes, yes, no), endpoint("10.1.0.4", yes, yes, no))
	if _, err := eps.Create(ctx, s2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.1", 0, kvfleet.RoleDecode, false), podWorker("10.1.0.4", 0, kvfleet.RoleDecode, false)})

	if err := eps.Delete(ctx, "vllm-abc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := eps.Delete(ctx, "vllm-def", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitFor(nil)
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
