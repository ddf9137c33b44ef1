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
	// A section built in code rather than parsed has no defaults yet; the
	// copy gets the file's (plannerconfig.Config.ApplyDefaults, declared in
	// plan/defaults.go), so the caller's pools are not written to.
	pc := section
	pc.Pools = slices.Clone(pc.Pools)
	for i, p := range pc.Pools {
		if p.Kubernetes != nil {
			k := *p.Kubernetes
			pc.Pools[i].Kubernetes = &k
		}
	}
	pc.ApplyDefaults()
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
	interval := pc.Interval.D()
	if o.Interval > 0 {
		interval = o.Interval
	}
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
		return nil, fmt.Errorf("planner: %w", err)
	}
	fp := forecast.Params{
		Alpha: pc.Forecaster.Alpha, Beta: pc.Forecaster.Beta, NoiseRatio: pc.Forecaster.NoiseRatio,
		TrendDamping: pc.Forecaster.TrendDamping.D(),
	}
	if _, err := forecast.New(pc.Forecaster.Kind, fp); err != nil {
		return nil, fmt.Errorf("planner.forecaster: %w", err)
	}
	fc := func() forecast.Forecaster {
		f, _ := forecast.New(pc.Forecaster.Kind, fp) // checked above
		return f
	}

	var col collect.Collector
	if pc.Prometheus.URL != "" {
		window := pc.Prometheus.Window.D()
		if window == 0 {
			window = 2 * interval
		}
		sel := map[string]string{}
		for _, p := range pools {
			sel[p.Name] = p.Selector
		}
		col = collect.NewPrometheus(pc.Prometheus.URL, sel, window, pc.Prometheus.Timeout.D()).WithTargets(sla.TTFT, sla.ITL)
	} else {
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
		col = sc
	}

	var act actuate.Actuator = actuate.Advisory{}
	advisory := o.Advisory || pc.Actuator.Kind == "advisory"
	if !advisory {
		switch pc.Actuator.Kind {
		case "file":
			f, err := actuate.NewFile(pc.Actuator.File)
			if err != nil {
				return nil, fmt.Errorf("planner.actuator.file: %w", err)
			}
			act = f
		case "http":
			act = actuate.NewHTTP(pc.Actuator.URL, pc.Actuator.Timeout.D())
		case "kubernetes":
			targets := map[string]actuate.Target{}
			for i, p := range pools {
				if p.Kubernetes == nil {
					return nil, fmt.Errorf("planner.pools[%d].kubernetes: required with actuator kind kubernetes", i)
				}
				k := p.Kubernetes
				targets[p.Name] = actuate.Target{Group: k.Group, Kind: k.Kind, Name: k.Name, Namespace: k.Namespace, PodSelector: k.PodSelector}
			}
			k, err := actuate.KubernetesFromKubeconfig(pc.Actuator.Kubeconfig, targets)
			if err != nil {
				return nil, fmt.Errorf("planner.actuator: %w", err)
			}
			act = k
		}
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
