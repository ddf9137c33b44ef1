package discovery

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// The sources read every resource through the dynamic client and convert
// what it returns into the Go types they use (corev1.Pod,
// discoveryv1.EndpointSlice, giev1.InferencePool). client-go's typed
// clientsets and informer factories register every built-in API group in
// one scheme at init, which linked all of k8s.io/api into bin/kvgate for
// the four resources discovery watches (issue 27 item 4).
var (
	podResource           = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	endpointSliceResource = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	poolResource          = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}
)

// NewClient connects to the API server: in-cluster when kubeconfig is "",
// else with that kubeconfig file.
func NewClient(kubeconfig string) (dynamic.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("discovery: kubernetes client config: %w", err)
	}
	return ClientFor(rc)
}

// ClientFor builds the client from a rest config.
func ClientFor(rc *rest.Config) (dynamic.Interface, error) {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("discovery: kubernetes client: %w", err)
	}
	return dyn, nil
}

// informerFor is an informer over one resource in one namespace whose
// cache holds *T: each object is converted from its unstructured form as
// it enters the cache (a transform), so listing costs what a typed
// informer's lister costs and a conversion happens once per event, not per
// recompute. The list-watch is the one client-go's dynamic informer builds
// (k8s.io/client-go v0.37.2 dynamic/dynamicinformer/informer.go
// NewFilteredDynamicInformer), with the namespace index the typed
// informers use. tweak may be nil.
func informerFor[T any](client dynamic.Interface, gvr schema.GroupVersionResource, namespace string, resync time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	ri := client.Resource(gvr).Namespace(namespace)
	opts := func(o metav1.ListOptions) metav1.ListOptions {
		if tweak != nil {
			tweak(&o)
		}
		return o
	}
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			return ri.List(context.Background(), opts(o))
		},
		WatchFunc: func(o metav1.ListOptions) (kwatch.Interface, error) {
			return ri.Watch(context.Background(), opts(o))
		},
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return ri.List(ctx, opts(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (kwatch.Interface, error) {
			return ri.Watch(ctx, opts(o))
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client),
		&unstructured.Unstructured{}, cache.SharedIndexInformerOptions{
			ResyncPeriod:      resync,
			Indexers:          cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			ObjectDescription: gvr.String(),
		})
	// SetTransform fails only once the informer has started; it has not.
	_ = inf.SetTransform(toTyped[T])
	return inf
}

// toTyped converts an unstructured object into *T. Anything else (the
// tombstone a missed delete leaves, DeletedFinalStateUnknown, which the
// FIFO does not pass to transforms anyway) goes through unchanged.
func toTyped[T any](obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	if _, same := any((*T)(nil)).(*unstructured.Unstructured); same {
		return u, nil // read as unstructured data (InferenceObjective)
	}
	t := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, t); err != nil {
		return nil, fmt.Errorf("discovery: convert %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return t, nil
}

// listCached returns the cached objects whose labels sel matches, as a
// typed lister would (the informer is namespaced: every object is in it).
func listCached[T any](inf cache.SharedIndexInformer, sel labels.Selector) []*T {
	items := inf.GetStore().List()
	out := make([]*T, 0, len(items))
	for _, it := range items {
		t, ok := it.(*T)
		if !ok {
			continue
		}
		m, err := meta(t)
		if err != nil || !sel.Matches(labels.Set(m.GetLabels())) {
			continue
		}
		out = append(out, t)
	}
	return out
}

// getCached returns the cached object named name, or nil.
func getCached[T any](inf cache.SharedIndexInformer, namespace, name string) *T {
	it, ok, err := inf.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	t, _ := it.(*T)
	return t
}

func meta(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("discovery: %T has no object metadata", obj)
	}
	return m, nil
}

// informerGroup runs a source's informers until ctx ends and waits for
// them, as a typed informer factory's Start and Shutdown did.
type informerGroup struct {
	wg    sync.WaitGroup
	list  []cache.SharedIndexInformer
	names []string
}

func (g *informerGroup) add(inf cache.SharedIndexInformer, h cache.ResourceEventHandler, what string) error {
	if _, err := inf.AddEventHandler(h); err != nil {
		return fmt.Errorf("discovery: %s handler: %w", what, err)
	}
	g.list = append(g.list, inf)
	g.names = append(g.names, what)
	return nil
}

// start runs every informer added so far; wait returns once they stopped.
func (g *informerGroup) start(ctx context.Context) {
	for _, inf := range g.list {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			inf.RunWithContext(ctx)
		}()
	}
}

func (g *informerGroup) wait() { g.wg.Wait() }

// sync waits for every informer's cache and returns the names of those
// that had not synced when ctx ended (none: all synced).
func (g *informerGroup) sync(ctx context.Context) []string {
	fns := make([]cache.InformerSynced, len(g.list))
	for i, inf := range g.list {
		fns[i] = inf.HasSynced
	}
	if cache.WaitForCacheSync(ctx.Done(), fns...) {
		return nil
	}
	var unsynced []string
	for i, inf := range g.list {
		if !inf.HasSynced() {
			unsynced = append(unsynced, g.names[i])
		}
	}
	return unsynced
}
