package connector

import (
	"errors"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// Metrics are the connector's request counters and latencies, labelled by
// method, listener ("engine" or "peer") and gRPC status code.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	quota    *prometheus.CounterVec
	expiries *prometheus.CounterVec
}

// NewMetrics registers the connector's metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kvagent_connector_requests_total",
			Help: "Connector requests by method, listener (engine, peer) and gRPC status code.",
		}, []string{"method", "listener", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kvgate_kvagent_connector_request_duration_seconds",
			Help: "Connector request handling time by method and listener.",
			// Control calls on a Unix socket take tens of microseconds; a
			// disk promotion inside Acquire, milliseconds.
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10),
		}, []string{"method", "listener"}),
		quota: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kvagent_connector_quota_refusals_total",
			Help: "Reserve and Acquire requests refused for lack of quota, by listener and bound (per_connection, per_process, per_peer, total).",
		}, []string{"listener", "scope"}),
		expiries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kvagent_connector_expired_slots_total",
			Help: "Slots given back because a client held them longer than the hold timeout, by listener and kind (reserved, acquired).",
		}, []string{"listener", "kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.quota, m.expiries)
	}
	return m
}

func (m *Metrics) quotaRefused(listener string, err error) {
	var qe *quotaError
	if m == nil || !errors.As(err, &qe) {
		return
	}
	m.quota.WithLabelValues(listener, qe.scope).Inc()
}

func (m *Metrics) expired(listener string, reserved, acquired int) {
	if m == nil {
		return
	}
	m.expiries.WithLabelValues(listener, "reserved").Add(float64(reserved))
	m.expiries.WithLabelValues(listener, "acquired").Add(float64(acquired))
}

func (m *Metrics) observe(fullMethod string, peer bool, code codes.Code, d time.Duration) {
	listener := "engine"
	if peer {
		listener = "peer"
	}
	method := path.Base(fullMethod)
	m.requests.WithLabelValues(method, listener, code.String()).Inc()
	m.latency.WithLabelValues(method, listener).Observe(d.Seconds())
}
