package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// PoolHooks receive what the InferencePool source learns besides the
// worker set. Each is called from Run's goroutine, never concurrently,
// and may be nil.
type PoolHooks struct {
	// Objectives receives the priority of each of the pool's
	// InferenceObjectives, by objective name, whenever that changes
	// (first once the caches have synced).
	Objectives func(map[string]int)
	// PoolState receives nil when the pool is there, and the reason when
	// it is not (never created, deleted, being deleted), on every change
	// (first once the caches have synced).
	PoolState func(error)
}

// ErrPoolMissing is wrapped by the PoolState reason when the pool is not
// there.
var ErrPoolMissing = errors.New("InferencePool not found")

// InferencePoolSource follows one InferencePool: kvgate as its endpoint
// picker. The worker set is recomputed from the informer caches on every
// change of the pool, of a pod in its namespace or of an objective, so a
// changed selector or port list re-selects at once. When the pool goes
// away the last set is kept (the engines are still there; routing on them
// beats failing every request) and PoolState reports why, which the
// extproc turns into failing readiness; GIE's own picker instead clears
// its datastore (v1.5.0 pkg/epp/controller/inferencepool_reconciler.go).
type InferencePoolSource struct {
	client dynamic.Interface
	cfg    kubeselect.InferencePool
	hooks  PoolHooks
	log    *slog.Logger

	present    atomic.Bool
	workers    atomic.Int64
	skipped    atomic.Int64
	objectives atomic.Int64
	changes    atomic.Int64
}

var _ Source = (*InferencePoolSource)(nil)

// NewInferencePool validates cfg, whose namespace must be resolved, and
// returns a source reading through client (NewClient). log may be nil.
func NewInferencePool(client dynamic.Interface, cfg kubeselect.InferencePool, hooks PoolHooks, log *slog.Logger) (*InferencePoolSource, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	if cfg.Namespace == "" {
		return nil, errors.New("discovery: inference_pool.namespace must be resolved before the source starts")
	}
	if client == nil {
		return nil, errors.New("discovery: inference pool source needs a client")
	}
	if log == nil {
		log = slog.Default()
	}
	return &InferencePoolSource{client: client, cfg: cfg.WithDefaults(), hooks: hooks, log: log}, nil
}

// PoolStats is a snapshot of the source's counters.
type PoolStats struct {
	Present    bool  // the pool was there at the last recompute
	Changes    int64 // onChange calls so far
	Workers    int64 // workers in the last reported set
	Skipped    int64 // ready pods left out of the last set (reasons are logged)
	Objectives int64 // the pool's objectives at the last recompute
}

// Stats returns the counters.
func (s *InferencePoolSource) Stats() PoolStats {
	return PoolStats{Present: s.present.Load(), Changes: s.changes.Load(), Workers: s.workers.Load(),
		Skipped: s.skipped.Load(), Objectives: s.objectives.Load()}
}

// Register adds the source's gauges to reg: whether the pool is there
// (0 = deleted or never seen: the extproc is failing readiness), the
// workers and skipped pods of the last set, the objectives known.
func (s *InferencePoolSource) Register(reg prometheus.Registerer) error {
	pool := prometheus.Labels{"pool": s.cfg.Namespace + "/" + s.cfg.Name}
	gauge := func(name, help string, v func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: pool}, v)
	}
	for _, c := range []prometheus.Collector{
		gauge("kvgate_discovery_inferencepool_present", "1 while the InferencePool exists; 0 = deleted or not yet created (last workers kept, readiness failing).",
			func() float64 {
				if s.present.Load() {
					return 1
				}
				return 0
			}),
		gauge("kvgate_discovery_inferencepool_workers", "Workers (ready pod × target port) in the last set.", func() float64 { return float64(s.workers.Load()) }),
		gauge("kvgate_discovery_inferencepool_skipped_pods", "Ready selected pods left out of the last set (reason logged).", func() float64 { return float64(s.skipped.Load()) }),
		gauge("kvgate_discovery_inferencepool_objectives", "InferenceObjectives naming the pool.", func() float64 { return float64(s.objectives.Load()) }),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("discovery: register pool metrics: %w", err)
		}
	}
	return nil
}

