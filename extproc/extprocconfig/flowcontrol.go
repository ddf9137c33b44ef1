package extprocconfig

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvgate/kvgate/extproc/flowcontrol"
	"github.com/kvgate/kvgate/internal/yamlconf"
)

// FlowControl holds requests when every worker of their pool is saturated
// instead of refusing them (extproc/flowcontrol; the extproc's flow gate):
// the ext_proc stream holds its answer until a worker has room, and the
// request is answered 429 with Retry-After only when it could not start
// within its wait limit (DeadlineHeader, MaxWait) or the queue's bounds
// are full. Waiting requests leave by priority band (the
// InferenceObjective's priority, or admission.priority_header), then round
// robin across tenants (Tenant), then earliest deadline — newest first
// while the tenant's queue is backed up (adaptive LIFO).
//
// Holding needs an Envoy that does not time the ext_proc answer:
// envoy/envoy.yaml's FULL_DUPLEX_STREAMED mode runs no message timer. With
// a BUFFERED mode (envoy/envoy-buffered-failopen.yaml, message_timeout
// 0.5s) keep MaxWait under the message timeout, or disable flow control.
type FlowControl struct {
	// Disabled: refuse at the admission bounds as before (429 at once).
	Disabled bool `yaml:"disabled"`
	// MaxWait is how long a request without a deadline (DeadlineHeader)
	// may wait for room; past it, 429. It also caps the wait of a request
	// with one.
	MaxWait yamlconf.Duration `yaml:"max_wait"`
	// DeadlineHeader names the request header in which a client states its
	// time-to-first-token budget, in whole milliseconds. The default is the
	// one llm-d's and GIE's flow control read, x-slo-ttft-ms (its
	// SLO-deadline ordering: Deadline = ReceivedTimestamp + x-slo-ttft-ms,
	// llm-d/llm-d-inference-scheduler at 12cb9eea,
	// pkg/epp/framework/plugins/flowcontrol/ordering/slodeadline/README.md;
	// the SLO-aware scorer reads the same header). "none" reads no header.
	// A request with a budget B waits at most B × DeadlineQueueShare (and
	// at most MaxWait) and is refused at once when the queue ahead of it
	// cannot drain in that time; a value that is not an integer in
	// [1, 3600000] is answered 400 (invalid_request_error).
	DeadlineHeader string `yaml:"deadline_header"`
	// DeadlineQueueShare is the share of a request's TTFT budget it may
	// spend in kvgate's queue; the rest is left for the engine's own queue
	// (bounded by Saturation) and the prefill. Default 0.75: with a 2 s
	// budget, 1.5 s. Under a standing backlog the queue serves a flow's
	// newest requests first (flowcontrol.Queue.PopAt, adaptive LIFO), so
	// what is dispatched then has most of its budget left whatever the
	// share; the share bounds how late a request can still be dispatched
	// in a short burst (FIFO). In the issue-26 replays (8 workers, five
	// workloads, three seeds) 0.75 kept the most goodput at 2× and 3× of
	// capacity of 0.5, 0.75 and 1, and more than FIFO with 0.25 or 0.5.
	DeadlineQueueShare float64 `yaml:"deadline_queue_share"`
	// MaxRequests and MaxBytes bound the waiting requests of one pool,
	// bands together (bytes: their bodies). A request that would cross
	// either is refused at once.
	MaxRequests int   `yaml:"max_requests"`
	MaxBytes    int64 `yaml:"max_bytes"`
	// RetryAfter is the Retry-After a refused request is given.
	RetryAfter yamlconf.Duration `yaml:"retry_after"`
	// Tenant says what a flow is, for fairness across flows: "" (one flow:
	// first come, first served inside a band), "user" (the OpenAI request
	// body's user field), "cache_salt" (the request's cache_salt namespace),
	// "api_key" (a hash of the authorization header: the key itself is
	// never kept), or "header:<name>" (a lower-case request header the
	// gateway sets, e.g. header:x-tenant).
	Tenant string `yaml:"tenant"`
	// Recheck is how often, while requests wait, saturation is judged again
	// besides the wake-ups of kvgate's own bookings ending: the signals
	// that change outside them (engine metrics scrapes, peer replicas'
	// load, workers joining) are noticed within it.
	Recheck    yamlconf.Duration `yaml:"recheck"`
	Saturation FlowSaturation    `yaml:"saturation"`
}

