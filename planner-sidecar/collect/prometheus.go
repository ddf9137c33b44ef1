package collect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// Prometheus observes pools through the Prometheus HTTP API
// (GET /api/v1/query), with PromQL over vLLM's metric names. Each pool is
// the engine series matching its selector; replicas are told apart by the
// instance label (the scrape target's host:port, which is also what the
// extproc routes to and what draining names).
type Prometheus struct {
	base      string
	selectors map[string]string // pool → label matchers without braces
	window    time.Duration
	client    *http.Client
	// ttftTarget and itlTarget (seconds) turn on attainment measurement.
	ttftTarget, itlTarget float64
}

// WithTargets makes observations report the share of first tokens and
// inter-token gaps within the targets (Observation Attainment).
func (p *Prometheus) WithTargets(ttft, itl time.Duration) *Prometheus {
	p.ttftTarget, p.itlTarget = ttft.Seconds(), itl.Seconds()
	return p
}

// NewPrometheus queries the API at baseURL (e.g. http://prometheus:9090);
// window is the range of rate() and the latency quantiles.
func NewPrometheus(baseURL string, selectors map[string]string, window, timeout time.Duration) *Prometheus {
	return &Prometheus{base: strings.TrimRight(baseURL, "/"), selectors: selectors, window: window, client: &http.Client{Timeout: timeout}}
}

// Sample is one element of an instant vector.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// apiResponse is the API's envelope (prometheus/web/api/v1).
type apiResponse struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	} `json:"data"`
}

type vectorElem struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"` // [unix seconds, "value"]
}

