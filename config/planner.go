package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// Planner configures the `kvgate planner` sidecar: it sizes prefill and
// decode (or aggregated) pools from TTFT/ITL targets, a load forecast and
// a performance profile, and scales them through an actuator. The section
// may be left empty by processes that are not the planner; `kvgate
// planner` then derives pools from engines' roles.
type Planner struct {
	// Interval between decisions.
	Interval yamlconf.Duration `yaml:"interval"`
	Targets  PlannerTargets    `yaml:"targets"`
	// Horizon is how far ahead load is forecast (the lookahead): set it to
	// the time a new replica takes to become ready plus one interval — a
	// replica asked for now serves from then until the next decision could
	// add more, the window the simulator benchmarks (0 = interval).
	Horizon yamlconf.Duration `yaml:"horizon"`
	Pools   []PlannerPool     `yaml:"pools"`
	// GPUBudget bounds Σ replicas × gpus_per_replica over all pools (0 = none).
	GPUBudget  int               `yaml:"gpu_budget"`
	Forecaster PlannerForecaster `yaml:"forecaster"`
	Hysteresis PlannerHysteresis `yaml:"hysteresis"`
	// Cooldown: no scale-down of a pool sooner than this after its last change.
	Cooldown yamlconf.Duration `yaml:"cooldown"`
	// ErrorHeadroom (k) provisions for the upper end of the forecast: the
	// rate planned for is the forecast plus k × the mean absolute error of
	// the pool's recent forecasts at the horizon. Omitted: the simulator's
	// tuned plan.DefaultErrorHeadroom; 0 turns it off. In [0, 10].
	ErrorHeadroom *float64 `yaml:"error_headroom"`
	// PeakHold: a scale-down never goes below what the highest request rate
	// of this window needs (capacity shed now cannot be back sooner than a
	// replica provisions). Omitted: plan.DefaultPeakHold; 0 turns it off.
	PeakHold *yamlconf.Duration `yaml:"peak_hold"`
	// BacklogDrain: requests already queued in a pool need capacity to be
	// served within this time, on top of the forecast arrivals. Omitted:
	// plan.DefaultBacklogDrain; 0 turns it off.
	BacklogDrain *yamlconf.Duration `yaml:"backlog_drain"`
	Correction   PlannerCorrection  `yaml:"correction"`
	// Prometheus, when its url is set, is where observations come from;
	// otherwise the planner scrapes engines' and extproc's /metrics itself.
	Prometheus PlannerPrometheus `yaml:"prometheus"`
	Scrape     PlannerScrape     `yaml:"scrape"`
	// Profile is the JSON file `kvgate planner profile` writes (required
	// by `kvgate planner`).
	Profile  string          `yaml:"profile"`
	Actuator PlannerActuator `yaml:"actuator"`
	// Journal is the JSONL file every decision is appended to ("" = none).
	Journal string `yaml:"journal"`
	// Admin serves /metrics and /healthz. Beyond loopback it needs
	// admin_auth (a bearer token on /metrics; /healthz and /readyz stay
	// open for kubelet probes) or admin_auth.allow_unauthenticated.
	Admin     string                `yaml:"admin"`
	AdminAuth secretfiles.AdminAuth `yaml:"admin_auth"`
}

// PlannerTargets are the p90 latency objectives.
type PlannerTargets struct {
	TTFT yamlconf.Duration `yaml:"ttft"`
	ITL  yamlconf.Duration `yaml:"itl"`
}

// PlannerPool is one pool the planner sizes.
type PlannerPool struct {
	// Name is prefill, decode or aggregated.
	Name           string `yaml:"name"`
	Min            int    `yaml:"min"`
	Max            int    `yaml:"max"`
	GPUsPerReplica int    `yaml:"gpus_per_replica"`
	// Kubernetes is the workload whose /scale subresource sizes the pool
	// (actuator kind kubernetes).
	Kubernetes *PlannerKubernetesTarget `yaml:"kubernetes"`
	// Selector is the PromQL label matchers that select this pool's engine
	// series, without braces (e.g. `namespace="llm",role="prefill"`).
	Selector string `yaml:"selector"`
	// Endpoints are extra engine host:port addresses to scrape for this
	// pool, besides engines: entries with the matching role.
	Endpoints []string `yaml:"endpoints"`
}

