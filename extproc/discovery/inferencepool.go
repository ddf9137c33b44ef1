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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	gieclient "sigs.k8s.io/gateway-api-inference-extension/client-go/clientset/versioned"
	gieinformers "sigs.k8s.io/gateway-api-inference-extension/client-go/informers/externalversions"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// PoolClients are the API clients the InferencePool source reads through:
// the core API (pods), GIE's generated clientset (InferencePool v1) and
// the dynamic client (InferenceObjective, which has no Go type in the GIE
// release kvgate builds against).
type PoolClients struct {
	Core    kubernetes.Interface
	GIE     gieclient.Interface
	Dynamic dynamic.Interface
}

// NewPoolClients connects the three clients: in-cluster when kubeconfig
// is "", else with that kubeconfig file.
func NewPoolClients(kubeconfig string) (PoolClients, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return PoolClients{}, fmt.Errorf("discovery: kubernetes client config: %w", err)
	}
	return PoolClientsFor(rc)
}

// PoolClientsFor builds the clients from a rest config.
func PoolClientsFor(rc *rest.Config) (PoolClients, error) {
	core, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return PoolClients{}, fmt.Errorf("discovery: kubernetes client: %w", err)
	}
	gie, err := gieclient.NewForConfig(rc)
	if err != nil {
		return PoolClients{}, fmt.Errorf("discovery: inference extension client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return PoolClients{}, fmt.Errorf("discovery: dynamic client: %w", err)
	}
	return PoolClients{Core: core, GIE: gie, Dynamic: dyn}, nil
}

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
	clients PoolClients
	cfg     kubeselect.InferencePool
	hooks   PoolHooks
	log     *slog.Logger

	present    atomic.Bool
	workers    atomic.Int64
	skipped    atomic.Int64
	objectives atomic.Int64
	changes    atomic.Int64
}

var _ Source = (*InferencePoolSource)(nil)

// NewInferencePool validates cfg, whose namespace must be resolved, and
// returns a source reading through clients. log may be nil.
func NewInferencePool(clients PoolClients, cfg kubeselect.InferencePool, hooks PoolHooks, log *slog.Logger) (*InferencePoolSource, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	if cfg.Namespace == "" {
		return nil, errors.New("discovery: inference_pool.namespace must be resolved before the source starts")
	}
	if clients.Core == nil || clients.GIE == nil {
		return nil, errors.New("discovery: inference pool source needs the core and GIE clients")
	}
	if log == nil {
		log = slog.Default()
	}
	return &InferencePoolSource{clients: clients, cfg: cfg.WithDefaults(), hooks: hooks, log: log}, nil
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
func (s *InferencePoolSource) objectivesServed() bool {
	if !s.cfg.WatchObjectives() || s.clients.Dynamic == nil {
		return false
	}
	gv := ObjectiveResource.GroupVersion().String()
	list, err := s.clients.Core.Discovery().ServerResourcesForGroupVersion(gv)
	if err != nil {
		if apierrors.IsNotFound(err) {
			s.log.Warn("discovery: InferenceObjective is not served (its CRD is not installed): every request has priority 0", "group_version", gv)
		} else {
			s.log.Warn("discovery: cannot tell whether InferenceObjective is served: every request has priority 0", "group_version", gv, "err", err)
		}
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == ObjectiveResource.Resource {
			return true
		}
	}
	s.log.Warn("discovery: InferenceObjective is not served: every request has priority 0", "group_version", gv)
	return false
}

// Run starts the informers, reports the set once their caches have synced
// (empty when the pool is not there yet), then again whenever it changes,
// at most once per Debounce.
func (s *InferencePoolSource) Run(ctx context.Context, onChange func([]kvfleet.Worker)) error {
	c := s.cfg
	ctx, cancel := context.WithCancel(ctx)
	// One pool, by name: the informer holds only it.
	gieFactory := gieinformers.NewSharedInformerFactoryWithOptions(s.clients.GIE, c.ResyncPeriod,
		gieinformers.WithNamespace(c.Namespace), gieinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.Name).String()
		}))
	// Every pod of the namespace: the selector is the pool's and may
	// change, and re-selecting must not wait for a new list.
	coreFactory := informers.NewSharedInformerFactoryWithOptions(s.clients.Core, c.ResyncPeriod, informers.WithNamespace(c.Namespace))
	var dynFactory dynamicinformer.DynamicSharedInformerFactory
	watchObjectives := s.objectivesServed()
	if watchObjectives {
		dynFactory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(s.clients.Dynamic, c.ResyncPeriod, c.Namespace, nil)
	}
	// Deferred so that cancel runs first: Shutdown waits for the
	// informers, which stop only once the context is done.
	defer gieFactory.Shutdown()
	defer coreFactory.Shutdown()
	if dynFactory != nil {
		defer dynFactory.Shutdown()
	}
	defer cancel()

	ch := newChanges()
	handler := ch.handler()
	poolInf := gieFactory.Inference().V1().InferencePools()
	podInf := coreFactory.Core().V1().Pods()
	for name, inf := range map[string]cache.SharedIndexInformer{"inferencepool": poolInf.Informer(), "pod": podInf.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("discovery: %s handler: %w", name, err)
		}
	}
	var objLister cache.GenericNamespaceLister
	if dynFactory != nil {
		inf := dynFactory.ForResource(ObjectiveResource)
		if _, err := inf.Informer().AddEventHandler(handler); err != nil {
			return fmt.Errorf("discovery: inferenceobjective handler: %w", err)
		}
		objLister = inf.Lister().ByNamespace(c.Namespace)
	}
	poolLister := poolInf.Lister().InferencePools(c.Namespace)
	podLister := podInf.Lister().Pods(c.Namespace)

	gieFactory.Start(ctx.Done())
	coreFactory.Start(ctx.Done())
	var unsynced []string
	for typ, ok := range gieFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			unsynced = append(unsynced, typ.String())
		}
	}
	for typ, ok := range coreFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			unsynced = append(unsynced, typ.String())
		}
	}
	if dynFactory != nil {
		dynFactory.Start(ctx.Done())
		for gvr, ok := range dynFactory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				unsynced = append(unsynced, gvr.String())
			}
		}
	}
	if len(unsynced) > 0 {
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
		pool, err := poolLister.Get(c.Name)
		var state error
		switch {
		case apierrors.IsNotFound(err):
			state = fmt.Errorf("%w: %s (deleted, or not created yet)", ErrPoolMissing, poolName)
		case err != nil:
			return fmt.Errorf("discovery: get InferencePool %s: %w", poolName, err)
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
				pods, err := podLister.List(labels.Everything())
				if err != nil {
					return fmt.Errorf("discovery: list pods of %s: %w", c.Namespace, err)
				}
				ws, skipped = workersFromPool(pool, pods, c)
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
		if objLister != nil || first {
			prio := map[string]int{}
			var skipped []string
			if objLister != nil {
				prio, skipped, err = s.listObjectives(objLister)
				if err != nil {
					return err
				}
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

// listObjectives lists the pool's objectives from the informer cache.
func (s *InferencePoolSource) listObjectives(l cache.GenericNamespaceLister) (map[string]int, []string, error) {
	objs, err := l.List(labels.Everything())
	if err != nil {
		return nil, nil, fmt.Errorf("discovery: list InferenceObjectives: %w", err)
	}
	us := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			us = append(us, u)
		}
	}
	prio, skipped := objectivePriorities(us, s.cfg)
	return prio, skipped, nil
}
