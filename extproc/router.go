// Package extproc is kvgate's request path behind Envoy: for each request
// the ext_proc server (extproc/server) calls Router.Decide, which runs the
// stages of route.go, one small call each:
//
//	preprocess → match → gather → admit → pick → book
//
// It preprocesses the body once (extproc/preprocess), asks the fleet index
// which workers hold its prefix (match.go), lists the candidates with the
// load every signal source reports (gather.go), sheds over the admission
// bounds (admit.go), asks the pure picker (picker/) for a worker (pick.go)
// and books the request's ticket on kvgate's own load accounting
// (extproc/loadview; book.go, ticket.go). Everything with I/O or a clock
// happens here; the decision itself does not. router.go holds the Router,
// its construction and the worker set.
package extproc

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/extproc/enginemetrics"
	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/extproc/flowcontrol"
	"github.com/kvgate/kvgate/extproc/loadview"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/picker"
)

// pool is the workers serving one base model (and its LoRA adapters).
type pool struct {
	model   string
	workers []picker.Worker
	// approx marks workers without KV events: their cache is inferred from
	// kvgate's own recent decisions.
	approx map[kvfleet.WorkerID]bool
	hasPD  bool // the pool has prefill-only workers
	// renderEngines are the endpoints that may render requests of a model
	// in engine mode (render_engines.go), draining workers left out.
	renderEngines []string
}

// fleet is the current worker set, replaced whole when discovery reports
// a change, so a request sees one consistent view without locking.
type fleet struct {
	pools map[string]*pool
	all   []picker.Worker // every worker, for requests without a model
}

// Router implements server.Decider: the request path behind the ext_proc
// server. It holds no lock of its own: each piece of state below guards
// itself (route.go lists who locks what), the worker set is swapped whole,
// and each request draws from its own random source.
type Router struct {
	cfg        extprocconfig.Config
	reg        *preprocess.Registry
	renderers  renderEngines // models in engine mode: who renders them, and the call (render_engines.go)
	idx        kvindex.Index
	load       *loadview.View
	recent     *loadview.Recent
	pending    *loadview.Pending    // decisions not yet in the index (pendingcredit.go)
	throughput *loadview.Throughput // per-worker prefill rates, fed by tickets
	fleet      atomic.Pointer[fleet]
	// objectives: the pool's InferenceObjective priorities by name
	// (priority.go), replaced whole; nil = none known.
	objectives atomic.Pointer[map[string]int]
	pickConfig picker.Config
	// picks and pd are the picker's configurations, validated once here
	// rather than on every pick.
	picks      picker.Checked
	pd         picker.CheckedPD
	decisions  sync.Pool // *picker.Decision, recycled per request (pick.go)
	log        *slog.Logger
	metrics    *metrics
	debug      *decisionLog
	debugOK    debugAccess            // who gets the x-kvgate-debug header
	panics     *panicNotice           // picks made in panic (healthypanic.go)
	health     *healthChecker         // nil when disabled
	engines    *enginemetrics.Scraper // nil when disabled
	outlier    *outlierDetector       // nil when disabled
	shared     *sharedLoad            // nil unless the Redis backend shares load
	flow       *flowGate              // nil when flow control is disabled (flowgate.go)
	saturation flowcontrol.Saturation // when a worker has no room (flow control)
	now        func() time.Time

	// signals lists the enabled sources above with their life cycle
	// (signals.go: targets in SetMembers, background work in Run,
	// metrics in Register); the gatherer reads them.
	signals  []signalSource
	gatherer *gatherer
	rand     randSources
}

var (
	_ server.Decider     = (*Router)(nil)
	_ server.ErrorShaper = (*Router)(nil)
)

// RouterConfig is what the request path reads of the configuration file:
// its own section and the workers the engines: list expands to. The index
// arrives opened (NewRouter's idx); whether replicas share their load is the
// index's own capability (kvindex.Shared), not a configuration key. The caller composes it (config.Config.Workers expands the
// list), so extproc does not depend on the whole file (issue 18).
type RouterConfig struct {
	Extproc extprocconfig.Config
	// Workers is the worker set at start (SetMembers replaces it).
	Workers []kvfleet.Worker
}

