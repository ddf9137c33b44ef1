package extproc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/extproc/preprocess"
)

type metrics struct {
	requests      *prometheus.CounterVec
	picks         *prometheus.CounterVec
	pd            *prometheus.CounterVec
	finished      *prometheus.CounterVec
	overlap       prometheus.Histogram
	ttfb          prometheus.Histogram
	decision      prometheus.Histogram
	indexErrors   prometheus.Counter
	fallbacksUsed prometheus.Counter
	approximate   *prometheus.CounterVec
	debugHeader   *prometheus.CounterVec
	shedByClass   *prometheus.CounterVec
	flow          *flowMetrics
}

// flowMetrics are flow control's (flowgate.go). Bands are labelled
// high (priority > 0), standard (0) and sheddable (< 0); tenants are
// hashed into tenantBuckets label values, never named.
type flowMetrics struct {
	depth       *prometheus.GaugeVec
	tenantDepth *prometheus.GaugeVec
	wait        *prometheus.HistogramVec
	requests    *prometheus.CounterVec
	deadlines   *prometheus.CounterVec
	// deadlineFrom holds deadlines' three children, counted on every
	// request's decision: no label lookup on that path.
	deadlineFrom map[string]prometheus.Counter
}

func newFlowMetrics() *flowMetrics {
	m := &flowMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvgate_flow_queue_depth",
			Help: "Requests waiting for room in a saturated pool, by priority band (high > 0, standard = 0, sheddable < 0)."}, []string{"band"}),
		tenantDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvgate_flow_tenant_queue_depth",
			Help: "Requests waiting, by tenant bucket: tenants (extproc.flow_control.tenant) hashed into 16 buckets, so one bucket far above the rest is a noisy tenant."}, []string{"tenant_bucket"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvgate_flow_queue_wait_seconds",
			Help: "Time requests spent waiting for room, by band, whatever ended the wait.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"band"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_flow_requests_total",
			Help: "Requests that met flow control's queue, by band and outcome: dispatched, cancelled (the client left), shed_deadline (could not start within its wait limit), shed_deadline_unreachable (refused at arrival: the queue ahead could not drain within its wait limit), shed_pushed_out (pushed out of a full queue by a lighter tenant's or higher band's request), shed_max_requests, shed_max_bytes (the queue's bounds)."}, []string{"band", "outcome"}),
		deadlines: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_flow_deadlines_total",
			Help: "Requests that met flow control, by where their wait limit came from: header (a TTFT budget in extproc.flow_control.deadline_header), max_wait (none given), invalid (a malformed budget, answered 400)."}, []string{"source"}),
	}
	m.deadlineFrom = map[string]prometheus.Counter{}
	for _, s := range []string{deadlineFromHeader, deadlineFromMaxWait, deadlineInvalid} {
		m.deadlineFrom[s] = m.deadlines.WithLabelValues(s)
	}
	return m
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_extproc_requests_total",
			Help: "Requests by served model and outcome (routed, bad_request, unknown_model, too_large, preprocess_timeout, client_cancel, shed, no_worker)."}, []string{"model", "outcome"}),
		picks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_extproc_picks_total",
			Help: "Requests routed to each worker (endpoint#rank)."}, []string{"worker"}),
		pd: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_extproc_pd_decisions_total",
			Help: "Prefill/decode decisions in pools with prefill workers."}, []string{"decision"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_extproc_requests_finished_total",
			Help: "Routed requests by how their stream ended; every routed request ends exactly once."}, []string{"outcome"}),
		overlap: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvgate_extproc_prefix_overlap_ratio",
			Help: "Share of the prompt's blocks cached on the chosen worker (any tier).", Buckets: prometheus.LinearBuckets(0, 0.1, 11)}),
		ttfb: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvgate_extproc_time_to_first_byte_seconds",
			Help: "From the routing decision to the first response byte through the proxy.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		decision: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvgate_extproc_decision_duration_seconds",
			Help: "Request headers in to routing headers out: the overhead kvgate adds.", Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16)}),
		indexErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvgate_extproc_index_errors_total",
			Help: "Index matches that failed or timed out; those requests were routed on load alone."}),
		fallbacksUsed: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvgate_extproc_fallbacks_used_total",
			Help: "Requests the proxy served on a fallback endpoint instead of the primary."}),
		approximate: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_extproc_untokenized_requests_total",
			Help: "Requests kvgate could not tokenize exactly and routed on load alone, by reason: chat_template (e.g. media content parts), request_template, unseen_input (a Responses previous_response_id), unmodelled_input (a Messages inline system message, an unknown block type, a tool_use without an id), engine_<reason> (a model in engine mode whose engine could not render it: kvgate_extproc_engine_render_fallbacks_total)."}, []string{"reason"}),
		debugHeader: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_extproc_debug_header_requests_total",
			Help: "Routed requests that asked for x-kvgate-debug, by whether extproc.debug_header granted it (refused: not a trusted client)."}, []string{"outcome"}),
		shedByClass: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_extproc_shed_by_priority_total",
			Help: "Requests shed by admission, by priority class: sheddable (priority < 0, shed first at admission.sheddable_fraction of the bounds) or standard."}, []string{"class"}),
		flow: newFlowMetrics(),
	}
}

