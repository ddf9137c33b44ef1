//go:build kubeapiserver

package discovery_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gieclient "sigs.k8s.io/gateway-api-inference-extension/client-go/clientset/versioned"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc"
	"github.com/kvgate/kvgate/extproc/discovery"
	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/lab/testkit/kubeapi"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// The pods' addresses are written into the API server only: no traffic is
// sent to them (the router is never Run, so it neither probes nor scrapes;
// no indexer subscribes).
const (
	ipA, ipB, ipC = "10.244.0.11", "10.244.0.12", "10.244.0.13"
	model         = "qwen3"
)

// lifecycleRig follows one discovery source into a real extproc Router
// (extproc.FollowDiscovery, as the extproc process does) and records every
// set with the time it reached the router.
type lifecycleRig struct {
	t      *testing.T
	srv    *kubeapi.Server
	ns     string
	router *extproc.Router

	mu        sync.Mutex
	sets      [][]kvfleet.Worker
	at        []time.Time
	poolState []error
	stateAt   []time.Time
	changed   chan struct{}
}

// recording reports each set to the rig after handing it on.
type recording struct {
	discovery.Source
	rig *lifecycleRig
}

func (s recording) Run(ctx context.Context, onChange func([]kvfleet.Worker)) error {
	return s.Source.Run(ctx, func(ws []kvfleet.Worker) {
		onChange(ws) // the router's SetMembers first: a recorded set is routable
		s.rig.mu.Lock()
		s.rig.sets = append(s.rig.sets, ws)
		s.rig.at = append(s.rig.at, time.Now())
		s.rig.mu.Unlock()
		s.rig.notify()
	})
}

func (r *lifecycleRig) notify() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *lifecycleRig) setPoolState(err error) {
	r.mu.Lock()
	r.poolState = append(r.poolState, err)
	r.stateAt = append(r.stateAt, time.Now())
	r.mu.Unlock()
	r.notify()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newLifecycleRig builds the real request path (registry with the qwen3
// tokenizer, memory index, router) for namespace ns.
func newLifecycleRig(t *testing.T, srv *kubeapi.Server, ns string, mutate func(*config.Config)) *lifecycleRig {
	t.Helper()
	dir, err := modelfiles.Model(model)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: model, BlockSize: 16, Tokenizer: dir}}
	cfg.Extproc.HealthCheck.Disabled = true
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	reg, err := preprocess.New(cfg.Models, preprocess.OptionsFor(cfg.Extproc.Preprocess, cfg.Extproc.MaxBodyBytes, ""))
	if err != nil {
		t.Fatal(err)
	}
	router, err := extproc.NewRouter(extproc.RouterConfig{Extproc: cfg.Extproc}, reg, kvindex.NewMemory(kvindex.MemoryConfig{}), quiet())
	if err != nil {
		t.Fatal(err)
	}
	srv.Namespace(t, ns)
	return &lifecycleRig{t: t, srv: srv, ns: ns, router: router, changed: make(chan struct{}, 1)}
}

// follow runs src into the router until the test ends.
func (r *lifecycleRig) follow(src discovery.Source) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- extproc.FollowDiscovery(ctx, recording{src, r}, r.router, nil, quiet()) }()
	r.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				r.t.Errorf("discovery: %v", err)
			}
		case <-time.After(30 * time.Second):
			r.t.Error("discovery did not stop")
		}
	})
}