// PlannerKubernetesTarget names a scalable workload.
type PlannerKubernetesTarget struct {
	// Kind is Deployment, StatefulSet, or another kind with /scale; Group
	// is its API group ("apps" for the two built-in ones; default by kind).
	Kind      string `yaml:"kind"`
	Group     string `yaml:"group"`
	Name      string `yaml:"name"`
	Namespace string `yaml:"namespace"`
	// PodSelector selects the workload's pods (label selector), for the
	// draining label and replica names.
	PodSelector string `yaml:"pod_selector"`
}

// PlannerForecaster selects the load forecaster.
type PlannerForecaster struct {
	// Kind is constant, ewma, holt or kalman.
	Kind       string  `yaml:"kind"`
	Alpha      float64 `yaml:"alpha"`
	Beta       float64 `yaml:"beta"`
	NoiseRatio float64 `yaml:"noise_ratio"`
	// TrendDamping is holt's trend damping time constant: the trend is
	// assumed to fade as e^(−t/trend_damping), so a trend read from noise or
	// at a turn is not carried the whole horizon. Omitted:
	// plan.DefaultTrendDamping; 0 = undamped. Other kinds ignore it.
	TrendDamping *yamlconf.Duration `yaml:"trend_damping"`
}

// PlannerHysteresis: scale up at once past up_utilization of SLA capacity;
// scale down only after down_after decisions in a row under
// down_utilization.
type PlannerHysteresis struct {
	UpUtilization   float64 `yaml:"up_utilization"`
	DownUtilization float64 `yaml:"down_utilization"`
	DownAfter       int     `yaml:"down_after"`
}

// PlannerCorrection tunes the online correction of the profile by
// observed/expected latency.
type PlannerCorrection struct {
	Disabled bool    `yaml:"disabled"`
	Alpha    float64 `yaml:"alpha"`
	Min      float64 `yaml:"min"`
	Max      float64 `yaml:"max"`
}

// PlannerPrometheus is the Prometheus HTTP API to query.
type PlannerPrometheus struct {
	URL     string            `yaml:"url"`
	Timeout yamlconf.Duration `yaml:"timeout"`
	// Window is the PromQL range for rates and quantiles (default: 2 × interval).
	Window yamlconf.Duration `yaml:"window"`
}

// PlannerScrape configures direct /metrics scraping.
type PlannerScrape struct {
	Timeout yamlconf.Duration `yaml:"timeout"`
	// Extproc is kvgate extproc's admin host:port ("" = not scraped).
	Extproc string `yaml:"extproc"`
	// TokenFile or TokenEnv is the bearer token every scrape sends
	// (`Authorization: Bearer <token>`, to extproc and the engines alike):
	// kvgate's admin listeners want it on /metrics beyond loopback. The
	// file is re-read on every scrape round, so a rotated Secret applies
	// at once; the token is never logged. The same tokens as admin_auth
	// are accepted (16..4096 printable bytes), checked when the planner
	// starts rather than when any process parses the file.
	TokenFile string `yaml:"token_file"`
	TokenEnv  string `yaml:"token_env"`
}

// Authenticated reports whether scrapes send a bearer token.
func (x PlannerScrape) Authenticated() bool { return x.TokenFile != "" || x.TokenEnv != "" }

// Token returns the scrape token now (the file is read afresh). Errors
// name the file or variable, never the value.
func (x PlannerScrape) Token() (string, error) {
	a := x.auth()
	return a.Token()
}

// auth is the token source as admin_auth reads it, so both accept and
// reject the same tokens.
func (x PlannerScrape) auth() secretfiles.AdminAuth {
	return secretfiles.AdminAuth{TokenFile: x.TokenFile, TokenEnv: x.TokenEnv}
}

