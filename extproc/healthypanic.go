package extproc

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// panicNotice counts and logs the picks made in panic: fewer than
// extproc.healthy_panic.threshold_percent of a pool's workers were healthy
// (health probes, outlier ejection), so the picker chose among all of them
// (picker.Config.HealthyPanicThreshold, Envoy's healthy_panic_threshold).
// The counter is Envoy's lb_healthy_panic
// (load_balancer_impl.cc hostSourceToUse); the log line is kvgate's, at
// most one per pool per panicLogEvery, since in panic every request would
// log.
type panicNotice struct {
	log     *slog.Logger
	counter *prometheus.CounterVec

	mu     sync.Mutex
	logged map[string]time.Time // pool (served model) → last line
}

const panicLogEvery = 10 * time.Second

func newPanicNotice(log *slog.Logger) *panicNotice {
	return &panicNotice{log: log, logged: map[string]time.Time{},
		counter: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_extproc_healthy_panic_total",
			Help: "Requests routed in panic: fewer than extproc.healthy_panic.threshold_percent of the pool's workers were healthy (not failing probes, not ejected), so kvgate chose among all of them (Envoy's lb_healthy_panic)."},
			[]string{"model"})}
}

// note records one request routed in panic for pool: healthy of hosts
// workers were healthy, threshold the percent applied.
func (n *panicNotice) note(pool string, healthy, hosts int, threshold float64, now time.Time) {
	n.counter.WithLabelValues(pool).Inc()
	n.mu.Lock()
	last, seen := n.logged[pool]
	due := !seen || now.Sub(last) >= panicLogEvery
	if due {
		n.logged[pool] = now
	}
	n.mu.Unlock()
	if due {
		n.log.Warn("healthy panic: too few healthy workers, routing among all of them, health ignored",
			"model", pool, "healthy", healthy, "workers", hosts, "threshold_percent", threshold,
			"hint", "every worker failing its probes at once is usually the machine (probe timeouts under CPU load), not the engines; see extproc.health_check and kvgate_extproc_health_probes_total")
	}
}
