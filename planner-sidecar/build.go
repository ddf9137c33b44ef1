package plannersidecar

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/planner-sidecar/actuate"
	"github.com/kvgate/kvgate/planner-sidecar/collect"
	"github.com/kvgate/kvgate/planner-sidecar/forecast"
	"github.com/kvgate/kvgate/planner-sidecar/journal"
	"github.com/kvgate/kvgate/planner-sidecar/perfmodel"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
	"github.com/kvgate/kvgate/planner-sidecar/plannerconfig"
)

// Options are what the command line adds to the configuration file.
type Options struct {
	Advisory bool
	Interval time.Duration // 0 = planner.interval
	Journal  string        // "" = planner.journal
	Profile  string        // "" = planner.profile
	Log      *slog.Logger
}

// poolsOf returns the planner's pools: planner.pools, or when that is
// empty one pool per engine role present among workers (both →
// aggregated), each between 1 and the number of such engines. Workers are
// data-parallel ranks; an engine is one endpoint, however many ranks it has.
func poolsOf(pools []plannerconfig.Pool, workers []kvfleet.Worker) []plannerconfig.Pool {
	if len(pools) > 0 {
		return pools
	}
	count := map[string]int{}
	for _, e := range engineEndpoints(workers) {
		count[roleToPool(e.role)]++
	}
	var out []plannerconfig.Pool
	for _, name := range []string{plan.PoolAggregated, plan.PoolPrefill, plan.PoolDecode} {
		if n := count[name]; n > 0 {
			out = append(out, plannerconfig.Pool{Name: name, Min: 1, Max: n, GPUsPerReplica: 1})
		}
	}
	return out
}

// engineEndpoint is one engine as the planner sees it: its HTTP endpoint
// (scraped, and counted once per pool) and its role.
type engineEndpoint struct {
	endpoint string
	role     kvfleet.Role
}

// engineEndpoints folds workers (one per data-parallel rank, in the file's
// order: engine, then rank) back into engines, first appearance first.
func engineEndpoints(workers []kvfleet.Worker) []engineEndpoint {
	var out []engineEndpoint
	seen := map[string]bool{}
	for _, w := range workers {
		if seen[w.ID.Endpoint] {
			continue
		}
		seen[w.ID.Endpoint] = true
		out = append(out, engineEndpoint{endpoint: w.ID.Endpoint, role: w.Role})
	}
	return out
}

// roleToPool is the pool an engine of the given role belongs to: both is
// aggregated.
func roleToPool(r kvfleet.Role) string {
	switch r {
	case kvfleet.RolePrefill:
		return plan.PoolPrefill
	case kvfleet.RoleDecode:
		return plan.PoolDecode
	}
	return plan.PoolAggregated
}

// New builds a Loop from the planner: section and the fleet's workers
// (config.Config.Workers: engines: expanded, one per data-parallel rank):
// the SLA policy over the profile, the collector (Prometheus when
// planner.prometheus.url is set, otherwise direct scraping of the workers'
// engines and each pool's endpoints), the actuator (advisory when asked on
// the command line), the journal and the metrics. When planner.pools is
// empty the pools are derived from the workers' roles. The caller closes
// the journal (Loop.Journal) when done.
func New(section plannerconfig.Config, workers []kvfleet.Worker, o Options) (*Loop, error) {
	pc := withDefaults(section)
	pools, err := plannedPools(pc, workers)
	if err != nil {
		return nil, err
	}
	model, err := loadModel(pc, o)
	if err != nil {
		return nil, err
	}
	interval := pc.Interval.D()
	if o.Interval > 0 {
		interval = o.Interval
	}
	sla, err := buildSLA(pc, pools, interval)
	if err != nil {
		return nil, err
	}
	fc, err := forecasterFactory(pc.Forecaster)
	if err != nil {
		return nil, err
	}
	col, err := newCollector(pc, pools, workers, sla, interval)
	if err != nil {
		return nil, err
	}
	advisory := o.Advisory || pc.Actuator.Kind == "advisory"
	act, err := newActuator(pc.Actuator, pools, advisory)
	if err != nil {
		return nil, err
	}
	l := &Loop{
		Policy: plan.NewSLA(sla, model, fc), Collector: col, Actuator: act, Advisory: advisory,
		Metrics: NewMetrics(), Interval: interval, Log: o.Log,
	}
	jp := pc.Journal
	if o.Journal != "" {
		jp = o.Journal
	}
	if jp != "" {
		w, err := journal.Open(jp)
		if err != nil {
			return nil, fmt.Errorf("planner.journal: %w", err)
		}
		l.Journal = w
	}
	return l, nil
}

