package actuate

import (
	"context"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// scaleStore backs the /scale subresource of client-go's fake dynamic
// client with replica counts per resource/name, as the API server would
// (an autoscaling/v1 Scale, read and written whole).
type scaleStore struct {
	mu        sync.Mutex
	replicas  map[string]int32
	updates   []string
	conflicts int // Update answers Conflict this many times first
}

func (s *scaleStore) serve(c *dynamicfake.FakeDynamicClient) {
	c.PrependReactor("get", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		g := a.(k8stesting.GetAction)
		if g.GetSubresource() != "scale" {
			return false, nil, nil
		}
		key := g.GetResource().Resource + "/" + g.GetName()
		s.mu.Lock()
		defer s.mu.Unlock()
		n, ok := s.replicas[key]
		if !ok {
			return true, nil, apierrors.NewNotFound(g.GetResource().GroupResource(), g.GetName())
		}
		return true, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "autoscaling/v1", "kind": "Scale",
			"metadata": map[string]any{"name": g.GetName(), "namespace": g.GetNamespace(), "resourceVersion": "1"},
			"spec":     map[string]any{"replicas": int64(n)},
		}}, nil
	})
	c.PrependReactor("update", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.UpdateAction)
		if u.GetSubresource() != "scale" {
			return false, nil, nil
		}
		sc := u.GetObject().(*unstructured.Unstructured)
		n, _, err := unstructured.NestedInt64(sc.Object, "spec", "replicas")
		if err != nil {
			return true, nil, err
		}
		key := u.GetResource().Resource + "/" + sc.GetName()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.conflicts > 0 {
			s.conflicts--
			return true, nil, apierrors.NewConflict(u.GetResource().GroupResource(), sc.GetName(), nil)
		}
		s.replicas[key] = int32(n)
		s.updates = append(s.updates, key)
		return true, sc, nil
	})
}

func mapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Group: "apps", Version: "v1"}, {Group: "leaderworkerset.x-k8s.io", Version: "v1"}})
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, meta.RESTScopeNamespace)
	// A custom resource with a scale subresource, as LeaderWorkerSet has.
	m.Add(schema.GroupVersionKind{Group: "leaderworkerset.x-k8s.io", Version: "v1", Kind: "LeaderWorkerSet"}, meta.RESTScopeNamespace)
	return m
}

func pod(name, ip string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "llm", Labels: labels}, Status: corev1.PodStatus{PodIP: ip}}
}

// Kept on client-go's fakes (the rest runs against a real API server in
// kubeapiserver_test.go) for what a real server cannot be made to do on cue:
// a Conflict answer to the first scale update, which the actuator must
// retry, and a custom resource with a scale subresource (LeaderWorkerSet:
// its CRD's module is not one this project may take).
func TestKubernetesScalesAndDrains(t *testing.T) {
	store := &scaleStore{replicas: map[string]int32{"deployments/prefill": 2, "statefulsets/decode": 3, "leaderworkersets/big": 1}}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	client := dynamicfake.NewSimpleDynamicClient(scheme,
		pod("decode-0", "10.0.0.1", map[string]string{"app": "decode"}),
		pod("decode-1", "10.0.0.2", map[string]string{"app": "decode"}),
		pod("decode-2", "10.0.0.3", map[string]string{"app": "decode"}),
		pod("other", "10.0.0.3", map[string]string{"app": "other"}), // same IP, another selector
	)
	store.serve(client)
	k := NewKubernetes(client, mapper(), map[string]Target{
		"prefill":    {Group: "apps", Kind: "Deployment", Name: "prefill", Namespace: "llm"},
		"decode":     {Group: "apps", Kind: "StatefulSet", Name: "decode", Namespace: "llm", PodSelector: "app=decode"},
		"aggregated": {Group: "leaderworkerset.x-k8s.io", Kind: "LeaderWorkerSet", Name: "big", Namespace: "llm"},
	})
	ctx := context.Background()
	cur, err := k.Current(ctx)
	if err != nil || cur["prefill"] != 2 || cur["decode"] != 3 || cur["aggregated"] != 1 {
		t.Fatalf("current %v %v", cur, err)
	}
	store.conflicts = 1 // a concurrent writer: the update is retried
	err = k.Apply(ctx, plan.Decision{
		Desired: map[string]int{"prefill": 5, "decode": 3, "aggregated": 2},
		Drain:   map[string][]string{"decode": {"10.0.0.2:8000", "decode-2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if store.replicas["deployments/prefill"] != 5 || store.replicas["statefulsets/decode"] != 3 || store.replicas["leaderworkersets/big"] != 2 {
		t.Fatalf("replicas %v", store.replicas)
	}
	// decode is unchanged: no update was sent for it.
	for _, u := range store.updates {
		if strings.HasPrefix(u, "statefulsets/") {
			t.Fatalf("needless update %v", store.updates)
		}
	}
	for name, want := range map[string]bool{"decode-0": false, "decode-1": true, "decode-2": true, "other": false} {
		p, err := client.Resource(podResource).Namespace("llm").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := p.GetLabels()[DrainingLabel] == "true" && p.GetAnnotations()[DeletionCostAnnotation] == "-1000"
		if got != want || p.GetLabels()["app"] == "" {
			t.Errorf("pod %s: draining %v, want %v (labels %v)", name, got, want, p.GetLabels())
		}
	}
	// Remove: the scale-down to 1.
	if err := k.Apply(ctx, plan.Decision{Desired: map[string]int{"decode": 1}, Remove: map[string][]string{"decode": {"decode-1", "decode-2"}}}); err != nil {
		t.Fatal(err)
	}
	if store.replicas["statefulsets/decode"] != 1 {
		t.Fatalf("replicas %v", store.replicas)
	}
}
