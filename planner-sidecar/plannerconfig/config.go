// Package plannerconfig is the `planner:` section of kvgate's
// configuration file: the keys `kvgate planner` reads, their defaults
// (taken from plan/defaults.go, where they are declared once) and their
// validation. config composes it, as it composes extprocconfig and
// indexerconfig (issue 18: each component owns its section).
//
// It is a package of its own rather than part of planner-sidecar's root
// package because config imports it, and the root package (the Loop, its
// collectors and actuators) is more than every kvgate process should link
// to parse the file.
package plannerconfig

import (
	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/internal/yamlconf"
)

// Config configures the `kvgate planner` sidecar: it sizes prefill and
// decode (or aggregated) pools from TTFT/ITL targets, a load forecast and
// a performance profile, and scales them through an actuator. The section
// may be left empty by processes that are not the planner; `kvgate
// planner` then derives pools from engines' roles.
type Config struct {
	// Interval between decisions.
	Interval yamlconf.Duration `yaml:"interval"`
	Targets  Targets           `yaml:"targets"`
	// Horizon is how far ahead load is forecast (the lookahead): set it to
	// the time a new replica takes to become ready plus one interval — a
	// replica asked for now serves from then until the next decision could
	// add more, the window the simulator benchmarks (0 = interval).
	Horizon yamlconf.Duration `yaml:"horizon"`
	Pools   []Pool            `yaml:"pools"`
	// GPUBudget bounds Σ replicas × gpus_per_replica over all pools (0 = none).
	GPUBudget  int        `yaml:"gpu_budget"`
	Forecaster Forecaster `yaml:"forecaster"`
	Hysteresis Hysteresis `yaml:"hysteresis"`
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
	Correction   Correction         `yaml:"correction"`
	// Prometheus, when its url is set, is where observations come from;
	// otherwise the planner scrapes engines' and extproc's /metrics itself.
	Prometheus Prometheus `yaml:"prometheus"`
	Scrape     Scrape     `yaml:"scrape"`
	// Profile is the JSON file `kvgate planner profile` writes (required
	// by `kvgate planner`).
	Profile  string   `yaml:"profile"`
	Actuator Actuator `yaml:"actuator"`
	// Journal is the JSONL file every decision is appended to ("" = none).
	Journal string `yaml:"journal"`
	// Admin serves /metrics and /healthz. Beyond loopback it needs
	// admin_auth (a bearer token on /metrics; /healthz and /readyz stay
	// open for kubelet probes) or admin_auth.allow_unauthenticated.
	Admin     string                `yaml:"admin"`
	AdminAuth secretfiles.AdminAuth `yaml:"admin_auth"`
}

// Targets are the p90 latency objectives.
type Targets struct {
	TTFT yamlconf.Duration `yaml:"ttft"`
	ITL  yamlconf.Duration `yaml:"itl"`
}

// Pool is one pool the planner sizes.
type Pool struct {
	// Name is prefill, decode or aggregated.
	Name           string `yaml:"name"`
	Min            int    `yaml:"min"`
	Max            int    `yaml:"max"`
	GPUsPerReplica int    `yaml:"gpus_per_replica"`
	// Kubernetes is the workload whose /scale subresource sizes the pool
	// (actuator kind kubernetes).
	Kubernetes *KubernetesTarget `yaml:"kubernetes"`
	// Selector is the PromQL label matchers that select this pool's engine
	// series, without braces (e.g. `namespace="llm",role="prefill"`).
	Selector string `yaml:"selector"`
	// Endpoints are extra engine host:port addresses to scrape for this
	// pool, besides engines: entries with the matching role.
	Endpoints []string `yaml:"endpoints"`
}

// KubernetesTarget names a scalable workload.
type KubernetesTarget struct {
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

// Forecaster selects the load forecaster.
type Forecaster struct {
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

// Hysteresis: scale up at once past up_utilization of SLA capacity;
// scale down only after down_after decisions in a row under
// down_utilization.
type Hysteresis struct {
	UpUtilization   float64 `yaml:"up_utilization"`
	DownUtilization float64 `yaml:"down_utilization"`
	DownAfter       int     `yaml:"down_after"`
}

// Correction tunes the online correction of the profile by
// observed/expected latency.
type Correction struct {
	Disabled bool    `yaml:"disabled"`
	Alpha    float64 `yaml:"alpha"`
	Min      float64 `yaml:"min"`
	Max      float64 `yaml:"max"`
}

// Prometheus is the Prometheus HTTP API to query.
type Prometheus struct {
	URL     string            `yaml:"url"`
	Timeout yamlconf.Duration `yaml:"timeout"`
	// Window is the PromQL range for rates and quantiles (default: 2 × interval).
	Window yamlconf.Duration `yaml:"window"`
}

// Actuator says how decisions are applied.
type Actuator struct {
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