// withDefaults is the section with the file's defaults applied. A section
// built in code rather than parsed has no defaults yet; the copy gets the
// file's (plannerconfig.Config.ApplyDefaults, declared in
// plan/defaults.go), so the caller's pools are not written to.
func withDefaults(section plannerconfig.Config) plannerconfig.Config {
	pc := section
	pc.Pools = slices.Clone(pc.Pools)
	for i, p := range pc.Pools {
		if p.Kubernetes != nil {
			k := *p.Kubernetes
			pc.Pools[i].Kubernetes = &k
		}
	}
	pc.ApplyDefaults()
	return pc
}

// plannedPools are the pools the planner sizes (poolsOf): either the
// aggregated pool or the prefill/decode split, never both.
func plannedPools(pc plannerconfig.Config, workers []kvfleet.Worker) ([]plannerconfig.Pool, error) {
	pools := poolsOf(pc.Pools, workers)
	if len(pools) == 0 {
		return nil, fmt.Errorf("planner.pools: no pools, and no engines: to derive them from")
	}
	hasAgg, hasSplit := false, false
	for _, p := range pools {
		hasAgg = hasAgg || p.Name == plan.PoolAggregated
		hasSplit = hasSplit || p.Name != plan.PoolAggregated
	}
	if hasAgg && hasSplit {
		return nil, fmt.Errorf("engines: a mix of role both and prefill/decode engines; list planner.pools explicitly")
	}
	return pools, nil
}

// loadModel is the performance model of the profile (--profile, else
// planner.profile).
func loadModel(pc plannerconfig.Config, o Options) (*perfmodel.Model, error) {
	profilePath := pc.Profile
	if o.Profile != "" {
		profilePath = o.Profile
	}
	if profilePath == "" {
		return nil, fmt.Errorf("planner.profile: required (write one with `kvgate planner profile --engine URL --out FILE`)")
	}
	prof, err := perfmodel.LoadProfile(profilePath)
	if err != nil {
		return nil, fmt.Errorf("planner.profile: %w", err)
	}
	model, err := perfmodel.New(prof)
	if err != nil {
		return nil, fmt.Errorf("planner.profile: %s: %w", profilePath, err)
	}
	return model, nil
}

// buildSLA is the SLA policy's configuration over the pools.
func buildSLA(pc plannerconfig.Config, pools []plannerconfig.Pool, interval time.Duration) (plan.SLAConfig, error) {
	horizon := pc.Horizon.D()
	if horizon == 0 {
		horizon = interval
	}
	sla := plan.SLAConfig{
		TTFT: pc.Targets.TTFT.D(), ITL: pc.Targets.ITL.D(), Horizon: horizon,
		Pools: map[string]plan.PoolLimits{}, GPUBudget: pc.GPUBudget,
		UpUtilization: pc.Hysteresis.UpUtilization, DownUtilization: pc.Hysteresis.DownUtilization,
		DownAfter: pc.Hysteresis.DownAfter, Cooldown: pc.Cooldown.D(),
		CorrectionAlpha: pc.Correction.Alpha, CorrectionMin: pc.Correction.Min, CorrectionMax: pc.Correction.Max,
		ErrorHeadroom: *pc.ErrorHeadroom, PeakHold: pc.PeakHold.D(), BacklogDrain: pc.BacklogDrain.D(),
	}
	if pc.Correction.Disabled {
		sla.CorrectionAlpha = -1
	}
	for _, p := range pools {
		sla.Pools[p.Name] = plan.PoolLimits{Min: p.Min, Max: p.Max, GPUsPerReplica: p.GPUsPerReplica}
	}
	// The section's keys were validated, with their paths, when the file
	// was parsed (plannerconfig.Config.Validate); what that could not see
	// is what only the planner derives: pools from engines' roles when
	// planner.pools is empty, and the GPU budget over them. NewSLA
	// requires the whole to Validate.
	if err := sla.Validate(); err != nil {
		return plan.SLAConfig{}, fmt.Errorf("planner: %w", err)
	}
	return sla, nil
}

