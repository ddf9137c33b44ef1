package enginemetrics

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric names read from the engines' /metrics pages. vLLM's are listed by
// llm-d's router (datalayer/extractor/metrics/factories.go); SGLang's are
// defined in sglang/srt/metrics/collector.py (SchedulerMetricsCollector).
const (
	vllmWaiting     = "vllm:num_requests_waiting"
	vllmRunning     = "vllm:num_requests_running"
	vllmKVUsage     = "vllm:kv_cache_usage_perc"
	vllmGPUUsage    = "vllm:gpu_cache_usage_perc" // name before vLLM v0.10
	vllmCacheConfig = "vllm:cache_config_info"

	sglangWaiting   = "sglang:num_queue_reqs"
	sglangRunning   = "sglang:num_running_reqs"
	sglangUsage     = "sglang:token_usage"
	sglangMaxTokens = "sglang:max_total_num_tokens"
)

// Labels that tell series apart. vLLM labels each engine core's series
// with engine="<dp rank>" when one API server fronts several data-parallel
// ranks; SGLang adds dp_rank with data-parallel attention.
const (
	labelModel      = "model_name"
	labelVLLMRank   = "engine"
	labelSGLangRank = "dp_rank"
)

// Bounds on values, far above any engine, so that conversions stay exact.
const (
	maxRequests  = 1 << 30
	maxGPUBlocks = 1 << 40
	maxBlockSize = 1 << 16
	maxTokens    = 1 << 50
)

// scrapedFamilies is the one list of the engine families the scraper reads:
// the parser keeps only their lines (wanted), and deploy/inventory checks
// dashboards and alerts against it (ScrapedMetricNames).
var scrapedFamilies = []string{
	vllmWaiting, vllmRunning, vllmKVUsage, vllmGPUUsage, vllmCacheConfig,
	sglangWaiting, sglangRunning, sglangUsage, sglangMaxTokens,
}

var wanted = familySet(ScrapedMetricNames())

func familySet(names []string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set
}

var errMissing = errors.New("no series")

// series is one sample line: its labels and value.
type series struct {
	labels map[string]string
	value  float64
}

// page is the parsed part of one /metrics response: the wanted families.
type page map[string][]series

// parse reads a Prometheus text exposition (version 0.0.4, what vLLM's and
// SGLang's prometheus_client serve). Only the lines of the wanted families
// go to expfmt: vLLM's page carries dozens of histograms (hundreds of KiB
// with several engines), and parsing only what is read keeps a scrape
// cheap at llm-d's 50 ms interval and keeps an unrelated malformed family
// from voiding the sample.
func parse(body []byte) (page, error) {
	var kept bytes.Buffer
	for line := range bytes.Lines(body) {
		if wantedLine(line) {
			kept.Write(line)
			if line[len(line)-1] != '\n' {
				kept.WriteByte('\n')
			}
		}
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&kept)
	if err != nil {
		return nil, fmt.Errorf("metrics text: %w", err)
	}
	pg := page{}
	for name, f := range fams {
		if !wanted[name] {
			continue
		}
		for _, m := range f.GetMetric() {
			v, ok := scalar(f.GetType(), m)
			if !ok {
				continue
			}
			lbls := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				lbls[l.GetName()] = l.GetValue()
			}
			pg[name] = append(pg[name], series{labels: lbls, value: v})
		}
	}
	return pg, nil
}

// wantedLine keeps the sample, HELP and TYPE lines of the wanted families.
// It works on bytes (map lookups by string(b) do not allocate) because it
// sees every line of the page.
func wantedLine(line []byte) bool {
	s := bytes.TrimLeft(line, " \t")
	if rest, ok := bytes.CutPrefix(s, []byte("#")); ok {
		rest = bytes.TrimLeft(rest, " \t")
		kw, rest, ok := bytes.Cut(rest, []byte(" "))
		if !ok || (string(kw) != "HELP" && string(kw) != "TYPE") {
			return false
		}
		rest = bytes.TrimLeft(rest, " \t")
		if end := bytes.IndexAny(rest, " \t\r\n"); end >= 0 {
			rest = rest[:end]
		}
		return wanted[string(rest)]
	}
	if end := bytes.IndexAny(s, "{ \t\r\n"); end >= 0 {
		s = s[:end]
	}
	return wanted[string(s)]
}

func scalar(t dto.MetricType, m *dto.Metric) (float64, bool) {
	switch t {
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue(), m.Gauge != nil
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue(), m.Untyped != nil
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue(), m.Counter != nil
	}
	return 0, false
}