// Register adds the router's metrics, and its load view as gauges, to reg.
func (r *Router) Register(reg prometheus.Registerer) error {
	m := r.metrics
	cs := []prometheus.Collector{m.requests, m.picks, m.pd, m.finished, m.overlap, m.ttfb, m.decision, m.indexErrors, m.fallbacksUsed, m.approximate, m.debugHeader, m.shedByClass, m.flow.depth, m.flow.tenantDepth, m.flow.wait, m.flow.requests, m.flow.deadlines, r.panics.counter, loadCollector{r}}
	for _, s := range r.signals {
		cs = append(cs, s.collectors...)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// ObserveDecision records one decision's overhead (server.Config.OnDecision).
func (r *Router) ObserveDecision(seconds float64) { r.metrics.decision.Observe(seconds) }

var (
	mInflight = prometheus.NewDesc("kvgate_extproc_worker_inflight_requests", "Requests kvgate routed to the worker that have not finished.", []string{"worker"}, nil)
	mPrefill  = prometheus.NewDesc("kvgate_extproc_worker_prefill_tokens", "Prompt tokens routed to the worker and not yet prefilled (kvgate's accounting).", []string{"worker"}, nil)
	mOpen     = prometheus.NewDesc("kvgate_extproc_open_tickets", "Routed requests whose accounting is still open; returns to 0 when idle.", nil, nil)
	mSegHits  = prometheus.NewDesc("kvgate_extproc_tokenizer_segment_cache_hits_total", "Prompt segments whose token ids came from the incremental cache.", nil, nil)
	mSegMiss  = prometheus.NewDesc("kvgate_extproc_tokenizer_segment_cache_misses_total", "Prompt segments tokenized afresh.", nil, nil)
	mSegBytes = prometheus.NewDesc("kvgate_extproc_tokenizer_segment_cache_bytes", "Bytes held by the incremental tokenization cache.", nil, nil)
	// Engine-side rendering (models[].preprocess.mode: engine).
	mRenderCalls     = prometheus.NewDesc("kvgate_extproc_engine_render_calls_total", "POST /tokenize calls made to engines for models in engine mode.", nil, nil)
	mRenderHits      = prometheus.NewDesc("kvgate_extproc_engine_render_cache_hits_total", "Engine renders answered from the render cache.", nil, nil)
	mRenderFallbacks = prometheus.NewDesc("kvgate_extproc_engine_render_fallbacks_total",
		"Requests of models in engine mode routed on load alone, by reason: timeout, unavailable (no healthy vLLM engine, connection refused, 5xx), overloaded (engine.max_concurrent in flight, or 429), bad_response, rejected (engine 4xx), unsupported (RAG documents, Responses tools).", []string{"reason"}, nil)
)

type loadCollector struct{ r *Router }

func (c loadCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mInflight, mPrefill, mOpen, mSegHits, mSegMiss, mSegBytes, mRenderCalls, mRenderHits, mRenderFallbacks} {
		ch <- d
	}
}

func (c loadCollector) Collect(ch chan<- prometheus.Metric) {
	for _, w := range c.r.fleet.Load().all {
		l := c.r.load.Snapshot(w.ID)
		ch <- prometheus.MustNewConstMetric(mInflight, prometheus.GaugeValue, float64(l.InflightRequests), w.ID.String())
		ch <- prometheus.MustNewConstMetric(mPrefill, prometheus.GaugeValue, float64(l.PrefillTokens), w.ID.String())
	}
	ch <- prometheus.MustNewConstMetric(mOpen, prometheus.GaugeValue, float64(c.r.load.Stats().Open))
	s := c.r.reg.SegmentCacheStats()
	ch <- prometheus.MustNewConstMetric(mSegHits, prometheus.CounterValue, float64(s.Hits))
	ch <- prometheus.MustNewConstMetric(mSegMiss, prometheus.CounterValue, float64(s.Misses))
	ch <- prometheus.MustNewConstMetric(mSegBytes, prometheus.GaugeValue, float64(s.Bytes))
	// Emitted at zero when no model is in engine mode, like every other
	// kvgate counter: a series that appears only on the first fallback
	// breaks rate() and absent() alerts, and the dashboards' inventory
	// (deploy/inventory) reads each described metric's type from a sample.
	es := c.r.reg.EngineRenderStats()
	ch <- prometheus.MustNewConstMetric(mRenderCalls, prometheus.CounterValue, float64(es.Calls))
	ch <- prometheus.MustNewConstMetric(mRenderHits, prometheus.CounterValue, float64(es.CacheHits))
	for i, reason := range preprocess.EngineReasons {
		ch <- prometheus.MustNewConstMetric(mRenderFallbacks, prometheus.CounterValue, float64(es.Fallbacks[i]), reason)
	}
}