// route asks the router for one chat request and returns the endpoint it
// chose, or "" with the status when it refused.
func (r *lifecycleRig) route(i int) (string, int) {
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"lifecycle step %d"}]}`, model, i)
	d, rerr := r.router.Decide(context.Background(), &server.Request{Method: "POST", Path: "/v1/chat/completions",
		Body: []byte(body), Headers: map[string]string{"content-type": "application/json"}})
	if rerr != nil {
		return "", rerr.Status
	}
	d.Ticket.Finish(server.OutcomeOK)
	return d.Endpoint, http.StatusOK
}

// routable is the endpoints a new request may go to: the non-draining ones.
func routable(ws []kvfleet.Worker) []string {
	var eps []string
	for _, w := range ws {
		if !w.Draining {
			eps = append(eps, w.ID.Endpoint)
		}
	}
	return eps
}

// step applies one change of the script, then waits until the set that
// reached the router equals want (and state, when given, holds), and
// checks a routing decision against it: a routable worker of the set, or
// 503 when there is none. It prints how long each took to be reflected;
// the deadline only bounds a broken test, it asserts nothing about speed.
func (r *lifecycleRig) step(name string, do func(), want []kvfleet.Worker, state func([]error) error) {
	r.t.Helper()
	r.mu.Lock()
	from := len(r.sets)
	r.mu.Unlock()
	start := time.Now()
	do()
	deadline := time.After(30 * time.Second)
	var reflected time.Time
	for reflected.IsZero() {
		r.mu.Lock()
		n := len(r.sets)
		var last []kvfleet.Worker
		if n > 0 {
			last = r.sets[n-1]
		}
		setOK := n > 0 && slices.Equal(last, want)
		var stateErr error
		if state != nil {
			stateErr = state(r.poolState)
		}
		if setOK && stateErr == nil {
			// When reflected: the set's arrival if this step brought one,
			// else (the set did not change) the pool state's.
			reflected = time.Now()
			if n > from {
				reflected = r.at[n-1]
			} else if state != nil && len(r.stateAt) > 0 && r.stateAt[len(r.stateAt)-1].After(start) {
				reflected = r.stateAt[len(r.stateAt)-1]
			}
		}
		r.mu.Unlock()
		if !reflected.IsZero() {
			break
		}
		select {
		case <-r.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			r.t.Fatalf("step %q: after %d sets, latest:\n %+v\nwant:\n %+v\npool state %v", name, n, last, want, stateErr)
		}
	}
	ep, status := r.route(from)
	routed := time.Now()
	eps := routable(want)
	switch {
	case len(eps) == 0 && status != http.StatusServiceUnavailable:
		r.t.Fatalf("step %q: no routable worker, yet routed to %q (status %d)", name, ep, status)
	case len(eps) > 0 && !slices.Contains(eps, ep):
		r.t.Fatalf("step %q: routed to %q (status %d), want one of %v", name, ep, status, eps)
	}
	if ep == "" {
		ep = fmt.Sprintf("%d", status)
	}
	r.t.Logf("step %-44q reflected in %6.1f ms (workers %d, routed → %s, decision at %6.1f ms)", name,
		float64(reflected.Sub(start).Microseconds())/1000, len(want), ep, float64(routed.Sub(start).Microseconds())/1000)
}

// notApplicable prints a script step a source has no counterpart of.
func (r *lifecycleRig) notApplicable(name, why string) {
	r.t.Logf("step %-44q not applicable: %s", name, why)
}

func enginePod(ns, name string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbls},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}}}}},
	}
}

func engineLabels(app string) map[string]string {
	return map[string]string{"app": app, kubeselect.DefaultModelLabel: model}
}

// worker is a discovered worker of the script: ip:port, KV events on
// events (0 = none).
func worker(ip string, port, events int, draining bool) kvfleet.Worker {
	w := kvfleet.Worker{ID: kvfleet.WorkerID{Endpoint: fmt.Sprintf("%s:%d", ip, port)}, Model: model, Draining: draining}
	if events > 0 {
		w.Events = fmt.Sprintf("tcp://%s:%d", ip, events)
	}
	return w
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// podScript is the part of the script every source shares: create, ready,
// a second pod, unready, ready again, graceful delete, final delete. after
// runs after each pod change (the EndpointSlice source's controller
// stand-in); port and events are the worker's.
func podScript(r *lifecycleRig, after func(), port, events int) {
	ctx := context.Background()
	cs := r.srv.Clientset
	pods := cs.CoreV1().Pods(r.ns)
	a := func(draining bool) kvfleet.Worker { return worker(ipA, port, events, draining) }
	b := func(draining bool) kvfleet.Worker { return worker(ipB, port, events, draining) }
	r.step("create pod a (not ready yet)", func() {
		kubeapi.CreatePod(r.t, cs, enginePod(r.ns, "a", engineLabels("vllm")))
		kubeapi.SetPodReady(r.t, cs, r.ns, "a", ipA, false)
		after()
	}, nil, nil)
	r.step("pod a ready", func() { kubeapi.SetPodReady(r.t, cs, r.ns, "a", ipA, true); after() }, []kvfleet.Worker{a(false)}, nil)
	r.step("create pod b, ready", func() {
		kubeapi.CreatePod(r.t, cs, enginePod(r.ns, "b", engineLabels("vllm")))
		kubeapi.SetPodReady(r.t, cs, r.ns, "b", ipB, true)
		after()
	}, []kvfleet.Worker{a(false), b(false)}, nil)
	r.step("pod a not ready", func() { kubeapi.SetPodReady(r.t, cs, r.ns, "a", ipA, false); after() }, []kvfleet.Worker{b(false)}, nil)
	r.step("pod a ready again", func() { kubeapi.SetPodReady(r.t, cs, r.ns, "a", ipA, true); after() }, []kvfleet.Worker{a(false), b(false)}, nil)
	r.step("pod b deleted (graceful: deletionTimestamp)", func() {
		must(r.t, pods.Delete(ctx, "b", metav1.DeleteOptions{}))
		after()
	}, []kvfleet.Worker{a(false), b(true)}, nil)
	r.step("pod b gone (the kubelet's final delete)", func() { kubeapi.FinishPodDeletion(r.t, cs, r.ns, "b"); after() }, []kvfleet.Worker{a(false)}, nil)
}

// TestLifecycleOnAPIServer runs the scripted pod lifecycle against a real
// API server through each discovery source into the real router: the
// InferencePool source, label discovery and EndpointSlice discovery.
func TestLifecycleOnAPIServer(t *testing.T) {
	srv := kubeapi.Start(t)
	t.Run("InferencePool", func(t *testing.T) { inferencePoolLifecycle(t, srv) })
	t.Run("Labels", func(t *testing.T) { labelLifecycle(t, srv) })
	t.Run("EndpointSlices", func(t *testing.T) { endpointSliceLifecycle(t, srv) })
	t.Run("ObjectivePriority", func(t *testing.T) { objectivePriority(t, srv) })
}

func newPool(ns, app string, ports ...int32) *giev1.InferencePool {
	p := &giev1.InferencePool{ObjectMeta: metav1.ObjectMeta{Name: "qwen-pool", Namespace: ns}}
	p.Spec.Selector.MatchLabels = map[giev1.LabelKey]giev1.LabelValue{"app": giev1.LabelValue(app)}
	for _, n := range ports {
		p.Spec.TargetPorts = append(p.Spec.TargetPorts, giev1.Port{Number: giev1.PortNumber(n)})
	}
	p.Spec.EndpointPickerRef = &giev1.EndpointPickerRef{Name: "kvgate", Port: &giev1.Port{Number: 9002}, FailureMode: giev1.EndpointPickerFailClose}
	return p
}

func poolMissing(states []error) error {
	if len(states) == 0 || !errors.Is(states[len(states)-1], discovery.ErrPoolMissing) {
		return fmt.Errorf("pool state %v, want missing", states)
	}
	return nil
}

func poolPresent(states []error) error {
	if len(states) == 0 || states[len(states)-1] != nil {
		return fmt.Errorf("pool state %v, want present", states)
	}
	return nil
}

func inferencePoolLifecycle(t *testing.T, srv *kubeapi.Server) {
	ctx := context.Background()
	r := newLifecycleRig(t, srv, "pool-lifecycle", nil)
	gie, err := gieclient.NewForConfig(srv.Config)
	must(t, err)
	pools := gie.InferenceV1().InferencePools(r.ns)
	_, err = pools.Create(ctx, newPool(r.ns, "vllm", 8000), metav1.CreateOptions{})
	must(t, err)
	client, err := discovery.ClientFor(srv.Config)
	must(t, err)
	src, err := discovery.NewInferencePool(client, kubeselect.InferencePool{Name: "qwen-pool", Namespace: r.ns, EventsPort: 5557, Debounce: 10 * time.Millisecond},
		discovery.PoolHooks{Objectives: r.router.SetObjectives, PoolState: r.setPoolState}, quiet())
	must(t, err)
	r.follow(src)
	r.step("start: pool, no pods", func() {}, nil, poolPresent)

	podScript(r, func() {}, 8000, 5557)

	cs := srv.Clientset
	r.step("pod c created outside the selector", func() {
		kubeapi.CreatePod(t, cs, enginePod(r.ns, "c", engineLabels("vllm-v2")))
		kubeapi.SetPodReady(t, cs, r.ns, "c", ipC, true)
	}, []kvfleet.Worker{worker(ipA, 8000, 5557, false)}, nil)
	update := func(mut func(*giev1.InferencePool)) {
		p, err := pools.Get(ctx, "qwen-pool", metav1.GetOptions{})
		must(t, err)
		mut(p)
		_, err = pools.Update(ctx, p, metav1.UpdateOptions{})
		must(t, err)
	}
	r.step("pool selector changed to app=vllm-v2", func() {
		update(func(p *giev1.InferencePool) { p.Spec.Selector.MatchLabels["app"] = "vllm-v2" })
	}, []kvfleet.Worker{worker(ipC, 8000, 5557, false)}, nil)
	r.step("pool gains a second target port 8001", func() {
		update(func(p *giev1.InferencePool) {
			p.Spec.TargetPorts = append(p.Spec.TargetPorts, giev1.Port{Number: 8001})
		})
	}, []kvfleet.Worker{worker(ipC, 8000, 5557, false), worker(ipC, 8001, 5558, false)}, nil)
	kept := []kvfleet.Worker{worker(ipC, 8000, 5557, false), worker(ipC, 8001, 5558, false)}
	r.step("pool deleted (last set kept, readiness fails)", func() {
		must(t, pools.Delete(ctx, "qwen-pool", metav1.DeleteOptions{}))
	}, kept, poolMissing)
	if st := src.Stats(); st.Present {
		t.Errorf("stats after the pool's deletion: %+v", st)
	}
	r.step("pool re-created (app=vllm, port 8000)", func() {
		_, err := pools.Create(ctx, newPool(r.ns, "vllm", 8000), metav1.CreateOptions{})
		must(t, err)
	}, []kvfleet.Worker{worker(ipA, 8000, 5557, false)}, poolPresent)
}

func labelLifecycle(t *testing.T, srv *kubeapi.Server) {
	ctx := context.Background()
	r := newLifecycleRig(t, srv, "label-lifecycle", nil)
	src, err := discovery.NewKubernetes(srv.Dynamic, kubeselect.Config{Namespace: r.ns, LabelSelector: "app=vllm", PortName: "http",
		EventsPort: 5557, Debounce: 10 * time.Millisecond}, quiet())
	must(t, err)
	r.follow(src)
	r.step("start: no pods", func() {}, nil, nil)

	podScript(r, func() {}, 8000, 5557)

	cs := srv.Clientset
	r.step("pod c created outside the selector", func() {
		kubeapi.CreatePod(t, cs, enginePod(r.ns, "c", engineLabels("vllm-v2")))
		kubeapi.SetPodReady(t, cs, r.ns, "c", ipC, true)
	}, []kvfleet.Worker{worker(ipA, 8000, 5557, false)}, nil)
	// The selector is configuration here; what changes at run time is
	// which pods carry the labels, so the same re-selection is a relabel.
	r.step("relabel: a out (app=vllm-old), c in (app=vllm)", func() {
		for name, app := range map[string]string{"a": "vllm-old", "c": "vllm"} {
			p, err := cs.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
			must(t, err)
			p.Labels["app"] = app
			_, err = cs.CoreV1().Pods(r.ns).Update(ctx, p, metav1.UpdateOptions{})
			must(t, err)
		}
	}, []kvfleet.Worker{worker(ipC, 8000, 5557, false)}, nil)
	r.notApplicable("a second target port", "label discovery takes one port per pod (port or port_name); a pod's container ports are immutable")
	r.notApplicable("pool deleted / re-created", "label discovery follows no object but the pods")
}

// syncSlices writes the Service's EndpointSlice as the EndpointSlice
// controller would (k8s.io/kubernetes v1.37.2 pkg/controller/endpointslice,
// reconciling through k8s.io/endpointslice): one endpoint per selected pod
// with an IP, conditions from podToEndpoint (serving = pod ready,
// terminating = deletionTimestamp set, ready = serving and not
// terminating), labels kubernetes.io/service-name and
// endpointslice.kubernetes.io/managed-by plus the Service's own labels
// (setEndpointSliceLabels), the Service's ports.
func syncSlices(t *testing.T, srv *kubeapi.Server, ns, svcName string) {
	t.Helper()
	ctx := context.Background()
	cs := srv.Clientset
	sliceClient := cs.DiscoveryV1().EndpointSlices(ns)
	svc, err := cs.CoreV1().Services(ns).Get(ctx, svcName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// The garbage collector deletes a deleted Service's slices (their
		// owner reference); no controller-manager runs here, so the test does.
		list, err := sliceClient.List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svcName})
		must(t, err)
		for _, s := range list.Items {
			must(t, sliceClient.Delete(ctx, s.Name, metav1.DeleteOptions{}))
		}
		return
	}
	must(t, err)
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
	must(t, err)
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svcName + "-kvgate", Namespace: ns, Labels: map[string]string{},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for k, v := range svc.Labels {
		s.Labels[k] = v
	}
	s.Labels[discoveryv1.LabelServiceName] = svcName
	s.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
	for _, p := range svc.Spec.Ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr(p.Name), Port: ptr(p.TargetPort.IntVal), Protocol: ptr(p.Protocol)})
	}
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		serving := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				serving = c.Status == corev1.ConditionTrue
			}
		}
		terminating := p.DeletionTimestamp != nil
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{p.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(serving && !terminating), Serving: ptr(serving), Terminating: ptr(terminating)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name, UID: p.UID},
			NodeName:   ptr(p.Spec.NodeName),
		})
	}
	old, err := sliceClient.Get(ctx, s.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = sliceClient.Create(ctx, s, metav1.CreateOptions{})
	case err == nil:
		s.ResourceVersion = old.ResourceVersion
		_, err = sliceClient.Update(ctx, s, metav1.UpdateOptions{})
	}
	must(t, err)
}

func ptr[T any](v T) *T { return &v }

func endpointSliceLifecycle(t *testing.T, srv *kubeapi.Server) {
	ctx := context.Background()
	r := newLifecycleRig(t, srv, "slice-lifecycle", nil)
	cs := srv.Clientset
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "vllm", Namespace: r.ns, Labels: map[string]string{kubeselect.DefaultModelLabel: model}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "vllm"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8000, TargetPort: intstr.FromInt32(8000), Protocol: corev1.ProtocolTCP}}},
	}
	_, err := cs.CoreV1().Services(r.ns).Create(ctx, svc, metav1.CreateOptions{})
	must(t, err)
	sync := func() { syncSlices(t, srv, r.ns, "vllm") }
	sync()
	src, err := discovery.NewKubernetes(srv.Dynamic, kubeselect.Config{Namespace: r.ns, Service: "vllm", PortName: "http",
		EventsPort: 5557, Debounce: 10 * time.Millisecond}, quiet())
	must(t, err)
	r.follow(src)
	r.step("start: service, no pods", func() {}, nil, nil)

	podScript(r, sync, 8000, 5557)

	r.step("pod c created outside the selector", func() {
		kubeapi.CreatePod(t, cs, enginePod(r.ns, "c", engineLabels("vllm-v2")))
		kubeapi.SetPodReady(t, cs, r.ns, "c", ipC, true)
		sync()
	}, []kvfleet.Worker{worker(ipA, 8000, 5557, false)}, nil)
	updateSvc := func(mut func(*corev1.Service)) {
		s, err := cs.CoreV1().Services(r.ns).Get(ctx, "vllm", metav1.GetOptions{})
		must(t, err)
		mut(s)
		_, err = cs.CoreV1().Services(r.ns).Update(ctx, s, metav1.UpdateOptions{})
		must(t, err)
	}
	r.step("service selector changed to app=vllm-v2", func() {
		updateSvc(func(s *corev1.Service) { s.Spec.Selector["app"] = "vllm-v2" })
		sync()
	}, []kvfleet.Worker{worker(ipC, 8000, 5557, false)}, nil)
	// A second port on the Service: port_name keeps the engine's port, so
	// the set is unchanged (a slice's workers come from one named port).
	r.step("service gains a second port (metrics 9090)", func() {
		updateSvc(func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP})
		})
		sync()
	}, []kvfleet.Worker{worker(ipC, 8000, 5557, false)}, nil)
	r.step("service deleted (its slices collected)", func() {
		must(t, cs.CoreV1().Services(r.ns).Delete(ctx, "vllm", metav1.DeleteOptions{}))
		sync()
	}, nil, nil)
	r.step("service re-created (app=vllm)", func() {
		svc.ResourceVersion = ""
		_, err := cs.CoreV1().Services(r.ns).Create(ctx, svc, metav1.CreateOptions{})
		must(t, err)
		sync()
	}, []kvfleet.Worker{worker(ipA, 8000, 5557, false)}, nil)
}

// objectivePriority: InferenceObjectives created, changed and deleted in
// the real API server reach the router's admission through the pool
// source: under saturation the objective with priority < 0 is shed first,
// and one for another pool, or none, is priority 0.
func objectivePriority(t *testing.T, srv *kubeapi.Server) {
	ctx := context.Background()
	// Admission bounds the pool at 2 in flight; sheddable requests
	// (priority < 0) at ceil(2 × 0.5) = 1.
	r := newLifecycleRig(t, srv, "objectives", func(c *config.Config) {
		c.Extproc.Admission.MaxInflight = 2
		c.Extproc.Admission.SheddableFraction = 0.5
		// The bounds shed at once here: with flow control (on by default)
		// the refused requests would first wait max_wait in the pool's
		// queue; the queue's band order is extproc's TestFlowControl*.
		c.Extproc.FlowControl.Disabled = true
	})
	gie, err := gieclient.NewForConfig(srv.Config)
	must(t, err)
	_, err = gie.InferenceV1().InferencePools(r.ns).Create(ctx, newPool(r.ns, "vllm", 8000), metav1.CreateOptions{})
	must(t, err)
	objectives := srv.Dynamic.Resource(discovery.ObjectiveResource).Namespace(r.ns)
	create := func(name, pool string, priority *int64) {
		spec := map[string]any{"poolRef": map[string]any{"name": pool}}
		if priority != nil {
			spec["priority"] = *priority
		}
		_, err := objectives.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": discovery.ObjectiveResource.GroupVersion().String(), "kind": "InferenceObjective",
			"metadata": map[string]any{"name": name, "namespace": r.ns}, "spec": spec,
		}}, metav1.CreateOptions{})
		must(t, err)
	}
	create("batch", "qwen-pool", ptr(int64(-1)))
	create("critical", "qwen-pool", ptr(int64(10)))
	create("plain", "qwen-pool", nil)
	create("foreign", "other-pool", ptr(int64(-5)))

	got := make(chan map[string]int, 16)
	client, err := discovery.ClientFor(srv.Config)
	must(t, err)
	src, err := discovery.NewInferencePool(client, kubeselect.InferencePool{Name: "qwen-pool", Namespace: r.ns, Debounce: 10 * time.Millisecond},
		discovery.PoolHooks{Objectives: func(m map[string]int) { r.router.SetObjectives(m); got <- m }, PoolState: r.setPoolState}, quiet())
	must(t, err)
	r.follow(src)
	waitPrio := func(want map[string]int) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case m := <-got:
				if fmt.Sprint(m) == fmt.Sprint(want) {
					return
				}
			case <-deadline:
				t.Fatalf("objectives never became %v", want)
			}
		}
	}
	waitPrio(map[string]int{"batch": -1, "critical": 10, "plain": 0})

	kubeapi.CreatePod(t, srv.Clientset, enginePod(r.ns, "a", engineLabels("vllm")))
	kubeapi.SetPodReady(t, srv.Clientset, r.ns, "a", ipA, true)
	r.step("pod a ready (set before the step)", func() {}, []kvfleet.Worker{worker(ipA, 8000, 0, false)}, poolPresent)

	// The priorities from the API server through admission; the tickets
	// stay open, so each admitted request stays in flight.
	decide := func(objective string) *server.RouteError {
		h := map[string]string{"content-type": "application/json"}
		if objective != "" {
			h[extproc.ObjectiveHeader] = objective
		}
		_, rerr := r.router.Decide(ctx, &server.Request{Method: "POST", Path: "/v1/chat/completions",
			Body: []byte(`{"model":"qwen3","messages":[{"role":"user","content":"hi"}]}`), Headers: h})
		return rerr
	}
	if rerr := decide("plain"); rerr != nil { // 1 in flight now; sheddable bound ceil(2×0.5) = 1
		t.Fatalf("first request: %+v", rerr)
	}
	if rerr := decide("batch"); rerr == nil || rerr.Status != http.StatusTooManyRequests || !strings.Contains(rerr.Headers["x-kvgate-shed-reason"], "sheddable requests (priority -1") {
		t.Fatalf("sheddable request at 1 in flight: %+v, want 429 as sheddable", rerr)
	}
	if rerr := decide("critical"); rerr != nil {
		t.Fatalf("critical request at 1 in flight: %+v", rerr)
	}
	if rerr := decide("critical"); rerr == nil || rerr.Status != http.StatusTooManyRequests {
		t.Fatalf("critical request at the bound: %+v, want 429", rerr)
	}

	// Changed and deleted objectives reach the router.
	start := time.Now()
	o, err := objectives.Get(ctx, "batch", metav1.GetOptions{})
	must(t, err)
	must(t, unstructured.SetNestedField(o.Object, int64(3), "spec", "priority"))
	_, err = objectives.Update(ctx, o, metav1.UpdateOptions{})
	must(t, err)
	must(t, objectives.Delete(ctx, "critical", metav1.DeleteOptions{}))
	waitPrio(map[string]int{"batch": 3, "plain": 0})
	// batch is no longer sheddable: at 2 in flight it meets the full bound,
	// not the sheddable one.
	if rerr := decide("batch"); rerr == nil || strings.Contains(rerr.Headers["x-kvgate-shed-reason"], "sheddable") ||
		!strings.Contains(rerr.Headers["x-kvgate-shed-reason"], "at the bound (2)") {
		t.Fatalf("batch at priority 3 with 2 in flight: %+v, want 429 at the full bound", rerr)
	}
	t.Logf("objective update + delete reflected in %.1f ms", float64(time.Since(start).Microseconds())/1000)
}
