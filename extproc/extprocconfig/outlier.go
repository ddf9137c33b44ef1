package extprocconfig

import (
	"fmt"
	"time"

	"github.com/kvgate/kvgate/internal/yamlconf"
)

// Outlier configures passive outlier ejection with Envoy's outlier_detection
// semantics (envoy/config/cluster/v3/outlier_detection.proto): a worker
// whose responses, as the ext_proc response path sees them, fail
// Consecutive5xx times in a row (any 5xx, including the proxy's own 503/504
// for connect failures and upstream timeouts), or ConsecutiveGatewayFailure
// times in a row (502, 503, 504), is ejected for BaseEjectionTime × the
// number of times it has been ejected, capped at MaxEjectionTime; at most
// MaxEjectionPercent of a pool's endpoints are ejected at once. When an
// ejection ends (or an active health check passes again) the worker is
// slow-started: its share of traffic ramps linearly over SlowStart from
// SlowStartMinWeightPercent, as Envoy's slow_start_config does.
type Outlier struct {
	Disabled                  bool              `yaml:"disabled"`
	Consecutive5xx            int               `yaml:"consecutive_5xx"`
	ConsecutiveGatewayFailure int               `yaml:"consecutive_gateway_failure"`
	BaseEjectionTime          yamlconf.Duration `yaml:"base_ejection_time"`
	MaxEjectionTime           yamlconf.Duration `yaml:"max_ejection_time"`
	MaxEjectionPercent        int               `yaml:"max_ejection_percent"`
	// SlowStart is the ramp after recovery; SlowStartDisabled turns it off.
	SlowStart                 yamlconf.Duration `yaml:"slow_start"`
	SlowStartDisabled         bool              `yaml:"slow_start_disabled"`
	SlowStartMinWeightPercent int               `yaml:"slow_start_min_weight_percent"`
}

func (x *Outlier) applyDefaults() {
	if x.Consecutive5xx == 0 {
		x.Consecutive5xx = 5 // Envoy's default
	}
	if x.ConsecutiveGatewayFailure == 0 {
		x.ConsecutiveGatewayFailure = 5 // Envoy's default
	}
	if x.BaseEjectionTime == 0 {
		x.BaseEjectionTime = yamlconf.Duration(30 * time.Second) // Envoy's default
	}
	if x.MaxEjectionTime == 0 {
		x.MaxEjectionTime = yamlconf.Duration(300 * time.Second) // Envoy's default
	}
	if x.MaxEjectionPercent == 0 {
		// Envoy defaults to 10 %, which in a pool of fewer than ten hosts
		// ejects nobody (it ejects only while (ejected+1)/hosts stays
		// within the bound); inference pools are small, so half.
		x.MaxEjectionPercent = 50
	}
	if x.SlowStart == 0 {
		x.SlowStart = yamlconf.Duration(30 * time.Second)
	}
	if x.SlowStartMinWeightPercent == 0 {
		x.SlowStartMinWeightPercent = 10 // Envoy's min_weight_percent default
	}
}

// validate reports the first invalid value; path is the section's key path.
func (x *Outlier) validate(path string) error {
	switch {
	case x.Consecutive5xx < 1 || x.Consecutive5xx > 1000:
		return fmt.Errorf("%s.consecutive_5xx: %d outside [1, 1000]", path, x.Consecutive5xx)
	case x.ConsecutiveGatewayFailure < 1 || x.ConsecutiveGatewayFailure > 1000:
		return fmt.Errorf("%s.consecutive_gateway_failure: %d outside [1, 1000]", path, x.ConsecutiveGatewayFailure)
	case x.BaseEjectionTime.D() < time.Millisecond || x.BaseEjectionTime.D() > 24*time.Hour:
		return fmt.Errorf("%s.base_ejection_time: %v outside [1ms, 24h]", path, x.BaseEjectionTime.D())
	case x.MaxEjectionTime.D() < x.BaseEjectionTime.D() || x.MaxEjectionTime.D() > 24*time.Hour:
		return fmt.Errorf("%s.max_ejection_time: %v must be at least base_ejection_time (%v) and at most 24h", path, x.MaxEjectionTime.D(), x.BaseEjectionTime.D())
	case x.MaxEjectionPercent < 1 || x.MaxEjectionPercent > 100:
		return fmt.Errorf("%s.max_ejection_percent: %d outside [1, 100]", path, x.MaxEjectionPercent)
	case x.SlowStart.D() > 24*time.Hour:
		return fmt.Errorf("%s.slow_start: %v is more than 24h", path, x.SlowStart.D())
	case x.SlowStartMinWeightPercent < 1 || x.SlowStartMinWeightPercent > 100:
		return fmt.Errorf("%s.slow_start_min_weight_percent: %d outside [1, 100]", path, x.SlowStartMinWeightPercent)
	}
	return nil
}