// PlannerActuator says how decisions are applied.
type PlannerActuator struct {
	// Kind is advisory (decide and journal only; the default), kubernetes,
	// file or http.
	Kind string `yaml:"kind"`
	// File is the JSON file the file actuator rewrites atomically.
	File string `yaml:"file"`
	// URL is where the http actuator POSTs each decision.
	URL        string            `yaml:"url"`
	Timeout    yamlconf.Duration `yaml:"timeout"`
	Kubeconfig string            `yaml:"kubeconfig"` // empty = in-cluster
}

// ApplyDefaults fills the keys the file omitted; every default is declared
// once, in the planner's policy package (plan/defaults.go), and taken from
// there. Parse applies it; `kvgate planner` (planner-sidecar.New) applies
// it again to a section built in code, which is idempotent.
func (x *Planner) ApplyDefaults() {
	if x.Interval == 0 {
		x.Interval = yamlconf.Duration(10 * time.Second)
	}
	if x.Targets.TTFT == 0 {
		x.Targets.TTFT = yamlconf.Duration(time.Second)
	}
	if x.Targets.ITL == 0 {
		x.Targets.ITL = yamlconf.Duration(50 * time.Millisecond)
	}
	if x.Forecaster.Kind == "" {
		x.Forecaster.Kind = "holt"
	}
	if x.ErrorHeadroom == nil {
		k := plan.DefaultErrorHeadroom
		x.ErrorHeadroom = &k
	}
	if x.PeakHold == nil {
		d := yamlconf.Duration(plan.DefaultPeakHold)
		x.PeakHold = &d
	}
	if x.BacklogDrain == nil {
		d := yamlconf.Duration(plan.DefaultBacklogDrain)
		x.BacklogDrain = &d
	}
	if x.Forecaster.TrendDamping == nil {
		d := yamlconf.Duration(plan.DefaultTrendDamping)
		x.Forecaster.TrendDamping = &d
	}
	if x.Hysteresis.UpUtilization == 0 {
		x.Hysteresis.UpUtilization = plan.DefaultUpUtilization
	}
	if x.Hysteresis.DownUtilization == 0 {
		x.Hysteresis.DownUtilization = min(plan.DefaultDownUtilization, x.Hysteresis.UpUtilization)
	}
	if x.Hysteresis.DownAfter == 0 {
		x.Hysteresis.DownAfter = plan.DefaultDownAfter
	}
	if x.Correction.Alpha == 0 {
		x.Correction.Alpha = plan.DefaultCorrectionAlpha
	}
	if x.Correction.Min == 0 {
		x.Correction.Min = plan.DefaultCorrectionMin
	}
	if x.Correction.Max == 0 {
		x.Correction.Max = plan.DefaultCorrectionMax
	}
	if x.Prometheus.Timeout == 0 {
		x.Prometheus.Timeout = yamlconf.Duration(5 * time.Second)
	}
	if x.Scrape.Timeout == 0 {
		x.Scrape.Timeout = yamlconf.Duration(2 * time.Second)
	}
	if x.Actuator.Kind == "" {
		x.Actuator.Kind = "advisory"
	}
	if x.Actuator.Timeout == 0 {
		x.Actuator.Timeout = yamlconf.Duration(10 * time.Second)
	}
	if x.Admin == "" {
		x.Admin = "127.0.0.1:9410"
	}
	for i := range x.Pools {
		if x.Pools[i].GPUsPerReplica == 0 {
			x.Pools[i].GPUsPerReplica = 1
		}
		if k := x.Pools[i].Kubernetes; k != nil && k.Group == "" && (k.Kind == "Deployment" || k.Kind == "StatefulSet") {
			k.Group = "apps"
		}
	}
}

