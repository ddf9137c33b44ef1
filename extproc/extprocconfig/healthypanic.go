package extprocconfig

import "fmt"

// HealthyPanic is Envoy's panic threshold for kvgate's own health signals
// (cluster.proto CommonLbConfig.healthy_panic_threshold; the rule in
// envoyproxy/envoy source/common/upstream/load_balancer_impl.cc,
// LoadBalancerBase::isHostSetInPanic): when fewer than ThresholdPercent of
// a pool's workers (draining ones not counted) are healthy — not failing
// their health probes (health_check), not ejected (outlier) — a request
// chooses among all of them, health ignored, and the router counts
// kvgate_extproc_healthy_panic_total and logs it. A transient that marks
// every worker down at once (probes timing out on a loaded machine) then
// costs cache affinity, never every request.
type HealthyPanic struct {
	// Disabled: never panic (Envoy: a threshold of 0). With it a pool
	// whose workers all fail their probes answers 503 no_eligible_worker.
	Disabled bool `yaml:"disabled"`
	// ThresholdPercent, 1..100; Envoy's default is 50.
	ThresholdPercent int `yaml:"threshold_percent"`
}

// DefaultHealthyPanicPercent is Envoy's default healthy_panic_threshold.
const DefaultHealthyPanicPercent = 50

func (h *HealthyPanic) applyDefaults() {
	if h.ThresholdPercent == 0 {
		h.ThresholdPercent = DefaultHealthyPanicPercent
	}
}

func (h HealthyPanic) validate(path string) error {
	if h.ThresholdPercent < 1 || h.ThresholdPercent > 100 {
		return fmt.Errorf("%s.threshold_percent: %d outside [1, 100] (disabled: true turns the panic threshold off)", path, h.ThresholdPercent)
	}
	return nil
}

// Percent is the threshold the picker applies: 0 when disabled.
func (h HealthyPanic) Percent() float64 {
	if h.Disabled {
		return 0
	}
	return float64(h.ThresholdPercent)
}
