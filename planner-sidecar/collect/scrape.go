package collect

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// Scraper reads the engines' /metrics (vLLM names, as lab/enginesim and
// vLLM V1 export them) and, optionally, kvgate extproc's, and turns two
// consecutive scrapes into one interval's observation: counters and
// histogram buckets are differenced per engine (a counter that went down is
// a restart: its new value is the increase, as Prometheus's rate() does),
// gauges are read as they are. The first Collect only primes the counters:
// its rates are zero and its latencies unmeasured.
type Scraper struct {
	pools   map[string][]string // pool → engine host:port
	extproc string              // host:port or ""
	client  *http.Client

	// ttftTarget and itlTarget (seconds) turn on attainment measurement.
	ttftTarget, itlTarget float64
	// token, when set, is the bearer token every request sends.
	token func() (string, error)

	mu      sync.Mutex
	prev    map[string]engineSample
	prevExt *extprocSample
}

// NewScraper scrapes, per pool, the given engine endpoints (host:port,
// /metrics over HTTP), and extproc's admin address when not empty.
func NewScraper(pools map[string][]string, extproc string, timeout time.Duration) *Scraper {
	return &Scraper{pools: pools, extproc: extproc, client: &http.Client{Timeout: timeout}, prev: map[string]engineSample{}}
}

// WithTargets makes observations report the share of first tokens and
// inter-token gaps within the targets (Observation Attainment).
func (s *Scraper) WithTargets(ttft, itl time.Duration) *Scraper {
	s.ttftTarget, s.itlTarget = ttft.Seconds(), itl.Seconds()
	return s
}

// WithToken makes every scrape send `Authorization: Bearer <token>` (kvgate's
// admin listeners want it on /metrics beyond loopback). token is called
// once per Collect, so a rotated token file applies at the next round; its
// errors must name the source, never the value.
func (s *Scraper) WithToken(token func() (string, error)) *Scraper {
	s.token = token
	return s
}

// credential is one Collect's bearer token, or why it could not be read.
type credential struct {
	token string
	err   error
}

func (s *Scraper) credential() credential {
	if s.token == nil {
		return credential{}
	}
	t, err := s.token()
	if err != nil {
		return credential{err: fmt.Errorf("bearer token: %w", err)}
	}
	return credential{token: t}
}

// engineSample is one scrape of one engine, summed over its series.
type engineSample struct {
	at                                  time.Time
	ttft, itl                           []bucket
	ttftCount, itlCount                 float64
	prompt, gen, success, hits, queries float64
	running, waiting, kv                float64
	hasKV                               bool
}

// extprocSample is one scrape of extproc: picks and in-flight per engine endpoint.
type extprocSample struct {
	at       time.Time
	picks    map[string]float64
	inflight map[string]float64
}

// Collect implements Collector.
func (s *Scraper) Collect(ctx context.Context, now time.Time, draining map[string]string) (plan.Observation, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	type result struct {
		pool, ep string
		smp      engineSample
		err      error
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var results []result
	cred := s.credential()
	for pool, eps := range s.pools {
		for _, ep := range eps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				smp, err := s.scrapeEngine(ctx, ep, now, cred)
				mu.Lock()
				results = append(results, result{pool, ep, smp, err})
				mu.Unlock()
			}()
		}
	}
	var ext *extprocSample
	var errs []error
	if s.extproc != "" {
		e, err := s.scrapeExtproc(ctx, now, cred)
		if err != nil {
			errs = append(errs, &SourceError{"extproc", s.extproc, err})
		} else {
			ext = e
		}
	}
	wg.Wait()
	slices.SortFunc(results, func(a, b result) int { return strings.Compare(a.ep, b.ep) })

	obs := plan.Observation{Time: now, Pools: map[string]plan.PoolObservation{}}
	acc := map[string]*poolAccumulator{}
	for pool := range s.pools {
		acc[pool] = &poolAccumulator{}
	}
	for _, r := range results {
		a := acc[r.pool]
		if r.err != nil {
			errs = append(errs, &SourceError{"engine", r.ep, r.err})
			if draining[r.ep] != "" {
				// A draining replica that no longer answers serves nothing.
				a.draining++
				a.idle = append(a.idle, r.ep)
			}
			delete(s.prev, r.ep)
			continue
		}
		prev, hasPrev := s.prev[r.ep]
		s.prev[r.ep] = r.smp
		a.add(r.ep, r.smp, prev, hasPrev)
		if draining[r.ep] != "" {
			a.draining++
			busy := r.smp.running + r.smp.waiting
			if ext != nil {
				busy += ext.inflight[r.ep]
			}
			if busy == 0 {
				a.idle = append(a.idle, r.ep)
			}
		} else {
			a.ready = append(a.ready, r.ep)
		}
		if ext != nil && s.prevExt != nil {
			if d := ext.at.Sub(s.prevExt.at).Seconds(); d > 0 {
				a.picks += increase(ext.picks[r.ep], s.prevExt.picks[r.ep]) / d
				a.hasPicks = true
			}
		}
	}
	if ext != nil {
		s.prevExt = ext
	}
	// A draining replica no longer listed at all has gone: idle.
	for ep, pool := range draining {
		if a := acc[pool]; a != nil && !slices.Contains(s.pools[pool], ep) {
			a.draining++
			a.idle = append(a.idle, ep)
		}
	}
	for pool, a := range acc {
		slices.Sort(a.idle)
		o := a.observation()
		o.Attainment = attainment(toBuckets(a.ttft), toBuckets(a.itl), s.ttftTarget, s.itlTarget)
		obs.Pools[pool] = o
	}
	return obs, errs
}

