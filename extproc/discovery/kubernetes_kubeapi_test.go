//go:build kubeapiserver

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
	"k8s.io/client-go/dynamic"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/lab/testkit/kubeapi"
)

// The label and EndpointSlice discovery tests, against a real API server
// (they ran against client-go's fake before): one server, each subtest in
// a namespace of its own. Pods are created, then made ready the way the
// kubelet reports it (kubeapi.SetPodReady through pods/status); deletion is
// graceful (deletionTimestamp) until the kubelet's final delete.
func TestKubernetesOnAPIServer(t *testing.T) {
	srv := kubeapi.Start(t)
	for name, f := range map[string]func(*testing.T, *kubeapi.Server, string){
		"PodsLifecycle":        kubePodsLifecycle,
		"DPRanksAndSkips":      kubeDPRanksAndSkips,
		"DefaultModelAndIPv6":  kubeDefaultModelAndIPv6,
		"Debounce":             kubeDebounce,
		"EndpointSliceChanges": kubeEndpointSlices,
	} {
		t.Run(name, func(t *testing.T) {
			namespace := fmt.Sprintf("kube-%d", time.Now().UnixNano())
			srv.Namespace(t, namespace)
			f(t, srv, namespace)
		})
	}
}

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

func mustKubernetes(t *testing.T, client dynamic.Interface, c kubeselect.Config) *KubernetesSource {
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

// createPod creates readyPod(name, …) in namespace and reports its status
// as the kubelet would: ready (or not) at ip.
func createPod(t *testing.T, srv *kubeapi.Server, namespace, name, ip string, lbls map[string]string, ready bool) {
	t.Helper()
	p := readyPod(name, ip, lbls)
	p.Namespace = namespace
	p.Spec.Containers[0].Image = "vllm/vllm-openai"
	p.Status = corev1.PodStatus{}
	kubeapi.CreatePod(t, srv.Clientset, p)
	kubeapi.SetPodReady(t, srv.Clientset, namespace, name, ip, ready)
}

// relabel replaces a pod's labels and annotations.
func relabel(t *testing.T, srv *kubeapi.Server, namespace, name string, lbls, ann map[string]string) {
	t.Helper()
	ctx := context.Background()
	p, err := srv.Clientset.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels, p.Annotations = lbls, ann
	if _, err := srv.Clientset.CoreV1().Pods(namespace).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func kubePodsLifecycle(t *testing.T, srv *kubeapi.Server, namespace string) {
	ctx := context.Background()
	src := mustKubernetes(t, srv.Dynamic, kubeselect.Config{
		Namespace: namespace, LabelSelector: "app=vllm", PortName: "http", EventsPort: 5557, Debounce: 10 * time.Millisecond,
	})
	w := watch(t, src)
	w.waitFor(nil) // the first set is reported even when empty

	// A pod that is not ready, and a ready pod outside the selector, stay
	// out; the ready selected pod is in.
	createPod(t, srv, namespace, "a", "10.1.0.1", vllmLabels("prefill"), false)
	createPod(t, srv, namespace, "other", "10.1.0.9", map[string]string{"app": "web", kubeselect.DefaultModelLabel: "llama"}, true)
	createPod(t, srv, namespace, "b", "10.1.0.2", vllmLabels(""), true)
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.2", 0, kvfleet.RoleBoth, false)})

	// a becomes ready.
	kubeapi.SetPodReady(t, srv.Clientset, namespace, "a", "10.1.0.1", true)
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.1", 0, kvfleet.RolePrefill, false), podWorker("10.1.0.2", 0, kvfleet.RoleBoth, false)})

	// b gets the draining label; a is being deleted (still ready).
	bd := vllmLabels("")
	bd[kubeselect.DrainingKey] = "true"
	relabel(t, srv, namespace, "b", bd, nil)
	if err := srv.Clientset.CoreV1().Pods(namespace).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.1", 0, kvfleet.RolePrefill, true), podWorker("10.1.0.2", 0, kvfleet.RoleBoth, true)})

	// The draining annotation works too; the terminating a stops being
	// ready and leaves; removing the annotation undrains b.
	relabel(t, srv, namespace, "b", vllmLabels(""), map[string]string{kubeselect.DrainingKey: "true"})
	kubeapi.SetPodReady(t, srv.Clientset, namespace, "a", "10.1.0.1", false)
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.2", 0, kvfleet.RoleBoth, true)})
	relabel(t, srv, namespace, "b", vllmLabels(""), nil)
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.2", 0, kvfleet.RoleBoth, false)})

	// Deleted pods leave: a's deletion finishes, b's is graceful and then
	// final.
	kubeapi.FinishPodDeletion(t, srv.Clientset, namespace, "a")
	if err := srv.Clientset.CoreV1().Pods(namespace).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeapi.FinishPodDeletion(t, srv.Clientset, namespace, "b")
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

func kubeDPRanksAndSkips(t *testing.T, srv *kubeapi.Server, namespace string) {
	createPod(t, srv, namespace, "ok", "10.1.0.1", vllmLabels("decode"), true)
	createPod(t, srv, namespace, "nomodel", "10.1.0.2", map[string]string{"app": "vllm"}, true)
	createPod(t, srv, namespace, "badrole", "10.1.0.3", map[string]string{"app": "vllm", kubeselect.DefaultModelLabel: "llama", kubeselect.DefaultRoleLabel: "router"}, true)
	// Ready without an IP yet (status written before the IP is known):
	// skipped, not a worker at "".
	p := readyPod("noip", "", vllmLabels(""))
	p.Namespace, p.Spec.Containers[0].Image, p.Status = namespace, "vllm/vllm-openai", corev1.PodStatus{}
	p = kubeapi.CreatePod(t, srv.Clientset, p)
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := srv.Clientset.CoreV1().Pods(namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	src := mustKubernetes(t, srv.Dynamic, kubeselect.Config{
		Namespace: namespace, LabelSelector: "app=vllm", Port: 8000, EventsPort: 5557, ReplayPort: 5600, DPRanks: 2,
	})
	w := watch(t, src)
	want := []kvfleet.Worker{podWorker("10.1.0.1", 0, kvfleet.RoleDecode, false), podWorker("10.1.0.1", 1, kvfleet.RoleDecode, false)}
	want[0].Replay, want[1].Replay = "tcp://10.1.0.1:5600", "tcp://10.1.0.1:5601"
	w.waitFor(want)
	if st := src.Stats(); st.Skipped != 3 || st.Workers != 2 {
		t.Errorf("stats %+v, want 3 skipped (no model, bad role, no IP), 2 workers", st)
	}
}

func kubeDefaultModelAndIPv6(t *testing.T, srv *kubeapi.Server, namespace string) {
	createPod(t, srv, namespace, "v6", "fd00::5", map[string]string{"app": "vllm"}, true)
	src := mustKubernetes(t, srv.Dynamic, kubeselect.Config{
		Namespace: namespace, LabelSelector: "app=vllm", Port: 8000, Model: "llama", EventsPort: 5557,
	})
	w := watch(t, src)
	w.waitFor([]kvfleet.Worker{{ID: kvfleet.WorkerID{Endpoint: "[fd00::5]:8000"}, Model: "llama",
		Events: "tcp://[fd00::5]:5557"}})
}

// kubeDebounce checks that a burst of pod creations is coalesced: at most
// one onChange per Debounce interval (plus the initial one and one for the
// trailing edge), bounded by the measured elapsed time so that a slow
// machine cannot make it fail.
func kubeDebounce(t *testing.T, srv *kubeapi.Server, namespace string) {
	const debounce = 200 * time.Millisecond
	src := mustKubernetes(t, srv.Dynamic, kubeselect.Config{Namespace: namespace, LabelSelector: "app=vllm", Port: 8000, Debounce: debounce})
	w := watch(t, src)
	w.waitFor(nil)
	start := time.Now()
	var want []kvfleet.Worker
	for i := range 60 {
		ip := fmt.Sprintf("10.2.0.%d", i+1)
		createPod(t, srv, namespace, fmt.Sprint("p", i), ip, vllmLabels(""), true)
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

func endpoint(ip string, ready, serving, terminating *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}}
}

// kubeEndpointSlices writes slices with every combination of conditions
// the API allows (nil ready/serving = true, nil terminating = false,
// discovery/v1 EndpointConditions), which the lifecycle test's
// controller stand-in never produces.
func kubeEndpointSlices(t *testing.T, srv *kubeapi.Server, namespace string) {
	ctx := context.Background()
	eps := srv.Clientset.DiscoveryV1().EndpointSlices(namespace)
	src := mustKubernetes(t, srv.Dynamic, kubeselect.Config{
		Namespace: namespace, Service: "vllm", PortName: "http", EventsPort: 5557, Debounce: 10 * time.Millisecond,
	})
	w := watch(t, src)
	w.waitFor(nil)
	in := func(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice { s.Namespace = namespace; return s }

	yes, no := ptr(true), ptr(false)
	lbls := map[string]string{kubeselect.DefaultModelLabel: "llama", kubeselect.DefaultRoleLabel: "decode"}
	s1 := in(slice("vllm-abc", lbls,
		endpoint("10.1.0.1", yes, yes, no),
		endpoint("10.1.0.2", nil, nil, nil), // nil ready/serving = true, nil terminating = false
		endpoint("10.1.0.3", no, no, no),    // not serving: out
	))
	// A slice of another Service is ignored.
	foreign := in(slice("web-xyz", lbls, endpoint("10.9.0.1", yes, yes, no)))
	foreign.Labels[discoveryv1.LabelServiceName] = "web"
	for _, s := range []*discoveryv1.EndpointSlice{s1, foreign} {
		if _, err := eps.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.1", 0, kvfleet.RoleDecode, false), podWorker("10.1.0.2", 0, kvfleet.RoleDecode, false)})

	// 10.1.0.1 terminates but still serves: draining. 10.1.0.2 stops serving.
	s1b, err := eps.Get(ctx, "vllm-abc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s1b.Endpoints[0] = endpoint("10.1.0.1", no, yes, yes)
	s1b.Endpoints[1] = endpoint("10.1.0.2", no, no, no)
	if _, err := eps.Update(ctx, s1b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.1", 0, kvfleet.RoleDecode, true)})

	// A second slice listing the same address as ready: one worker, not draining.
	s2 := in(slice("vllm-def", lbls, endpoint("10.1.0.1", yes, yes, no), endpoint("10.1.0.4", yes, yes, no)))
	if _, err := eps.Create(ctx, s2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitFor([]kvfleet.Worker{podWorker("10.1.0.1", 0, kvfleet.RoleDecode, false), podWorker("10.1.0.4", 0, kvfleet.RoleDecode, false)})

	for _, name := range []string{"vllm-abc", "vllm-def"} {
		if err := eps.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.waitFor(nil)
}