// objectivesServed reports whether the API server serves InferenceObjective:
// GIE v1.6 dropped its CRD, so a cluster may have pools and no objectives.
// An informer on a resource the server does not serve would never sync.
// The probe is a one-item list, which answers 404 for a resource the
// server does not serve (as API discovery would) and also tells a
// forbidden list apart, which the informer would otherwise retry forever.
func (s *InferencePoolSource) objectivesServed(ctx context.Context) bool {
	if !s.cfg.WatchObjectives() {
		return false
	}
	gv := ObjectiveResource.GroupVersion().String()
	_, err := s.client.Resource(ObjectiveResource).Namespace(s.cfg.Namespace).List(ctx, metav1.ListOptions{Limit: 1})
	switch {
	case err == nil:
		return true
	case apierrors.IsNotFound(err):
		s.log.Warn("discovery: InferenceObjective is not served (its CRD is not installed): every request has priority 0", "group_version", gv)
	default:
		s.log.Warn("discovery: cannot tell whether InferenceObjective is served: every request has priority 0", "group_version", gv, "err", err)
	}
	return false
}

// Run starts the informers, reports the set once their caches have synced
// (empty when the pool is not there yet), then again whenever it changes,
// at most once per Debounce.
func (s *InferencePoolSource) Run(ctx context.Context, onChange func([]kvfleet.Worker)) error {
	c := s.cfg
	ctx, cancel := context.WithCancel(ctx)
	var group informerGroup
	// Deferred so that cancel runs first: the informers stop only once the
	// context is done.
	defer group.wait()
	defer cancel()

	ch := newChanges()
	handler := ch.handler()
	// One pool, by name: the informer holds only it.
	poolInf := informerFor[giev1.InferencePool](s.client, poolResource, c.Namespace, c.ResyncPeriod, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.Name).String()
	})
	// Every pod of the namespace: the selector is the pool's and may
	// change, and re-selecting must not wait for a new list.
	podInf := informerFor[corev1.Pod](s.client, podResource, c.Namespace, c.ResyncPeriod, nil)
	if err := group.add(poolInf, handler, "inferencepool"); err != nil {
		return err
	}
	if err := group.add(podInf, handler, "pod"); err != nil {
		return err
	}
	var objInf cache.SharedIndexInformer
	if s.objectivesServed(ctx) {
		objInf = informerFor[unstructured.Unstructured](s.client, ObjectiveResource, c.Namespace, c.ResyncPeriod, nil)
		if err := group.add(objInf, handler, "inferenceobjective"); err != nil {
			return err
		}
	}
	group.start(ctx)
	if unsynced := group.sync(ctx); len(unsynced) > 0 {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("discovery: %v cache did not sync", unsynced)
	}

	var (
		last      []kvfleet.Worker
		lastState error
		lastPrio  map[string]int
		first     = true
	)
	poolName := c.Namespace + "/" + c.Name
	for {
		pool := getCached[giev1.InferencePool](poolInf, c.Namespace, c.Name)
		var state error
		switch {
		case pool == nil:
			state = fmt.Errorf("%w: %s (deleted, or not created yet)", ErrPoolMissing, poolName)
		case pool.DeletionTimestamp != nil:
			state = fmt.Errorf("%w: %s is being deleted", ErrPoolMissing, poolName)
		}
		s.present.Store(state == nil)
		if first || (state == nil) != (lastState == nil) || (state != nil && state.Error() != lastState.Error()) {
			if state != nil {
				s.log.Error("discovery: the InferencePool is gone: keeping the last workers, readiness failing until it is back",
					"pool", poolName, "reason", state.Error(), "workers_kept", len(last))
			} else if !first {
				s.log.Info("discovery: the InferencePool is back", "pool", poolName)
			}
			if s.hooks.PoolState != nil {
				s.hooks.PoolState(state)
			}
			lastState = state
		}
		if state == nil || first {
			var ws []kvfleet.Worker
			var skipped []string
			if state == nil {
				ws, skipped = workersFromPool(pool, listCached[corev1.Pod](podInf, labels.Everything()), c)
			}
			if first || !slices.Equal(ws, last) {
				for _, r := range skipped {
					s.log.Warn("discovery: worker skipped", "pool", poolName, "reason", r)
				}
				s.skipped.Store(int64(len(skipped)))
				s.workers.Store(int64(len(ws)))
				s.changes.Add(1)
				onChange(slices.Clone(ws))
				last = ws
			}
		}
		if objInf != nil || first {
			prio := map[string]int{}
			var skipped []string
			if objInf != nil {
				prio, skipped = objectivePriorities(listCached[unstructured.Unstructured](objInf, labels.Everything()), s.cfg)
			}
			if first || !maps.Equal(prio, lastPrio) {
				for _, r := range skipped {
					s.log.Warn("discovery: objective skipped", "pool", poolName, "reason", r)
				}
				s.log.Info("discovery: objectives", "pool", poolName, "priorities", prio)
				s.objectives.Store(int64(len(prio)))
				if s.hooks.Objectives != nil {
					s.hooks.Objectives(maps.Clone(prio))
				}
				lastPrio = prio
			}
		}
		first = false
		if !ch.next(ctx, c.Debounce) {
			return nil
		}
	}
}