// poolAccumulator sums one pool's engines.
type poolAccumulator struct {
	ready, idle                         []string
	draining                            int
	rate, picks                         float64
	hasPicks                            bool
	dTTFTCount, dPrompt, dGen, dSuccess float64
	dHits, dQueries                     float64
	ttft, itl                           map[float64]float64
	waiting, kvSum                      float64
	kvN                                 int
}

func (a *poolAccumulator) add(ep string, cur, prev engineSample, hasPrev bool) {
	a.waiting += cur.waiting
	if cur.hasKV {
		a.kvSum += cur.kv
		a.kvN++
	}
	if !hasPrev {
		return
	}
	dt := cur.at.Sub(prev.at).Seconds()
	if dt <= 0 {
		return
	}
	dCount := increase(cur.ttftCount, prev.ttftCount)
	a.rate += dCount / dt
	a.dTTFTCount += dCount
	a.dPrompt += increase(cur.prompt, prev.prompt)
	a.dGen += increase(cur.gen, prev.gen)
	a.dSuccess += increase(cur.success, prev.success)
	a.dHits += increase(cur.hits, prev.hits)
	a.dQueries += increase(cur.queries, prev.queries)
	a.ttft = addBuckets(a.ttft, cur.ttft, prev.ttft, cur.ttftCount < prev.ttftCount)
	a.itl = addBuckets(a.itl, cur.itl, prev.itl, cur.itlCount < prev.itlCount)
}

func (a *poolAccumulator) observation() plan.PoolObservation {
	o := plan.PoolObservation{
		Replicas: len(a.ready), Draining: a.draining, Ready: a.ready, Idle: a.idle,
		RequestRate: a.rate, QueueDepth: a.waiting,
	}
	if a.hasPicks {
		// extproc counts requests as they arrive; the engines count them at
		// first token, a little later and only once admitted.
		o.RequestRate = a.picks
	}
	if a.kvN > 0 {
		o.KVUsage = a.kvSum / float64(a.kvN)
	}
	if a.dTTFTCount > 0 {
		o.MeanInputTokens = a.dPrompt / a.dTTFTCount
	}
	if a.dSuccess > 0 {
		o.MeanOutputTokens = a.dGen / a.dSuccess
	}
	if a.dQueries > 0 {
		o.CacheHitRate = min(a.dHits/a.dQueries, 1)
	}
	o.TTFTP90 = secondsOrZero(p90(toBuckets(a.ttft)))
	o.ITLP90 = secondsOrZero(p90(toBuckets(a.itl)))
	return o
}

func secondsOrZero(s float64) time.Duration {
	if math.IsNaN(s) || math.IsInf(s, 0) || s <= 0 {
		return 0
	}
	return time.Duration(min(s, 1e6) * float64(time.Second))
}

// increase is a counter's increase between two scrapes; a decrease means
// the process restarted and counted afresh from zero.
func increase(cur, prev float64) float64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

func addBuckets(into map[float64]float64, cur, prev []bucket, reset bool) map[float64]float64 {
	if into == nil {
		into = map[float64]float64{}
	}
	old := map[float64]float64{}
	if !reset {
		for _, b := range prev {
			old[b.le] = b.count
		}
	}
	for _, b := range cur {
		into[b.le] += max(b.count-old[b.le], 0)
	}
	return into
}

func toBuckets(m map[float64]float64) []bucket {
	out := make([]bucket, 0, len(m))
	for le, c := range m {
		out = append(out, bucket{le, c})
	}
	return out
}

