package plannerconfig

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/kvgate/kvgate/internal/confaddr"
)

// objectName is a Kubernetes object name (RFC 1123 subdomain).
var objectName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// Validate reports the first invalid value; path is the section's key path
// ("planner" in the file), which every error names. The groups are checked
// in the file's order: timing and targets, forecaster, hysteresis and
// correction, pools, metric sources, actuator, admin listener.
func (x *Config) Validate(path string) error {
	for _, check := range []func(string) error{
		x.validateTiming, x.validateForecaster, x.validateTuning, x.validatePools,
		x.validateSources, x.validateActuator, x.validateAdmin,
	} {
		if err := check(path); err != nil {
			return err
		}
	}
	return nil
}

// validateTiming checks the interval, the targets and the durations and
// bounds of the SLA policy.
func (x *Config) validateTiming(path string) error {
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
	return nil
}

// validateForecaster checks planner.forecaster.
func (x *Config) validateForecaster(path string) error {
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
	return nil
}

// validateTuning checks planner.hysteresis and planner.correction.
func (x *Config) validateTuning(path string) error {
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
	return nil
}

// validatePools checks each of planner.pools, their combination and the
// GPU budget over their minimums.
func (x *Config) validatePools(path string) error {
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
			if !objectName.MatchString(k.Name) {
				return fmt.Errorf("%s.kubernetes.name: %q is not a Kubernetes object name", pp, k.Name)
			}
			if k.Namespace != "" && !objectName.MatchString(k.Namespace) {
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
	return nil
}

// validateSources checks where the planner reads its metrics: Prometheus
// or direct scraping.
func (x *Config) validateSources(path string) error {
	if u := x.Prometheus.URL; u != "" {
		if err := checkHTTPURL(u); err != nil {
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
	return nil
}

// validateActuator checks planner.actuator for its kind.
func (x *Config) validateActuator(path string) error {
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
		if err := checkHTTPURL(a.URL); err != nil {
			return fmt.Errorf("%s.actuator.url: %w", path, err)
		}
	default:
		return fmt.Errorf("%s.actuator.kind: %q is not one of advisory, kubernetes, file, http", path, a.Kind)
	}
	return nil
}

// validateAdmin checks the admin listener and its token.
func (x *Config) validateAdmin(path string) error {
	if err := confaddr.CheckHostPort(x.Admin); err != nil {
		return fmt.Errorf("%s.admin: %w", path, err)
	}
	if err := x.AdminAuth.Validate(path + ".admin_auth"); err != nil {
		return err
	}
	return x.AdminAuth.CheckExposure(path+".admin", x.Admin, path+".admin_auth")
}

// checkHTTPURL accepts an absolute http(s) URL with a host.
func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an http:// or https:// URL")
	}
	return nil
}
