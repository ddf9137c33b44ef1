package enginesim

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// vLLM's Prometheus metrics (vllm/v1/metrics/loggers.py, PrometheusStatLogger),
// the names routers scrape (llm-d datalayer/extractor/metrics/factories.go,
// notes §6). Every series carries model_name and engine labels as vLLM V1
// does. Bucket bounds are vLLM's. Current vLLM exports
// vllm:kv_cache_usage_perc and vllm:inter_token_latency_seconds only;
// vllm:gpu_cache_usage_perc was removed in v0.12 (PR #29330) and
// vllm:time_per_output_token_seconds deprecated in v0.11: both come only
// with metricsConfig.LegacyNames (an older release).
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	e2eBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// engineGauges is the engine state /metrics reports at scrape time.
type engineGauges struct {
	Running, Waiting int
	KVUsage          float64 // fraction of GPU blocks in use, [0, 1]
	PrefixQueries    int64   // prompt tokens looked up in the prefix cache
	PrefixHits       int64   // of which were cached
	RunningLoRAs     []string
	WaitingLoRAs     []string
	Preemptions      int64
	PromptTokens     int64
	GenerationTokens int64
	FinishedLength   int64
	FinishedAbort    int64
}

// metrics owns the simulator's own Prometheus registry.
type metrics struct {
	reg  *prometheus.Registry
	ttft prometheus.Observer
	itl  prometheus.Observer
	tpot prometheus.Observer // vllm:time_per_output_token_seconds, the older ITL name; nil unless LegacyNames
	e2e  prometheus.Observer
}

// metricsConfig is what the constant info series need.
type metricsConfig struct {
	Model        string
	Engine       string // vLLM's engine index label ("0")
	BlockSize    int
	NumGPUBlocks int
	MaxLoRAs     int
	LegacyNames  bool // also export the names current vLLM dropped
}

func newMetrics(cfg metricsConfig, snapshot func() engineGauges) *metrics {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": cfg.Model, "engine": cfg.Engine}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
		reg.MustRegister(h)
		return h
	}
	m := &metrics{reg: reg}
	m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	m.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
	if cfg.LegacyNames {
		m.tpot = hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds (deprecated name of inter_token_latency).", itlBuckets)
	}
	m.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e2eBuckets)
	reg.MustRegister(&stateCollector{cfg: cfg, snapshot: snapshot, labels: labels})
	return m
}

// observeRequest records one finished request's latencies (wall seconds).
func (m *metrics) observeRequest(ttft, e2e time.Duration) {
	m.ttft.Observe(ttft.Seconds())
	m.e2e.Observe(e2e.Seconds())
}

// observeITL records n inter-token gaps of d.
func (m *metrics) observeITL(d time.Duration, n int) {
	for range n {
		m.itl.Observe(d.Seconds())
		if m.tpot != nil {
			m.tpot.Observe(d.Seconds())
		}
	}
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// stateCollector reads the engine state once per scrape, so gauges and
// counters of one scrape are consistent with each other.
type stateCollector struct {
	cfg      metricsConfig
	snapshot func() engineGauges
	labels   prometheus.Labels
}

func (c *stateCollector) desc(name, help string, variable ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, variable, c.labels)
}

var (
	descRunning        = "vllm:num_requests_running"
	descWaiting        = "vllm:num_requests_waiting"
	descKVUsage        = "vllm:kv_cache_usage_perc"
	descGPUCacheUsage  = "vllm:gpu_cache_usage_perc"
	descPrefixQueries  = "vllm:prefix_cache_queries_total"
	descPrefixHits     = "vllm:prefix_cache_hits_total"
	descPreemptions    = "vllm:num_preemptions_total"
	descPromptTokens   = "vllm:prompt_tokens_total"
	descGenTokens      = "vllm:generation_tokens_total"
	descRequestSuccess = "vllm:request_success_total"
	descCacheConfig    = "vllm:cache_config_info"
	descLoRAInfo       = "vllm:lora_requests_info"
)

// Describe sends nothing: the collector is unchecked because the LoRA info
// series' label values change between scrapes.
func (c *stateCollector) Describe(chan<- *prometheus.Desc) {}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	gauge := func(name, help string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.desc(name, help), prometheus.GaugeValue, v)
	}
	counter := func(name, help string, v int64) {
		ch <- prometheus.MustNewConstMetric(c.desc(name, help), prometheus.CounterValue, float64(v))
	}
	gauge(descRunning, "Number of requests in model execution batches.", float64(s.Running))
	gauge(descWaiting, "Number of requests waiting to be processed.", float64(s.Waiting))
	gauge(descKVUsage, "KV-cache usage. 1 means 100 percent usage.", s.KVUsage)
	if c.cfg.LegacyNames {
		gauge(descGPUCacheUsage, "GPU KV-cache usage. 1 means 100 percent usage (deprecated name of kv_cache_usage_perc).", s.KVUsage)
	}
	counter(descPrefixQueries, "Prefix cache queries, in terms of number of queried tokens.", s.PrefixQueries)
	counter(descPrefixHits, "Prefix cache hits, in terms of number of cached tokens.", s.PrefixHits)
	counter(descPreemptions, "Cumulative number of preemptions from the engine.", s.Preemptions)
	counter(descPromptTokens, "Number of prefill tokens processed.", s.PromptTokens)
	counter(descGenTokens, "Number of generation tokens processed.", s.GenerationTokens)
	success := c.desc(descRequestSuccess, "Count of successfully processed requests.", "finished_reason")
	ch <- prometheus.MustNewConstMetric(success, prometheus.CounterValue, float64(s.FinishedLength), "length")
	ch <- prometheus.MustNewConstMetric(success, prometheus.CounterValue, float64(s.FinishedAbort), "abort")

	// vLLM's info gauges: value 1 with the configuration in labels.
	cache := c.desc(descCacheConfig, "Information of the LLMEngine CacheConfig.",
		"block_size", "num_gpu_blocks", "enable_prefix_caching", "cache_dtype")
	ch <- prometheus.MustNewConstMetric(cache, prometheus.GaugeValue, 1,
		strconv.Itoa(c.cfg.BlockSize), strconv.Itoa(c.cfg.NumGPUBlocks), "True", "auto")
	// vllm:lora_requests_info carries the adapter lists in labels and the
	// time of the last update as its value (vLLM sets it to time.time()).
	lora := prometheus.NewDesc(descLoRAInfo, "Running stats on lora requests.",
		[]string{"max_lora", "running_lora_adapters", "waiting_lora_adapters"}, nil)
	ch <- prometheus.MustNewConstMetric(lora, prometheus.GaugeValue, float64(time.Now().UnixNano())/1e9,
		strconv.Itoa(c.cfg.MaxLoRAs), strings.Join(s.RunningLoRAs, ","), strings.Join(s.WaitingLoRAs, ","))
}

// MetricFamilies gathers what an idle engine serving model exposes on
// /metrics: every vLLM family the simulator emits in either naming
// (current, and LegacyMetricNames for older releases), with its labels, so
// that dashboards, alerts and the fallbacks readers keep can be checked
// against it (deploy/inventory) without starting a server.
func MetricFamilies(model string) ([]*dto.MetricFamily, error) {
	m := newMetrics(metricsConfig{Model: model, Engine: "0", BlockSize: 16, NumGPUBlocks: 1, LegacyNames: true}, func() engineGauges { return engineGauges{} })
	return m.reg.Gather()
}