func (s *Scraper) get(ctx context.Context, hostport string, cred credential) (map[string]*dto.MetricFamily, error) {
	if cred.err != nil {
		return nil, cred.err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostport+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if cred.token != "" {
		req.Header.Set("Authorization", "Bearer "+cred.token)
	}
	// Text format only: the parser below reads it, and every engine serves it.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch {
	case (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && cred.token == "":
		return nil, fmt.Errorf("GET /metrics: %s: the target wants a bearer token (planner.scrape.token_file or token_env)", resp.Status)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("GET /metrics: %s: the target refused planner.scrape's token", resp.Status)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	body := io.LimitReader(resp.Body, maxBodyBytes+1)
	p := expfmt.NewTextParser(model.UTF8Validation)
	lr := &countingReader{r: body}
	fams, err := p.TextToMetricFamilies(lr)
	if lr.n > maxBodyBytes {
		return nil, fmt.Errorf("/metrics larger than %d bytes", maxBodyBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	return fams, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (s *Scraper) scrapeEngine(ctx context.Context, ep string, now time.Time, cred credential) (engineSample, error) {
	fams, err := s.get(ctx, ep, cred)
	if err != nil {
		return engineSample{}, err
	}
	return engineSampleOf(fams, now), nil
}

// engineSampleOf reads vLLM's names, summed over series (engine indexes,
// finished reasons); the newer name of a renamed metric wins when both exist.
func engineSampleOf(fams map[string]*dto.MetricFamily, now time.Time) engineSample {
	smp := engineSample{at: now}
	smp.ttft, smp.ttftCount = histogram(fams["vllm:time_to_first_token_seconds"])
	if f := fams["vllm:inter_token_latency_seconds"]; f != nil {
		smp.itl, smp.itlCount = histogram(f)
	} else {
		smp.itl, smp.itlCount = histogram(fams["vllm:time_per_output_token_seconds"])
	}
	smp.prompt = sum(fams["vllm:prompt_tokens_total"])
	smp.gen = sum(fams["vllm:generation_tokens_total"])
	smp.success = sum(fams["vllm:request_success_total"])
	smp.hits = sum(fams["vllm:prefix_cache_hits_total"])
	smp.queries = sum(fams["vllm:prefix_cache_queries_total"])
	smp.running = sum(fams["vllm:num_requests_running"])
	smp.waiting = sum(fams["vllm:num_requests_waiting"])
	for _, name := range []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"} {
		if f := fams[name]; f != nil && len(f.GetMetric()) > 0 {
			smp.kv = sum(f) / float64(len(f.GetMetric()))
			smp.hasKV = true
			break
		}
	}
	return smp
}

func (s *Scraper) scrapeExtproc(ctx context.Context, now time.Time, cred credential) (*extprocSample, error) {
	fams, err := s.get(ctx, s.extproc, cred)
	if err != nil {
		return nil, err
	}
	return &extprocSample{
		at:       now,
		picks:    byWorkerEndpoint(fams["kvgate_extproc_picks_total"]),
		inflight: byWorkerEndpoint(fams["kvgate_extproc_worker_inflight_requests"]),
	}, nil
}

// byWorkerEndpoint sums a per-worker series by engine endpoint: extproc's
// worker label is "host:port#rank" (data-parallel ranks share an endpoint).
func byWorkerEndpoint(f *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "worker" {
				ep, _, _ := strings.Cut(l.GetValue(), "#")
				out[ep] += value(m)
			}
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	var v float64
	switch {
	case m.Counter != nil:
		v = m.GetCounter().GetValue()
	case m.Gauge != nil:
		v = m.GetGauge().GetValue()
	case m.Untyped != nil:
		v = m.GetUntyped().GetValue()
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

func sum(f *dto.MetricFamily) float64 {
	var s float64
	for _, m := range f.GetMetric() {
		s += value(m)
	}
	return s
}

// histogram sums a histogram family's series into cumulative buckets
// (with +Inf) and the observation count.
func histogram(f *dto.MetricFamily) ([]bucket, float64) {
	by := map[float64]float64{}
	var count float64
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		for _, b := range h.GetBucket() {
			// The +Inf bucket, when the page lists it, is the sample count,
			// taken below.
			if math.IsInf(b.GetUpperBound(), 1) {
				continue
			}
			by[b.GetUpperBound()] += float64(b.GetCumulativeCount()) + b.GetCumulativeCountFloat()
		}
		n := float64(h.GetSampleCount()) + h.GetSampleCountFloat()
		by[math.Inf(1)] += n
		count += n
	}
	if len(by) == 0 {
		return nil, 0
	}
	return toBuckets(by), count
}
