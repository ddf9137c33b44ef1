package plannersidecar

import (
	"math"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// Metrics is the planner's Prometheus registry.
type Metrics struct {
	reg          *prometheus.Registry
	desired      *prometheus.GaugeVec
	current      *prometheus.GaugeVec
	forecastRate *prometheus.GaugeVec
	observedRate *prometheus.GaugeVec
	attainment   *prometheus.GaugeVec
	decisions    *prometheus.CounterVec
	collectErrs  *prometheus.CounterVec
	lastDecision prometheus.Gauge
}

// NewMetrics registers the planner's metrics on a registry of its own.
func NewMetrics() *Metrics {
	pool := []string{"pool"}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvgate_planner_desired_replicas",
			Help: "Replicas the planner wants per pool (serving plus still draining)."}, pool),
		current: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvgate_planner_current_replicas",
			Help: "Replicas observed per pool: ready, draining and provisioning."}, pool),
		forecastRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvgate_planner_forecast_request_rate",
			Help: "Forecast requests per second per pool at the planning horizon."}, pool),
		observedRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvgate_planner_observed_request_rate",
			Help: "Observed requests per second per pool over the last interval."}, pool),
		attainment: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvgate_planner_sla_attainment_ratio",
			Help: "Share of the last interval's first tokens and inter-token gaps within the targets (the lower of the two), per pool."}, pool),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_planner_decisions_total",
			Help: "Decisions per pool by action (up, down, hold)."}, []string{"pool", "action"}),
		collectErrs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_planner_collect_errors_total",
			Help: "Failures to observe or act, by source (engine, extproc, prometheus, actuator)."}, []string{"source"}),
		lastDecision: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvgate_planner_last_decision_timestamp_seconds",
			Help: "Unix time of the last decision."}),
	}
	m.reg.MustRegister(m.Collectors()...)
	return m
}

// Collectors lists the planner's collectors (deploy/inventory describes
// them to check dashboards and alerts against the code).
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.desired, m.current, m.forecastRate, m.observedRate, m.attainment, m.decisions, m.collectErrs, m.lastDecision}
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

func (m *Metrics) collectError(source string) {
	if m != nil {
		m.collectErrs.WithLabelValues(source).Inc()
	}
}

func (m *Metrics) observe(obs plan.Observation, d plan.Decision) {
	if m == nil {
		return
	}
	for pool, n := range d.Desired {
		m.desired.WithLabelValues(pool).Set(float64(n))
		o := obs.Pools[pool]
		m.current.WithLabelValues(pool).Set(float64(o.Replicas + o.Draining + o.Pending))
		m.observedRate.WithLabelValues(pool).Set(o.RequestRate)
		if f, ok := d.Terms[pool+".forecast_request_rate"]; ok {
			m.forecastRate.WithLabelValues(pool).Set(f)
		}
		if a := o.Attainment; a != nil {
			v := math.Inf(1)
			for _, x := range []float64{a.TTFT, a.ITL} {
				if x >= 0 {
					v = min(v, x)
				}
			}
			if !math.IsInf(v, 1) {
				m.attainment.WithLabelValues(pool).Set(v)
			}
		}
		action := d.Action[pool]
		if action == "" {
			action = "hold"
		}
		m.decisions.WithLabelValues(pool, action).Inc()
	}
	t := d.Time
	if t.IsZero() {
		t = time.Now()
	}
	m.lastDecision.Set(float64(t.UnixNano()) / 1e9)
}
