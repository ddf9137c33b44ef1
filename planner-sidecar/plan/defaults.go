package plan

import "time"

// The planner's defaults, declared once: the configuration file's planner
// section (plannerconfig.Config.ApplyDefaults, for an omitted key) and an
// SLAConfig built in code (applyDefaults, the simulator's) both take these.
//
// The hysteresis and correction values are Dynamo's SLA planner's; the
// tuned rules (headroom, peak hold, backlog drain, trend damping) are what
// `kvgate planner simulate` and `kvgate bench --only planner` run
// (lab/plannersim, for a 120 s provisioning delay and a 30 s interval), so
// that the production planner behaves as benchmarked.
const (
	DefaultUpUtilization   = 0.9
	DefaultDownUtilization = 0.7 // capped at the up utilization
	DefaultDownAfter       = 3
	DefaultCorrectionAlpha = 0.3
	DefaultCorrectionMin   = 0.5
	DefaultCorrectionMax   = 3.0

	DefaultErrorHeadroom = 2.0
	DefaultPeakHold      = 150 * time.Second // provisioning delay + interval
	DefaultBacklogDrain  = 120 * time.Second // provisioning delay
	DefaultTrendDamping  = 10 * time.Minute
)