// Query runs an instant query at t. A scalar result comes back as one
// sample without labels.
func (p *Prometheus) Query(ctx context.Context, q string, t time.Time) ([]Sample, error) {
	u := p.base + "/api/v1/query?" + url.Values{
		"query": {q},
		"time":  {strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', 3, 64)},
	}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	if len(data) > maxBodyBytes {
		return nil, fmt.Errorf("answer larger than %d bytes", maxBodyBytes)
	}
	out, err := parseAnswer(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", resp.Status, err)
	}
	return out, nil
}

// parseAnswer decodes the API's JSON envelope into samples.
func parseAnswer(data []byte) ([]Sample, error) {
	var r apiResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("answer is not the API's JSON: %w", err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	}
	switch r.Data.ResultType {
	case "vector":
		out := make([]Sample, 0, len(r.Data.Result))
		for i, raw := range r.Data.Result {
			var e vectorElem
			if err := json.Unmarshal(raw, &e); err != nil {
				return nil, fmt.Errorf("result[%d]: %w", i, err)
			}
			v, err := sampleValue(e.Value)
			if err != nil {
				return nil, fmt.Errorf("result[%d]: %w", i, err)
			}
			out = append(out, Sample{Labels: e.Metric, Value: v})
		}
		return out, nil
	case "scalar":
		var pair [2]any
		if len(r.Data.Result) != 2 {
			return nil, fmt.Errorf("scalar result of %d elements", len(r.Data.Result))
		}
		for i := range pair {
			if err := json.Unmarshal(r.Data.Result[i], &pair[i]); err != nil {
				return nil, fmt.Errorf("scalar: %w", err)
			}
		}
		v, err := sampleValue(pair)
		if err != nil {
			return nil, err
		}
		return []Sample{{Value: v}}, nil
	}
	return nil, fmt.Errorf("result type %q, want vector or scalar", r.Data.ResultType)
}

// sampleValue reads [time, "value"]; the API writes values as strings so
// that NaN and ±Inf survive JSON.
func sampleValue(pair [2]any) (float64, error) {
	s, ok := pair[1].(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", pair[1])
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("sample value %q: %w", s, err)
	}
	return v, nil
}

// Queries are the PromQL the planner runs per pool; %[1]s is the selector
// in braces and %[2]s the window. Ratios of rates give interval means:
// prompt tokens per request that reached first token, generated tokens per
// finished request, cached tokens per queried token.
var queries = map[string]string{
	"rate":   `sum(rate(vllm:time_to_first_token_seconds_count%[1]s[%[2]s]))`,
	"input":  `sum(rate(vllm:prompt_tokens_total%[1]s[%[2]s])) / sum(rate(vllm:time_to_first_token_seconds_count%[1]s[%[2]s]))`,
	"output": `sum(rate(vllm:generation_tokens_total%[1]s[%[2]s])) / sum(rate(vllm:request_success_total%[1]s[%[2]s]))`,
	"hit":    `sum(rate(vllm:prefix_cache_hits_total%[1]s[%[2]s])) / sum(rate(vllm:prefix_cache_queries_total%[1]s[%[2]s]))`,
	// Latency histograms come back as per-bucket rates; p90 and the share
	// within target are computed here (as histogram_quantile does) so one
	// query serves both.
	"ttft": `sum by (le) (rate(vllm:time_to_first_token_seconds_bucket%[1]s[%[2]s]))`,
	// vLLM renamed time_per_output_token to inter_token_latency; either serves.
	"itl": `sum by (le) (rate(vllm:inter_token_latency_seconds_bucket%[1]s[%[2]s]))` +
		` or sum by (le) (rate(vllm:time_per_output_token_seconds_bucket%[1]s[%[2]s]))`,
	"queue": `sum(vllm:num_requests_waiting%[1]s)`,
	"kv":    `avg(vllm:kv_cache_usage_perc%[1]s) or avg(vllm:gpu_cache_usage_perc%[1]s)`,
	// Per replica: requests running or waiting (0 = idle).
	"busy": `sum by (instance) (vllm:num_requests_running%[1]s) + sum by (instance) (vllm:num_requests_waiting%[1]s)`,
}

// QueryFor returns the PromQL for one signal of a pool (for tests and
// the journal's explanations).
func (p *Prometheus) QueryFor(signal, pool string) string {
	return fmt.Sprintf(queries[signal], "{"+p.selectors[pool]+"}", promDuration(p.window))
}

func promDuration(d time.Duration) string {
	if d < time.Second {
		d = time.Second
	}
	return strconv.FormatInt(int64(d/time.Second), 10) + "s"
}

// Collect implements Collector.
func (p *Prometheus) Collect(ctx context.Context, now time.Time, draining map[string]string) (plan.Observation, []error) {
	obs := plan.Observation{Time: now, Pools: map[string]plan.PoolObservation{}}
	var errs []error
	pools := make([]string, 0, len(p.selectors))
	for pool := range p.selectors {
		pools = append(pools, pool)
	}
	slices.Sort(pools)
	for _, pool := range pools {
		scalar := func(signal string) float64 {
			res, err := p.Query(ctx, p.QueryFor(signal, pool), now)
			if err != nil {
				errs = append(errs, &SourceError{"prometheus", pool + " " + signal, err})
				return 0
			}
			if len(res) == 0 || math.IsNaN(res[0].Value) || math.IsInf(res[0].Value, 0) {
				return 0 // no data (no traffic, or a 0/0 ratio)
			}
			return res[0].Value
		}
		o := plan.PoolObservation{
			RequestRate:      scalar("rate"),
			MeanInputTokens:  scalar("input"),
			MeanOutputTokens: scalar("output"),
			CacheHitRate:     min(scalar("hit"), 1),
			QueueDepth:       scalar("queue"),
			KVUsage:          scalar("kv"),
		}
		hist := func(signal string) []bucket {
			res, err := p.Query(ctx, p.QueryFor(signal, pool), now)
			if err != nil {
				errs = append(errs, &SourceError{"prometheus", pool + " " + signal, err})
				return nil
			}
			return bucketsOf(res)
		}
		ttft, itl := hist("ttft"), hist("itl")
		o.TTFTP90 = secondsOrZero(p90(ttft))
		o.ITLP90 = secondsOrZero(p90(itl))
		o.Attainment = attainment(ttft, itl, p.ttftTarget, p.itlTarget)
		res, err := p.Query(ctx, p.QueryFor("busy", pool), now)
		if err != nil {
			errs = append(errs, &SourceError{"prometheus", pool + " busy", err})
		}
		seen := map[string]bool{}
		for _, s := range res {
			inst := s.Labels["instance"]
			if inst == "" {
				continue
			}
			seen[inst] = true
			if draining[inst] != "" {
				o.Draining++
				if s.Value == 0 {
					o.Idle = append(o.Idle, inst)
				}
			} else {
				o.Ready = append(o.Ready, inst)
			}
		}
		for inst, dp := range draining {
			if dp == pool && !seen[inst] {
				o.Draining++
				o.Idle = append(o.Idle, inst)
			}
		}
		slices.Sort(o.Ready)
		slices.Sort(o.Idle)
		o.Replicas = len(o.Ready)
		obs.Pools[pool] = o
	}
	return obs, errs
}

// bucketsOf reads a `sum by (le)` vector; series without a parsable le
// are skipped.
func bucketsOf(res []Sample) []bucket {
	var out []bucket
	for _, s := range res {
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil || math.IsNaN(le) || math.IsNaN(s.Value) {
			continue
		}
		out = append(out, bucket{le, s.Value})
	}
	return out
}
