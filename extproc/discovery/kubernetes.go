package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/kv/kvfleet"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
)

// KubernetesSource watches pods or EndpointSlices with client-go informers.
type KubernetesSource struct {
	client dynamic.Interface
	cfg    kubeselect.Config
	log    *slog.Logger

	changes atomic.Int64 // onChange calls
	workers atomic.Int64 // size of the last reported set
	skipped atomic.Int64 // objects skipped when the last set was computed
}

var _ Source = (*KubernetesSource)(nil)

// KubernetesStats is a snapshot of the source's counters.
type KubernetesStats struct {
	Changes int64 // onChange calls so far
	Workers int64 // workers in the last reported set
	Skipped int64 // ready pods / slices left out of the last set (reasons are logged)
}

// NewKubernetes validates cfg (after filling its defaults) and returns a
// source reading through client. log may be nil.
func NewKubernetes(client dynamic.Interface, cfg kubeselect.Config, log *slog.Logger) (*KubernetesSource, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	return &KubernetesSource{client: client, cfg: cfg.WithDefaults(), log: log}, nil
}

// Stats returns the counters.
func (k *KubernetesSource) Stats() KubernetesStats {
	return KubernetesStats{Changes: k.changes.Load(), Workers: k.workers.Load(), Skipped: k.skipped.Load()}
}

// Run starts the informers, reports the set once their caches have synced,
// then again whenever it changes, at most once per Debounce. The set is
// recomputed from the informer cache rather than patched event by event,
// so a missed or reordered event cannot leave it wrong.
func (k *KubernetesSource) Run(ctx context.Context, onChange func([]kvfleet.Worker)) error {
	c := k.cfg
	// The selector is applied again to the cache: a watch may deliver
	// objects the list would not have (client-go's fake does), and a
	// worker outside the selector must never be routed to.
	sel, err := labels.Parse(c.LabelSelector)
	if c.Service != "" {
		sel, err = labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: c.Service}), nil
	}
	if err != nil {
		return fmt.Errorf("discovery: label selector: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = sel.String() }
	var group informerGroup
	// Deferred in this order so that cancel runs first: the informers stop
	// only once the context is done.
	defer group.wait()
	defer cancel()

	ch := newChanges()
	handler := ch.handler()

	var compute func() ([]kvfleet.Worker, []string)
	if c.Service != "" {
		inf := informerFor[discoveryv1.EndpointSlice](k.client, endpointSliceResource, c.Namespace, c.ResyncPeriod, tweak)
		if err := group.add(inf, handler, "endpointslice"); err != nil {
			return err
		}
		compute = func() ([]kvfleet.Worker, []string) {
			return workersFromSlices(listCached[discoveryv1.EndpointSlice](inf, sel), c)
		}
	} else {
		inf := informerFor[corev1.Pod](k.client, podResource, c.Namespace, c.ResyncPeriod, tweak)
		if err := group.add(inf, handler, "pod"); err != nil {
			return err
		}
		compute = func() ([]kvfleet.Worker, []string) {
			return workersFromPods(listCached[corev1.Pod](inf, sel), c)
		}
	}

	group.start(ctx)
	if unsynced := group.sync(ctx); len(unsynced) > 0 {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("discovery: %v cache did not sync", unsynced)
	}

	var last []kvfleet.Worker
	first := true
	for {
		ws, skipped := compute()
		if first || !slices.Equal(ws, last) {
			for _, s := range skipped {
				k.log.Warn("discovery: worker skipped", "reason", s)
			}
			k.skipped.Store(int64(len(skipped)))
			k.workers.Store(int64(len(ws)))
			k.changes.Add(1)
			onChange(slices.Clone(ws))
			last, first = ws, false
		}
		if !ch.next(ctx, c.Debounce) {
			return nil
		}
	}
}
