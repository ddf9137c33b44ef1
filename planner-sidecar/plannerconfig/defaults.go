package plannerconfig

import (
	"time"

	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// ApplyDefaults fills the keys the file omitted; every default is declared
// once, in the planner's policy package (plan/defaults.go), and taken from
// there. config.Parse applies it; `kvgate planner` (planner-sidecar.New)
// applies it again to a section built in code, which is idempotent.
func (x *Config) ApplyDefaults() {
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