// NewRouter builds the request path from the configuration.
func NewRouter(rc RouterConfig, reg *preprocess.Registry, idx kvindex.Index, log *slog.Logger) (*Router, error) {
	if log == nil {
		log = slog.Default()
	}
	x := rc.Extproc
	pc := picker.DefaultConfig()
	pc.Policy = x.Policy
	pc.Temperature = x.Temperature
	pc.Fallbacks = x.Fallbacks
	pc.TierWeights = [kvfleet.NumTiers]float64{x.TierWeights.Device, x.TierWeights.Host, x.TierWeights.Disk, x.TierWeights.External}
	pc.HealthyPanicThreshold = x.HealthyPanic.Percent()
	if err := x.Picker.Apply(&pc); err != nil {
		return nil, fmt.Errorf("extproc %w", err)
	}
	picks, err := pc.Check()
	if err != nil {
		return nil, fmt.Errorf("extproc picker: %w", err)
	}
	pd := picker.DefaultPDConfig()
	pd.Picker = pc
	pd.MinUncachedTokens = x.PD.MinUncachedTokens
	pd.KVBytesPerToken = x.PD.KVBytesPerToken
	pd.TransferBytesPerSec = x.PD.TransferGBps * 1e9
	pdChecked, err := pd.Check()
	if err != nil {
		return nil, fmt.Errorf("extproc pd: %w", err)
	}
	recent, err := loadview.NewRecent(loadview.RecentConfig{TTL: x.ApproximateTTL.D(), MaxEntries: loadview.DefaultRecentMaxEntries})
	if err != nil {
		return nil, err
	}
	pending, err := loadview.NewPending(loadview.DefaultPendingConfig())
	if err != nil {
		return nil, err
	}
	debugOK, err := newDebugAccess(x.DebugHeader)
	if err != nil {
		return nil, err
	}
	r := &Router{
		cfg: x, reg: reg, idx: idx, load: loadview.New(), recent: recent, pending: pending, debugOK: debugOK,
		pickConfig: pc, picks: picks, pd: pdChecked, log: log,
		metrics: newMetrics(), debug: newDecisionLog(x.DecisionsKept), now: time.Now,
		throughput: loadview.NewThroughput(), panics: newPanicNotice(log),
	}
	if reg.UsesEngines() {
		r.renderers = newRenderEngines(r, x.Preprocess.Engine)
	}
	if !x.Outlier.Disabled {
		r.outlier = newOutlierDetector(x.Outlier)
		r.signals = append(r.signals, outlierSource(r.outlier, r))
	}
	if !x.HealthCheck.Disabled {
		r.health = newHealthChecker(x.HealthCheck)
		if r.outlier != nil {
			r.health.onRecover = func(endpoint string) { r.outlier.recovered(endpoint, r.now()) }
		}
		r.signals = append(r.signals, healthSource(r.health))
	}
	// An index shared by the replicas carries their load too; with any
	// other, each replica counts only its own.
	if sh, ok := idx.(kvindex.Shared); ok && !x.SharedLoad.Disabled {
		client, prefix := sh.LoadStore()
		r.shared = newSharedLoad(client, prefix, x.SharedLoad, r.load.SnapshotAll, r.load.Begun, log)
		r.signals = append(r.signals, sharedLoadSource(r.shared))
	}
	if !x.EngineMetrics.Disabled {
		emc := x.EngineMetrics // the scraper's own section, as parsed
		emc.Log = log
		r.engines = enginemetrics.New(emc)
		r.signals = append(r.signals, engineMetricsSource(r.engines, log))
	}
	if !x.FlowControl.Disabled {
		r.saturation = x.FlowControl.Saturation.Judge()
		r.flow = newFlowGate(x.FlowControl, r.poolHasRoom, r.metrics.flow, func() time.Time { return r.now() })
	}
	r.gatherer = &gatherer{load: r.load, throughput: r.throughput, outlier: r.outlier, health: r.health, shared: r.shared, engines: r.engines}
	if err := r.SetMembers(rc.Workers); err != nil {
		return nil, err
	}
	return r, nil
}

// SetMembers replaces the worker set (config.Config.Workers at start,
// discovery on every change). Data-parallel ranks share their engine's HTTP
// endpoint: vLLM's API server balances across them, so they are one
// destination with separate caches; each is a candidate and the request is
// sent to the shared endpoint. Requests in flight keep the view they
// started with; workers that left keep their accounting until their
// requests finish.
func (r *Router) SetMembers(workers []kvfleet.Worker) error {
	f := &fleet{pools: map[string]*pool{}}
	for _, w := range workers {
		if _, _, ok := r.reg.Lookup(w.Model); !ok {
			return fmt.Errorf("worker %s: model %q has no tokenizer loaded", w.ID, w.Model)
		}
		p := f.pools[w.Model]
		if p == nil {
			p = &pool{model: w.Model, approx: map[kvfleet.WorkerID]bool{}}
			f.pools[w.Model] = p
		}
		pw := picker.WorkerFrom(w)
		p.workers = append(p.workers, pw)
		p.hasPD = p.hasPD || w.Role == picker.RolePrefill
		if !w.Draining && rendersChat(w) && !slices.Contains(p.renderEngines, w.Endpoint()) {
			p.renderEngines = append(p.renderEngines, w.Endpoint())
		}
		if w.Approximate() {
			p.approx[w.ID] = true
		}
		f.all = append(f.all, pw)
	}
	for _, s := range r.signals {
		if s.setWorkers != nil {
			s.setWorkers(workers)
		}
	}
	if old := r.fleet.Swap(f); old != nil {
		for _, w := range old.all {
			if !slices.ContainsFunc(f.all, func(n picker.Worker) bool { return n.ID == w.ID }) {
				r.recent.ForgetWorker(w.ID)
				r.pending.ForgetWorker(w.ID)
			}
		}
	}
	r.kickFlow() // a worker that joined is room for requests waiting
	return nil
}

// Run does the signal sources' background work (health probes, engine
// metrics scraping, shared load) until ctx ends, and returns when every
// source has stopped.
func (r *Router) Run(ctx context.Context) { runSignals(ctx, r.signals) }

// Load exposes kvgate's own accounting (tests and metrics read it).
func (r *Router) Load() *loadview.View { return r.load }