// plannerObjectName is a Kubernetes object name (RFC 1123 subdomain).
var plannerObjectName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// validate reports the first invalid value; path is the section's key path.
func (x *Planner) validate(path string) error {
	switch {
	case x.Interval.D() < 100*time.Millisecond || x.Interval.D() > time.Hour:
		return fmt.Errorf("%s.interval: must be in 100ms..1h", path)
	case x.Targets.TTFT.D() <= 0:
		return fmt.Errorf("%s.targets.ttft: must be > 0", path)
	case x.Targets.ITL.D() <= 0:
		return fmt.Errorf("%s.targets.itl: must be > 0", path)
	case x.Horizon.D() > 24*time.Hour:
		return fmt.Errorf("%s.horizon: must be at most 24h", path)
	case x.GPUBudget < 0:
		return fmt.Errorf("%s.gpu_budget: must be >= 0 (0 = no budget)", path)
	case x.Cooldown.D() > 24*time.Hour:
		return fmt.Errorf("%s.cooldown: must be at most 24h", path)
	case x.ErrorHeadroom != nil && !(*x.ErrorHeadroom >= 0 && *x.ErrorHeadroom <= 10):
		return fmt.Errorf("%s.error_headroom: %v is not in [0, 10] (0 = off)", path, *x.ErrorHeadroom)
	case x.PeakHold != nil && x.PeakHold.D() > 24*time.Hour:
		return fmt.Errorf("%s.peak_hold: must be at most 24h (0 = off)", path)
	case x.BacklogDrain != nil && x.BacklogDrain.D() > 24*time.Hour:
		return fmt.Errorf("%s.backlog_drain: must be at most 24h (0 = off)", path)
	}
	f := x.Forecaster
	switch f.Kind {
	case "constant", "ewma", "holt", "kalman":
	default:
		return fmt.Errorf("%s.forecaster.kind: %q is not one of constant, ewma, holt, kalman", path, f.Kind)
	}
	if f.Alpha < 0 || f.Alpha > 1 {
		return fmt.Errorf("%s.forecaster.alpha: must be in (0, 1] (0 = default)", path)
	}
	if f.Beta < 0 || f.Beta > 1 {
		return fmt.Errorf("%s.forecaster.beta: must be in (0, 1] (0 = default)", path)
	}
	if f.NoiseRatio < 0 {
		return fmt.Errorf("%s.forecaster.noise_ratio: must be > 0 (0 = default)", path)
	}
	if f.TrendDamping != nil && f.TrendDamping.D() > 24*time.Hour {
		return fmt.Errorf("%s.forecaster.trend_damping: must be at most 24h (0 = undamped)", path)
	}
	h := x.Hysteresis
	if h.UpUtilization <= 0 || h.UpUtilization > 1 {
		return fmt.Errorf("%s.hysteresis.up_utilization: must be in (0, 1]", path)
	}
	if h.DownUtilization <= 0 || h.DownUtilization > h.UpUtilization {
		return fmt.Errorf("%s.hysteresis.down_utilization: must be in (0, up_utilization]", path)
	}
	if h.DownAfter < 1 || h.DownAfter > 10000 {
		return fmt.Errorf("%s.hysteresis.down_after: must be in 1..10000", path)
	}
	c := x.Correction
	if c.Alpha <= 0 || c.Alpha > 1 {
		return fmt.Errorf("%s.correction.alpha: must be in (0, 1]", path)
	}
	if c.Min <= 0 || c.Min > 1 || c.Max < 1 || c.Max > 100 {
		return fmt.Errorf("%s.correction: min must be in (0, 1] and max in 1..100", path)
	}
	seen := map[string]bool{}
	gpus := 0
	for i, p := range x.Pools {
		pp := fmt.Sprintf("%s.pools[%d]", path, i)
		switch p.Name {
		case "prefill", "decode", "aggregated":
		default:
			return fmt.Errorf("%s.name: %q is not one of prefill, decode, aggregated", pp, p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("%s.name: duplicate pool %q", pp, p.Name)
		}
		seen[p.Name] = true
		if p.Min < 0 {
			return fmt.Errorf("%s.min: must be >= 0", pp)
		}
		if p.Max < 1 || p.Max < p.Min || p.Max > 100000 {
			return fmt.Errorf("%s.max: must be in max(1, min)..100000, got %d", pp, p.Max)
		}
		if p.GPUsPerReplica < 1 || p.GPUsPerReplica > 1024 {
			return fmt.Errorf("%s.gpus_per_replica: must be in 1..1024", pp)
		}
		gpus += p.Min * p.GPUsPerReplica
		if k := p.Kubernetes; k != nil {
			if k.Kind == "" {
				return fmt.Errorf("%s.kubernetes.kind: required (Deployment, StatefulSet, …)", pp)
			}
			if k.Group == "" {
				return fmt.Errorf("%s.kubernetes.group: required for kind %s", pp, k.Kind)
			}
			if !plannerObjectName.MatchString(k.Name) {
				return fmt.Errorf("%s.kubernetes.name: %q is not a Kubernetes object name", pp, k.Name)
			}
			if k.Namespace != "" && !plannerObjectName.MatchString(k.Namespace) {
				return fmt.Errorf("%s.kubernetes.namespace: %q is not a Kubernetes namespace", pp, k.Namespace)
			}
		}
		for j, e := range p.Endpoints {
			if err := confaddr.CheckHostPort(e); err != nil {
				return fmt.Errorf("%s.endpoints[%d]: %w", pp, j, err)
			}
		}
		if len(p.Selector) > 4096 {
			return fmt.Errorf("%s.selector: longer than 4096 bytes", pp)
		}
	}
	if seen["aggregated"] && (seen["prefill"] || seen["decode"]) {
		return fmt.Errorf("%s.pools: aggregated cannot be combined with prefill/decode pools", path)
	}
	if x.GPUBudget > 0 && gpus > x.GPUBudget {
		return fmt.Errorf("%s.gpu_budget: the pools' minimums need %d GPUs, over the budget of %d", path, gpus, x.GPUBudget)
	}
	if u := x.Prometheus.URL; u != "" {
		if err := checkPlannerURL(u); err != nil {
			return fmt.Errorf("%s.prometheus.url: %w", path, err)
		}
	}
	if x.Prometheus.Timeout.D() <= 0 || x.Scrape.Timeout.D() <= 0 || x.Actuator.Timeout.D() <= 0 {
		return fmt.Errorf("%s: prometheus.timeout, scrape.timeout and actuator.timeout must be > 0", path)
	}
	if x.Scrape.Extproc != "" {
		if err := confaddr.CheckHostPort(x.Scrape.Extproc); err != nil {
			return fmt.Errorf("%s.scrape.extproc: %w", path, err)
		}
	}
	// Only the shape here: every kvgate process parses this file, and only
	// the planner's pod mounts the scrape token; `kvgate planner` reads it
	// at start (planner-sidecar.New) and on every scrape round.
	if x.Scrape.TokenFile != "" && x.Scrape.TokenEnv != "" {
		return fmt.Errorf("%s.scrape: set token_file or token_env, not both", path)
	}
	a := x.Actuator
	switch a.Kind {
	case "advisory":
	case "kubernetes":
		for i, p := range x.Pools {
			if p.Kubernetes == nil {
				return fmt.Errorf("%s.pools[%d].kubernetes: required with actuator kind kubernetes", path, i)
			}
		}
	case "file":
		if a.File == "" {
			return fmt.Errorf("%s.actuator.file: required with actuator kind file", path)
		}
	case "http":
		if err := checkPlannerURL(a.URL); err != nil {
			return fmt.Errorf("%s.actuator.url: %w", path, err)
		}
	default:
		return fmt.Errorf("%s.actuator.kind: %q is not one of advisory, kubernetes, file, http", path, a.Kind)
	}
	if err := confaddr.CheckHostPort(x.Admin); err != nil {
		return fmt.Errorf("%s.admin: %w", path, err)
	}
	if err := x.AdminAuth.Validate(path + ".admin_auth"); err != nil {
		return err
	}
	return x.AdminAuth.CheckExposure(path+".admin", x.Admin, path+".admin_auth")
}

func checkPlannerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an http:// or https:// URL")
	}
	return nil
}