// FlowSaturation says when a worker has no room (flowcontrol.Saturation);
// a pool is saturated when every usable worker is, when the workers' mean
// score reaches PoolMeanScore, or when it is over an
// admission bound.
type FlowSaturation struct {
	// MaxQueuedPrefillTokens: prompt tokens kvgate routed to the worker and
	// not yet prefilled. The default, 16384, is about a second of prefill
	// for an 8B model on one H100: past it a request waits in kvgate's
	// queue, where band and tenant order apply and a request its client
	// abandons costs nothing, rather than in the engine's FCFS queue
	// (issue 26; 65536 before, several seconds of prefill).
	MaxQueuedPrefillTokens int64 `yaml:"max_queued_prefill_tokens"`
	// MaxInflight: requests kvgate routed to the worker and not finished;
	// 0 (default) = off. Set it to the engines' max_num_seqs to hold
	// requests in kvgate rather than in the engine's waiting queue.
	MaxInflight int `yaml:"max_inflight"`
	// MaxEngineWaiting and MaxKVUsage are the engine's own waiting queue and
	// KV-cache usage (engine_metrics). MaxKVUsage is GIE's saturation
	// detector default, 0.8 (gateway-api-inference-extension at 9ca8b513,
	// pkg/epp/saturationdetector/config.go); MaxEngineWaiting is 2, not
	// GIE's 5, for the reason MaxQueuedPrefillTokens is short (issue 26).
	MaxEngineWaiting int     `yaml:"max_engine_waiting"`
	MaxKVUsage       float64 `yaml:"max_kv_usage"`
	// PoolFraction is the share of the pool's usable workers that must be
	// saturated for requests to wait (flowcontrol.Saturation.PoolFraction);
	// default 1, every one. 0.5 held more goodput past 2× capacity in the
	// issue-26 replays but cost SLA capacity on bursty workloads (bands,
	// agent), so it is not the default.
	PoolFraction float64 `yaml:"pool_fraction"`
	// PoolMeanScore: requests also wait once the mean of the usable
	// workers' scores, each the larger of engine waiting ÷
	// max_engine_waiting and KV usage ÷ max_kv_usage (1 without engine
	// metrics), reaches it (flowcontrol.Saturation.PoolMeanScore, GIE's
	// utilization detector). Default 3: six requests waiting per engine on
	// average at the default max_engine_waiting, about GIE's queue
	// threshold of 5 under its mean of 1. In the issue-26 replays it raised
	// goodput past saturation on 12 of 14 tables (not conversation) and moved
	// SLA capacity by one bisection step on 3 (BENCHMARKS.md, "Issue 26,
	// third pass").
	// A large value (1000) leaves the judgement to pool_fraction alone.
	PoolMeanScore float64 `yaml:"pool_mean_score"`
}

// Judge is the saturation judgement these bounds configure, the one the
// extproc's flow gate and the replay's kvgate-flow both apply.
func (s FlowSaturation) Judge() flowcontrol.Saturation {
	return flowcontrol.Saturation{MaxQueuedPrefillTokens: s.MaxQueuedPrefillTokens, MaxInflight: s.MaxInflight,
		MaxEngineWaiting: s.MaxEngineWaiting, MaxKVUsage: s.MaxKVUsage, PoolFraction: s.PoolFraction, PoolMeanScore: s.PoolMeanScore}
}

// Defaults for FlowControl.
const (
	DefaultFlowMaxWait     = 10 * time.Second
	DefaultFlowMaxRequests = 1024
	// DefaultFlowMaxBytes is half the streams' buffer budget
	// (DefaultBufferBudgetBytes), which also holds the waiting bodies: new
	// arrivals keep the other half.
	DefaultFlowMaxBytes               = DefaultBufferBudgetBytes / 2
	DefaultFlowRetryAfter             = time.Second
	DefaultFlowRecheck                = 250 * time.Millisecond
	DefaultFlowMaxQueuedPrefillTokens = 16384
	DefaultFlowMaxEngineWaiting       = 2
	DefaultFlowMaxKVUsage             = 0.8
	DefaultFlowPoolMeanScore          = 3.0
	DefaultFlowDeadlineHeader         = "x-slo-ttft-ms"
	DefaultFlowDeadlineQueueShare     = 0.75
	// FlowDeadlineNone as deadline_header reads no deadline header.
	FlowDeadlineNone = "none"
	// MaxFlowDeadlineMs bounds a deadline header's value: an hour.
	MaxFlowDeadlineMs = 3_600_000
)

