package extproc

import (
	"sync"
	"time"

	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/prometheus/client_golang/prometheus"
)

// outlierDetector is passive health checking from the responses the
// ext_proc response path sees, with Envoy's outlier_detection semantics
// (source/common/upstream/outlier_detection_impl.cc, split_external_local_origin_errors
// false):
//
//   - every 5xx counts towards consecutive_5xx; 502, 503 and 504 also count
//     towards consecutive_gateway_failure. The proxy's own replies for a
//     connect failure or an upstream timeout are 503 and 504, so
//     local-origin failures count in both, as in Envoy. A response below
//     500 resets both counters.
//   - a primary the proxy had to walk past (it reported serving a fallback)
//     failed locally: counted as a gateway failure.
//   - reaching either threshold ejects the endpoint for base_ejection_time ×
//     its ejection count, capped at max_ejection_time, unless that would put
//     more than max_ejection_percent of its pool's endpoints out at once.
//     The count drops by one for each base_ejection_time the endpoint then
//     stays un-ejected (Envoy decrements it on its interval timer).
//   - when an ejection ends, and when an active health check passes again,
//     the endpoint is slow-started (Envoy slow_start_config, aggression 1):
//     its weight ramps linearly from min_weight_percent to 1 over slow_start.
//
// A stream that ends without a response (client cancel, or an upstream
// reset mid-body, which the processor cannot tell apart) counts neither way.
// Ejection is per endpoint (ip:port, Envoy's host), so all data-parallel
// ranks behind one endpoint go together. Time is passed in.
type outlierDetector struct {
	cfg extprocconfig.Outlier

	mu       sync.Mutex
	hosts    map[string]*outlierHost // by endpoint
	poolOf   map[string]string       // endpoint → pool (served model)
	poolSize map[string]int          // endpoints per pool

	ejections *prometheus.CounterVec
	responses *prometheus.CounterVec
}

type outlierHost struct {
	cons5xx, consGateway int
	ejectedUntil         time.Time // zero: not ejected
	ejections            int       // multiplier for the next ejection
	unejectedAt          time.Time // when the last ejection ended
	rampFrom             time.Time // slow start began; zero: none
}

// Response classes counted by kvgate_extproc_outlier_responses_total.
const (
	outlierSuccess        = "success"
	outlier5xx            = "5xx"
	outlierGatewayFailure = "gateway_failure"
	outlierLocalOrigin    = "local_origin_failure"
)

func newOutlierDetector(cfg extprocconfig.Outlier) *outlierDetector {
	d := &outlierDetector{
		cfg: cfg, hosts: map[string]*outlierHost{}, poolOf: map[string]string{}, poolSize: map[string]int{},
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_extproc_outlier_ejections_total",
			Help: "Times each worker endpoint was ejected by passive outlier detection."}, []string{"worker"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_extproc_outlier_responses_total",
			Help: "Responses seen by outlier detection, by class (success, 5xx, gateway_failure, local_origin_failure)."}, []string{"class"}),
	}
	for _, c := range []string{outlierSuccess, outlier5xx, outlierGatewayFailure, outlierLocalOrigin} {
		d.responses.WithLabelValues(c)
	}
	return d
}

// setTargets replaces the watched endpoints (endpoint → pool), keeping the
// state of those that stay.
func (d *outlierDetector) setTargets(poolOf map[string]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	hosts := make(map[string]*outlierHost, len(poolOf))
	size := map[string]int{}
	for ep, p := range poolOf {
		if h, ok := d.hosts[ep]; ok {
			hosts[ep] = h
		} else {
			hosts[ep] = &outlierHost{}
		}
		size[p]++
	}
	d.hosts, d.poolOf, d.poolSize = hosts, poolOf, size
}

// observe records one response from endpoint: its HTTP status, or 0 for a
// local-origin failure (connect failure, reset before headers).
func (d *outlierDetector) observe(endpoint string, status int, now time.Time) {
	if d == nil {
		return
	}
	class := outlierSuccess
	switch {
	case status == 0:
		class = outlierLocalOrigin
	case status == 502 || status == 503 || status == 504:
		class = outlierGatewayFailure
	case status >= 500:
		class = outlier5xx
	}
	d.responses.WithLabelValues(class).Inc()
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.hosts[endpoint]
	if h == nil {
		return // not (or no longer) a member
	}
	d.refreshLocked(h, now)
	if class == outlierSuccess {
		h.cons5xx, h.consGateway = 0, 0
		return
	}
	h.cons5xx++
	if class != outlier5xx {
		h.consGateway++
	}
	if h.cons5xx >= d.cfg.Consecutive5xx || h.consGateway >= d.cfg.ConsecutiveGatewayFailure {
		d.ejectLocked(endpoint, h, now)
	}
}