// forecasterFactory makes one forecaster per pool of the configured kind,
// checked once here.
func forecasterFactory(fcfg plannerconfig.Forecaster) (func() forecast.Forecaster, error) {
	fp := forecast.Params{
		Alpha: fcfg.Alpha, Beta: fcfg.Beta, NoiseRatio: fcfg.NoiseRatio,
		TrendDamping: fcfg.TrendDamping.D(),
	}
	if _, err := forecast.New(fcfg.Kind, fp); err != nil {
		return nil, fmt.Errorf("planner.forecaster: %w", err)
	}
	return func() forecast.Forecaster {
		f, _ := forecast.New(fcfg.Kind, fp) // checked above
		return f
	}, nil
}

// newCollector is Prometheus when planner.prometheus.url is set, otherwise
// the scraper of each pool's endpoints and the workers' engines.
func newCollector(pc plannerconfig.Config, pools []plannerconfig.Pool, workers []kvfleet.Worker, sla plan.SLAConfig, interval time.Duration) (collect.Collector, error) {
	if pc.Prometheus.URL != "" {
		window := pc.Prometheus.Window.D()
		if window == 0 {
			window = 2 * interval
		}
		sel := map[string]string{}
		for _, p := range pools {
			sel[p.Name] = p.Selector
		}
		return collect.NewPrometheus(pc.Prometheus.URL, sel, window, pc.Prometheus.Timeout.D()).WithTargets(sla.TTFT, sla.ITL), nil
	}
	eps := map[string][]string{}
	for _, p := range pools {
		eps[p.Name] = append(eps[p.Name], p.Endpoints...)
	}
	for _, e := range engineEndpoints(workers) {
		pool := roleToPool(e.role)
		if _, ok := eps[pool]; ok && !slices.Contains(eps[pool], e.endpoint) {
			eps[pool] = append(eps[pool], e.endpoint)
		}
	}
	sc := collect.NewScraper(eps, pc.Scrape.Extproc, pc.Scrape.Timeout.D()).WithTargets(sla.TTFT, sla.ITL)
	if pc.Scrape.Authenticated() {
		// Fail at start on a token that cannot be read, rather than
		// on every scrape round after.
		key := "planner.scrape.token_file"
		if pc.Scrape.TokenFile == "" {
			key = "planner.scrape.token_env"
		}
		if _, err := pc.Scrape.Token(); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		sc = sc.WithToken(pc.Scrape.Token)
	}
	return sc, nil
}

// newActuator is the configured actuator, or the advisory one (which
// changes nothing) when advisory.
func newActuator(ac plannerconfig.Actuator, pools []plannerconfig.Pool, advisory bool) (actuate.Actuator, error) {
	if advisory {
		return actuate.Advisory{}, nil
	}
	switch ac.Kind {
	case "file":
		f, err := actuate.NewFile(ac.File)
		if err != nil {
			return nil, fmt.Errorf("planner.actuator.file: %w", err)
		}
		return f, nil
	case "http":
		return actuate.NewHTTP(ac.URL, ac.Timeout.D()), nil
	case "kubernetes":
		targets := map[string]actuate.Target{}
		for i, p := range pools {
			if p.Kubernetes == nil {
				return nil, fmt.Errorf("planner.pools[%d].kubernetes: required with actuator kind kubernetes", i)
			}
			k := p.Kubernetes
			targets[p.Name] = actuate.Target{Group: k.Group, Kind: k.Kind, Name: k.Name, Namespace: k.Namespace, PodSelector: k.PodSelector}
		}
		k, err := actuate.KubernetesFromKubeconfig(ac.Kubeconfig, targets)
		if err != nil {
			return nil, fmt.Errorf("planner.actuator: %w", err)
		}
		return k, nil
	}
	return actuate.Advisory{}, nil
}

// AdminHandler serves /metrics and /healthz (200 once a decision was made
// within three intervals, 503 otherwise).
func (l *Loop) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	if l.Metrics != nil {
		mux.Handle("/metrics", l.Metrics.Handler())
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := l.Healthy(time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}