// selector picks a worker's series out of a page.
type selector struct {
	model string // "" = any model_name
	rank  int
	// byRank: several workers share this page, so series labelled with a
	// data-parallel rank belong only to the worker of that rank.
	byRank bool
}

func (sel selector) matches(l map[string]string) bool {
	if m, ok := l[labelModel]; ok && sel.model != "" && m != sel.model {
		return false
	}
	if sel.byRank {
		want := strconv.Itoa(sel.rank)
		for _, k := range []string{labelVLLMRank, labelSGLangRank} {
			if r, ok := l[k]; ok && r != want {
				return false
			}
		}
	}
	return true
}

// value is the largest matching value of the first family present. Several
// matching series for one worker are copies of one scheduler's state
// (SGLang with metrics on every TP rank), so the largest is taken rather
// than the sum.
func (pg page) value(sel selector, names ...string) (float64, string, error) {
	for _, name := range names {
		ss, ok := pg[name]
		if !ok {
			continue
		}
		found := false
		best := 0.0
		for _, s := range ss {
			if !sel.matches(s.labels) {
				continue
			}
			if math.IsNaN(s.value) || math.IsInf(s.value, 0) {
				return 0, name, fmt.Errorf("%s: value %v", name, s.value)
			}
			if !found || s.value > best {
				best, found = s.value, true
			}
		}
		if found {
			return best, name, nil
		}
	}
	return 0, strings.Join(names, " or "), errMissing
}

func (pg page) count(sel selector, names ...string) (int, error) {
	v, name, err := pg.value(sel, names...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	if v < 0 || v > maxRequests || v != math.Trunc(v) {
		return 0, fmt.Errorf("%s: %v is not a request count", name, v)
	}
	return int(v), nil
}

// sample extracts one worker's Sample (At unset).
func (pg page) sample(sel selector) (Sample, error) {
	var s Sample
	var err error
	if s.Waiting, err = pg.count(sel, vllmWaiting, sglangWaiting); err != nil {
		return Sample{}, err
	}
	if s.Running, err = pg.count(sel, vllmRunning, sglangRunning); err != nil {
		return Sample{}, err
	}
	u, name, err := pg.value(sel, vllmKVUsage, vllmGPUUsage, sglangUsage)
	if err != nil {
		return Sample{}, fmt.Errorf("%s: %w", name, err)
	}
	// All three are fractions despite vLLM's "_perc" ("1 means 100 percent
	// usage", vLLM's help text).
	if u < 0 || u > 1 {
		return Sample{}, fmt.Errorf("%s: %v outside [0, 1]", name, u)
	}
	s.KVUsage = u
	if err := pg.capacity(sel, &s); err != nil {
		return Sample{}, err
	}
	return s, nil
}

// capacity fills the optional KV capacity fields: vLLM's cache_config_info
// info gauge carries them as labels; SGLang reports a token count. vLLM
// labels num_gpu_blocks "None" until the engine has profiled memory, so
// unparseable values mean unknown rather than a bad page.
func (pg page) capacity(sel selector, s *Sample) error {
	for _, c := range pg[vllmCacheConfig] {
		if !sel.matches(c.labels) {
			continue
		}
		if n, err := strconv.ParseInt(c.labels["num_gpu_blocks"], 10, 64); err == nil {
			if n < 0 || n > maxGPUBlocks {
				return fmt.Errorf("%s: num_gpu_blocks %d outside [0, %d]", vllmCacheConfig, n, int64(maxGPUBlocks))
			}
			s.NumGPUBlocks = n
		}
		if b, err := strconv.Atoi(c.labels["block_size"]); err == nil {
			if b < 1 || b > maxBlockSize {
				return fmt.Errorf("%s: block_size %d outside [1, %d]", vllmCacheConfig, b, maxBlockSize)
			}
			s.BlockSize = b
		}
		if s.NumGPUBlocks > 0 && s.BlockSize > 0 {
			s.KVCapacityTokens = s.NumGPUBlocks * int64(s.BlockSize)
		}
		return nil
	}
	v, _, err := pg.value(sel, sglangMaxTokens)
	if errors.Is(err, errMissing) {
		return nil
	}
	if err != nil || v < 0 || v > maxTokens || v != math.Trunc(v) {
		return fmt.Errorf("%s: bad token count %v (%v)", sglangMaxTokens, v, err)
	}
	s.KVCapacityTokens = int64(v)
	return nil
}

// ScrapedMetricNames lists the engine metric families kvgate reads (vLLM's
// and SGLang's), sorted: the set the parser keeps, and what deploy/inventory
// checks dashboards and alerts against.
func ScrapedMetricNames() []string {
	names := slices.Clone(scrapedFamilies)
	slices.Sort(names)
	return names
}