// DeadlineOf parses a deadline header's value: whole milliseconds in
// [1, MaxFlowDeadlineMs], surrounding spaces allowed.
func DeadlineOf(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > MaxFlowDeadlineMs {
		if len(v) > 32 {
			v = v[:32] + "…"
		}
		return 0, fmt.Errorf("TTFT budget %q: want whole milliseconds in [1, %d]", v, MaxFlowDeadlineMs)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// WaitLimit is how long a request may wait in the queue: with a TTFT
// budget (> 0) its DeadlineQueueShare, at most MaxWait; without one
// MaxWait.
func (f *FlowControl) WaitLimit(budget time.Duration) time.Duration {
	if budget <= 0 {
		return f.MaxWait.D()
	}
	return min(time.Duration(float64(budget)*f.DeadlineQueueShare), f.MaxWait.D())
}

// ReadsDeadline reports whether a deadline header is read.
func (f *FlowControl) ReadsDeadline() bool {
	return f.DeadlineHeader != "" && f.DeadlineHeader != FlowDeadlineNone
}

// The values of extproc.flow_control.tenant besides "" and "header:<name>".
const (
	TenantUser      = "user"
	TenantCacheSalt = "cache_salt"
	TenantAPIKey    = "api_key"
	TenantHeader    = "header:"
)

func (f *FlowControl) applyDefaults() {
	if f.MaxWait == 0 {
		f.MaxWait = yamlconf.Duration(DefaultFlowMaxWait)
	}
	if f.DeadlineHeader == "" {
		f.DeadlineHeader = DefaultFlowDeadlineHeader
	}
	if f.DeadlineQueueShare == 0 {
		f.DeadlineQueueShare = DefaultFlowDeadlineQueueShare
	}
	if f.MaxRequests == 0 {
		f.MaxRequests = DefaultFlowMaxRequests
	}
	if f.MaxBytes == 0 {
		f.MaxBytes = DefaultFlowMaxBytes
	}
	if f.RetryAfter == 0 {
		f.RetryAfter = yamlconf.Duration(DefaultFlowRetryAfter)
	}
	if f.Recheck == 0 {
		f.Recheck = yamlconf.Duration(DefaultFlowRecheck)
	}
	s := &f.Saturation
	if s.MaxQueuedPrefillTokens == 0 {
		s.MaxQueuedPrefillTokens = DefaultFlowMaxQueuedPrefillTokens
	}
	if s.MaxEngineWaiting == 0 {
		s.MaxEngineWaiting = DefaultFlowMaxEngineWaiting
	}
	if s.MaxKVUsage == 0 {
		s.MaxKVUsage = DefaultFlowMaxKVUsage
	}
	if s.PoolFraction == 0 {
		s.PoolFraction = 1
	}
	if s.PoolMeanScore == 0 {
		s.PoolMeanScore = DefaultFlowPoolMeanScore
	}
}

// validate reports the first invalid value; path is the section's key path.
func (f *FlowControl) validate(path string) error {
	s := f.Saturation
	switch {
	case f.MaxWait.D() < time.Millisecond || f.MaxWait.D() > 10*time.Minute:
		return fmt.Errorf("%s.max_wait: %v outside [1ms, 10m]", path, f.MaxWait.D())
	case f.DeadlineHeader != FlowDeadlineNone && !validHeaderName(f.DeadlineHeader):
		return fmt.Errorf("%s.deadline_header: %q is not a lower-case header name (or none)", path, f.DeadlineHeader)
	case !(f.DeadlineQueueShare > 0 && f.DeadlineQueueShare <= 1):
		return fmt.Errorf("%s.deadline_queue_share: %g outside (0, 1]", path, f.DeadlineQueueShare)
	case f.MaxRequests < 1 || f.MaxRequests > 1<<20:
		return fmt.Errorf("%s.max_requests: %d outside [1, %d]", path, f.MaxRequests, 1<<20)
	case f.MaxBytes < 1 || f.MaxBytes > 1<<40:
		return fmt.Errorf("%s.max_bytes: %d outside [1, 2^40]", path, f.MaxBytes)
	case f.RetryAfter.D() < time.Second || f.RetryAfter.D() > time.Hour:
		return fmt.Errorf("%s.retry_after: %v outside [1s, 1h] (Retry-After counts whole seconds)", path, f.RetryAfter.D())
	case f.Recheck.D() < 10*time.Millisecond || f.Recheck.D() > time.Minute:
		return fmt.Errorf("%s.recheck: %v outside [10ms, 1m]", path, f.Recheck.D())
	case !validTenant(f.Tenant):
		return fmt.Errorf("%s.tenant: %q is not one of \"\", user, cache_salt, api_key, header:<lower-case header name>", path, f.Tenant)
	case s.MaxQueuedPrefillTokens < 1 || s.MaxQueuedPrefillTokens > 1<<40:
		return fmt.Errorf("%s.saturation.max_queued_prefill_tokens: %d outside [1, 2^40]", path, s.MaxQueuedPrefillTokens)
	case s.MaxInflight < 0 || s.MaxInflight > 1<<20:
		return fmt.Errorf("%s.saturation.max_inflight: %d outside [0, %d] (0 = off)", path, s.MaxInflight, 1<<20)
	case s.MaxEngineWaiting < 1 || s.MaxEngineWaiting > 1<<20:
		return fmt.Errorf("%s.saturation.max_engine_waiting: %d outside [1, %d]", path, s.MaxEngineWaiting, 1<<20)
	case s.MaxKVUsage <= 0 || s.MaxKVUsage > 1:
		return fmt.Errorf("%s.saturation.max_kv_usage: %g outside (0, 1]", path, s.MaxKVUsage)
	case !(s.PoolFraction > 0 && s.PoolFraction <= 1):
		return fmt.Errorf("%s.saturation.pool_fraction: %g outside (0, 1]", path, s.PoolFraction)
	case !(s.PoolMeanScore >= 0.1 && s.PoolMeanScore <= 1000):
		return fmt.Errorf("%s.saturation.pool_mean_score: %g outside [0.1, 1000]", path, s.PoolMeanScore)
	}
	return nil
}

func validTenant(t string) bool {
	switch t {
	case "", TenantUser, TenantCacheSalt, TenantAPIKey:
		return true
	}
	h, ok := strings.CutPrefix(t, TenantHeader)
	return ok && validHeaderName(h)
}
