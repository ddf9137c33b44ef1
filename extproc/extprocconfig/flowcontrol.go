package extprocconfig

import (
	"fmt"
	"strings"
	"time"

	"github.com/kvgate/kvgate/internal/yamlconf"
)

// FlowControl holds requests when every worker of their pool is saturated
// instead of refusing them (extproc/flowcontrol; the extproc's flow gate):
// the ext_proc stream holds its answer until a worker has room, and the
// request is answered 429 with Retry-After only when it could not start
// within MaxWait or the queue's bounds are full. Waiting requests leave by
// priority band (the InferenceObjective's priority, or
// admission.priority_header), then round robin across tenants (Tenant),
// then earliest deadline.
//
// Holding needs an Envoy that does not time the ext_proc answer:
// envoy/envoy.yaml's FULL_DUPLEX_STREAMED mode runs no message timer. With
// a BUFFERED mode (envoy/envoy-buffered-failopen.yaml, message_timeout
// 0.5s) keep MaxWait under the message timeout, or disable flow control.
type FlowControl struct {
	// Disabled: refuse at the admission bounds as before (429 at once).
	Disabled bool `yaml:"disabled"`
	// MaxWait is how long a request may wait for room; past it, 429.
	MaxWait yamlconf.Duration `yaml:"max_wait"`
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
// a pool is saturated when every usable worker is, or when it is over an
// admission bound.
type FlowSaturation struct {
	// MaxQueuedPrefillTokens: prompt tokens kvgate routed to the worker and
	// not yet prefilled. The default, 65536, is several seconds of prefill
	// for an 8B model on one H100, past any interactive TTFT.
	MaxQueuedPrefillTokens int64 `yaml:"max_queued_prefill_tokens"`
	// MaxInflight: requests kvgate routed to the worker and not finished;
	// 0 (default) = off. Set it to the engines' max_num_seqs to hold
	// requests in kvgate rather than in the engine's waiting queue.
	MaxInflight int `yaml:"max_inflight"`
	// MaxEngineWaiting and MaxKVUsage are the engine's own waiting queue and
	// KV-cache usage (engine_metrics); GIE's saturation detector defaults,
	// 5 and 0.8 (gateway-api-inference-extension at 9ca8b513,
	// pkg/epp/saturationdetector/config.go).
	MaxEngineWaiting int     `yaml:"max_engine_waiting"`
	MaxKVUsage       float64 `yaml:"max_kv_usage"`
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
	DefaultFlowMaxQueuedPrefillTokens = 65536
	DefaultFlowMaxEngineWaiting       = 5
	DefaultFlowMaxKVUsage             = 0.8
)

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
}

// validate reports the first invalid value; path is the section's key path.
func (f *FlowControl) validate(path string) error {
	s := f.Saturation
	switch {
	case f.MaxWait.D() < time.Millisecond || f.MaxWait.D() > 10*time.Minute:
		return fmt.Errorf("%s.max_wait: %v outside [1ms, 10m]", path, f.MaxWait.D())
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