// ejectLocked ejects h unless it already is or the pool's bound forbids.
func (d *outlierDetector) ejectLocked(endpoint string, h *outlierHost, now time.Time) {
	if !h.ejectedUntil.IsZero() {
		return
	}
	pool := d.poolOf[endpoint]
	out := 0
	for ep, o := range d.hosts {
		if d.poolOf[ep] == pool && !o.ejectedUntil.IsZero() {
			d.refreshLocked(o, now)
			if !o.ejectedUntil.IsZero() {
				out++
			}
		}
	}
	// Envoy's rule (DetectorImpl::ejectHost): eject only while the share
	// ejected, this one included, stays within the bound.
	if float64(100*(out+1)) > float64(d.cfg.MaxEjectionPercent*d.poolSize[pool]) {
		return
	}
	if !h.unejectedAt.IsZero() {
		if base := d.cfg.BaseEjectionTime.D(); base > 0 {
			h.ejections = max(0, h.ejections-int(now.Sub(h.unejectedAt)/base))
		}
	}
	h.ejections++
	dur := min(time.Duration(h.ejections)*d.cfg.BaseEjectionTime.D(), d.cfg.MaxEjectionTime.D())
	h.ejectedUntil = now.Add(dur)
	h.cons5xx, h.consGateway = 0, 0
	h.rampFrom = time.Time{}
	d.ejections.WithLabelValues(endpoint).Inc()
}

// refreshLocked ends an ejection whose time has come (starting the slow
// start) and a slow start that has run its course.
func (d *outlierDetector) refreshLocked(h *outlierHost, now time.Time) {
	if !h.ejectedUntil.IsZero() && !now.Before(h.ejectedUntil) {
		h.unejectedAt = h.ejectedUntil
		h.ejectedUntil = time.Time{}
		if !d.cfg.SlowStartDisabled && d.cfg.SlowStart > 0 {
			h.rampFrom = h.unejectedAt
		}
	}
	if !h.rampFrom.IsZero() && now.Sub(h.rampFrom) >= d.cfg.SlowStart.D() {
		h.rampFrom = time.Time{}
	}
}

// recovered is told that an active health check passed after failing: an
// ejection ends at once (Envoy's successful_active_health_check_uneject_host,
// on by default — a restarted engine must not sit out the rest of its
// ejection time) and the endpoint is slow-started.
func (d *outlierDetector) recovered(endpoint string, now time.Time) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.hosts[endpoint]
	if h == nil {
		return
	}
	if !h.ejectedUntil.IsZero() {
		h.unejectedAt = now
		h.ejectedUntil = time.Time{}
		h.cons5xx, h.consGateway = 0, 0
	}
	if !d.cfg.SlowStartDisabled && d.cfg.SlowStart > 0 {
		h.rampFrom = now
	}
}

// state reports whether endpoint is ejected at now and, if not, its
// slow-start weight in (0, 1] (1 when not ramping).
func (d *outlierDetector) state(endpoint string, now time.Time) (ejected bool, weight float64) {
	if d == nil {
		return false, 1
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.hosts[endpoint]
	if h == nil {
		return false, 1
	}
	d.refreshLocked(h, now)
	if !h.ejectedUntil.IsZero() {
		return true, 0
	}
	return false, d.weightLocked(h, now)
}

func (d *outlierDetector) weightLocked(h *outlierHost, now time.Time) float64 {
	if h.rampFrom.IsZero() {
		return 1
	}
	f := float64(now.Sub(h.rampFrom)) / float64(d.cfg.SlowStart.D())
	return min(1, max(float64(d.cfg.SlowStartMinWeightPercent)/100, f))
}

// counts reports how many endpoints are ejected and slow-starting at now.
func (d *outlierDetector) counts(now time.Time) (ejected, warming int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.hosts {
		d.refreshLocked(h, now)
		switch {
		case !h.ejectedUntil.IsZero():
			ejected++
		case !h.rampFrom.IsZero():
			warming++
		}
	}
	return ejected, warming
}

// observeRequest attributes one finished request: the endpoints the proxy
// walked past before the one that served it failed locally, and the one
// that served it answered status (0: no response seen, nothing counted).
func (d *outlierDetector) observeRequest(primary string, fallbacks []string, served string, status int, now time.Time) {
	if d == nil {
		return
	}
	if served != "" && served != primary {
		walked := []string{primary}
		for i, f := range fallbacks {
			if f == served {
				walked = append(walked, fallbacks[:i]...)
				break
			}
		}
		for _, ep := range walked {
			d.observe(ep, 0, now)
		}
	}
	if status == 0 {
		return
	}
	if served == "" {
		served = primary
	}
	d.observe(served, status, now)
}

var (
	mEjected = prometheus.NewDesc("kvgate_extproc_workers_ejected", "Worker endpoints ejected by passive outlier detection now.", nil, nil)
	mWarming = prometheus.NewDesc("kvgate_extproc_workers_slow_starting", "Worker endpoints in slow start after an ejection or a failed health check.", nil, nil)
)

type outlierCollector struct {
	d   *outlierDetector
	now func() time.Time
}

func (c outlierCollector) Describe(ch chan<- *prometheus.Desc) { ch <- mEjected; ch <- mWarming }

func (c outlierCollector) Collect(ch chan<- prometheus.Metric) {
	e, w := c.d.counts(c.now())
	ch <- prometheus.MustNewConstMetric(mEjected, prometheus.GaugeValue, float64(e))
	ch <- prometheus.MustNewConstMetric(mWarming, prometheus.GaugeValue, float64(w))
}
