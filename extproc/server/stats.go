package server

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats is a snapshot of the server's counters.
type Stats struct {
	StreamsStarted     uint64 // ext_proc streams accepted
	StreamsActive      int64  // streams in progress now
	StreamsRefused     uint64 // streams answered 503 because MaxOpenStreams were open
	RequestsFullDuplex uint64 // requests whose body came FULL_DUPLEX_STREAMED
	RequestsBuffered   uint64 // requests whose body came BUFFERED
	RequestsHeaderOnly uint64 // requests routed at the end of headers
	Routed             uint64 // routing decisions sent to Envoy
	// ImmediateResponses counts local replies by HTTP status (only statuses
	// seen appear).
	ImmediateResponses map[int]uint64
	ProtocolErrors     uint64 // streams ended with a gRPC error for a bad message sequence or content
	DeciderPanics      uint64 // Decide calls that panicked (answered 500)
	InvalidDecisions   uint64 // decisions rejected by validation (answered 500)
	BufferedBytes      int64  // request bytes held against the buffer budget now
	// LimitHits counts requests stopped by a stream limit, by limit name
	// (buffer_budget, request_idle_timeout, request_timeout, max_duration).
	LimitHits map[string]uint64
	// ServedUnreported counts upstream responses to requests sent with
	// fallbacks that came without Envoy's served-host report (served.go).
	ServedUnreported uint64
}

// Stream limits, as counted in Stats.LimitHits and in the
// kvgate_extproc_stream_limit_hits_total metric.
const (
	limitBuffer = iota
	limitRequestIdle
	limitRequestTime
	limitStreamDuration
	numLimits
)

var limitNames = [numLimits]string{"buffer_budget", "request_idle_timeout", "request_timeout", "max_duration"}

type counters struct {
	streamsStarted, refusedOpen                 atomic.Uint64
	streamsActive                               atomic.Int64
	fullDuplex, buffered, headerOnly, routed    atomic.Uint64
	protocolErrors, deciderPanics, badDecisions atomic.Uint64
	limitHits                                   [numLimits]atomic.Uint64
	immediate                                   [600]atomic.Uint64 // index: HTTP status
	servedUnreported                            atomic.Uint64
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	c := &s.c
	st := Stats{
		StreamsStarted:     c.streamsStarted.Load(),
		StreamsActive:      c.streamsActive.Load(),
		StreamsRefused:     c.refusedOpen.Load(),
		RequestsFullDuplex: c.fullDuplex.Load(),
		RequestsBuffered:   c.buffered.Load(),
		RequestsHeaderOnly: c.headerOnly.Load(),
		Routed:             c.routed.Load(),
		ImmediateResponses: map[int]uint64{},
		ProtocolErrors:     c.protocolErrors.Load(),
		DeciderPanics:      c.deciderPanics.Load(),
		InvalidDecisions:   c.badDecisions.Load(),
		BufferedBytes:      s.budget.inUse(),
		LimitHits:          map[string]uint64{},
		ServedUnreported:   c.servedUnreported.Load(),
	}
	for status := range c.immediate {
		if n := c.immediate[status].Load(); n > 0 {
			st.ImmediateResponses[status] = n
		}
	}
	for i, name := range limitNames {
		st.LimitHits[name] = c.limitHits[i].Load()
	}
	return st
}

var (
	mStreams       = prometheus.NewDesc("kvgate_extproc_streams_total", "ext_proc streams accepted.", nil, nil)
	mStreamsActive = prometheus.NewDesc("kvgate_extproc_streams_active", "ext_proc streams open now.", nil, nil)
	mRefused       = prometheus.NewDesc("kvgate_extproc_streams_refused_total", "Streams answered 503 because extproc.streams.max_open were open.", nil, nil)
	mLocalReplies  = prometheus.NewDesc("kvgate_extproc_local_replies_total", "ImmediateResponses sent instead of routing, by HTTP status.", []string{"status"}, nil)
	mLimitHits     = prometheus.NewDesc("kvgate_extproc_stream_limit_hits_total", "Requests stopped by a stream limit, by limit.", []string{"limit"}, nil)
	mBuffered      = prometheus.NewDesc("kvgate_extproc_buffered_bytes", "Request header and body bytes held against extproc.streams.buffer_budget_bytes.", nil, nil)
	mBudget        = prometheus.NewDesc("kvgate_extproc_buffer_budget_bytes", "The configured buffer budget.", nil, nil)
	mProtoErrors   = prometheus.NewDesc("kvgate_extproc_protocol_errors_total", "Streams ended for a message Envoy would never send in that state.", nil, nil)
	mUnreported    = prometheus.NewDesc("kvgate_extproc_served_host_unreported_total", "Upstream responses to requests sent with fallbacks that came without Envoy's served-host report (override_host without selected_host_key, or envoy.lb not forwarded): booked on the primary, whichever host served.", nil, nil)
)

// Collector exports the server's counters as Prometheus metrics.
func (s *Server) Collector() prometheus.Collector { return serverCollector{s} }

type serverCollector struct{ s *Server }

func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mStreams, mStreamsActive, mRefused, mLocalReplies, mLimitHits, mBuffered, mBudget, mProtoErrors, mUnreported} {
		ch <- d
	}
}

func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(mStreams, prometheus.CounterValue, float64(st.StreamsStarted))
	ch <- prometheus.MustNewConstMetric(mStreamsActive, prometheus.GaugeValue, float64(st.StreamsActive))
	ch <- prometheus.MustNewConstMetric(mRefused, prometheus.CounterValue, float64(st.StreamsRefused))
	for code, n := range st.ImmediateResponses {
		ch <- prometheus.MustNewConstMetric(mLocalReplies, prometheus.CounterValue, float64(n), strconv.Itoa(code))
	}
	for name, n := range st.LimitHits {
		ch <- prometheus.MustNewConstMetric(mLimitHits, prometheus.CounterValue, float64(n), name)
	}
	ch <- prometheus.MustNewConstMetric(mBuffered, prometheus.GaugeValue, float64(st.BufferedBytes))
	ch <- prometheus.MustNewConstMetric(mBudget, prometheus.GaugeValue, float64(c.s.cfg.BufferBudgetBytes))
	ch <- prometheus.MustNewConstMetric(mProtoErrors, prometheus.CounterValue, float64(st.ProtocolErrors))
	ch <- prometheus.MustNewConstMetric(mUnreported, prometheus.CounterValue, float64(st.ServedUnreported))
}
