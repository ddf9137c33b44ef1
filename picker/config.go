package picker

import (
	"fmt"
	"math"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// Policy names.
const (
	PolicyDynamo = "dynamo"
	PolicyKvgate = "kvgate"
)

// MaxFallbacks bounds Config.Fallbacks: the proxy walks the list on retry,
// and a long list only repeats the same few good workers.
const MaxFallbacks = 16

// Config parameterises Pick. Start from DefaultConfig.
type Config struct {
	Policy string // PolicyDynamo or PolicyKvgate

	// TierWeights credit one overlapping block by the tier it sits on. The
	// defaults are Dynamo's: overlap_score_credit 1 (device),
	// host_cache_hit_weight 0.75, disk_cache_hit_weight 0.25, and no credit
	// for external storage (shared_cache_multiplier 0); see
	// lib/kv-router/src/scheduling/config.rs. Each weight is in [0, 1]: a
	// cached block never saves more than computing it.
	TierWeights [kvfleet.NumTiers]float64
	// PrefillLoadScale multiplies the prefill term (Dynamo prefill_load_scale).
	PrefillLoadScale float64
	// ActiveRequestWeight charges each in-flight request this many blocks
	// (Dynamo decode_active_request_weight, default 0).
	ActiveRequestWeight float64
	// Temperature 0 picks the lowest cost (ties broken at random); above 0
	// samples a softmax over the costs normalised to [0, 1] (Dynamo
	// router_temperature).
	Temperature float64
	// Fallbacks is how many next-best workers to list after the primary.
	Fallbacks int

	// MaxInflight and MaxQueuedPrefillTokens, when positive, exclude workers
	// at or above the bound (an admission bound; CheckedPD.Decide uses it to define a
	// saturated prefill pool). 0 = unbounded.
	MaxInflight            int
	MaxQueuedPrefillTokens int64

	// HealthyPanicThreshold is Envoy's healthy_panic_threshold, in percent
	// (0 disables; Envoy's default is 50): when fewer than this share of the
	// candidates that could serve the stage are healthy (neither Unhealthy
	// nor Ejected; Draining ones are left out of the count, as Envoy leaves
	// excluded hosts out of the denominator), the pick is in panic and
	// chooses among all of them, health ignored. A transient that marks
	// every worker down (probes timing out on a loaded machine) then costs
	// cache affinity, not every request (envoyproxy/envoy
	// source/common/upstream/load_balancer_impl.cc,
	// LoadBalancerBase::isHostSetInPanic and
	// ZoneAwareLoadBalancerBase::hostSourceToUse: AllHosts, lb_healthy_panic).
	HealthyPanicThreshold float64

	Kvgate KvgateConfig // used only by PolicyKvgate

	// TermsOff switches listed terms off (terms.go): the term is not
	// computed and its column is 0. The zero value computes every term
	// of the policy.
	TermsOff [NumTerms]bool
}

// DefaultHealthyPanicThreshold is Envoy's default healthy_panic_threshold
// (cluster.proto CommonLbConfig, 50 %).
const DefaultHealthyPanicThreshold = 50

// KvgateConfig holds the knobs of the kvgate policy's extra terms. Each term
// can be switched off alone; with all three off the kvgate policy computes
// exactly Dynamo's cost.
type KvgateConfig struct {
	// (a) Throughput-aware prefill: charge queued+uncached prefill by each
	// worker's measured prefill rate instead of counting blocks alike.
	ThroughputAware bool
	// DefaultPrefillTokensPerSec stands in for workers without a measured
	// rate, and converts work to the TTFT reported in Terms.
	DefaultPrefillTokensPerSec float64

	// (b) Decode footprint: count this request's expected output blocks and
	// only the prompt blocks not already on the device, take the engine's
	// own KV usage when it reports more than kvgate routed, and penalise
	// footprints beyond KVHeadroom × capacity (preemption risk).
	AnticipateDecode bool
	KVHeadroom       float64 // fraction of KV capacity considered safe
	KVOverflowWeight float64 // blocks charged per block beyond headroom

	// (c) Anti-herding: when at least HerdMinTied workers are within
	// HerdTieBlocks of the best credit, charge each of them HerdWeight ×
	// request blocks × how far its in-flight count exceeds the group mean.
	// 0 disables.
	HerdWeight    float64
	HerdTieBlocks float64
	HerdMinTied   int

	// (d) Affinity under load: charge every worker RecomputeWeight per
	// prompt block it would compute that the best-cached worker (the
	// holder) would load from cache. Leaving the holder then pays only
	// when the holder's queue exceeds the recompute cost by this margin,
	// because under load the recompute is work taken from the fleet's
	// only spare capacity. HolderMaxWaitSeconds bounds the wait this
	// buys: when the holder's predicted TTFT (its queued prefill drained,
	// then this prompt's uncached part) exceeds it, the term is dropped.
	// 0 disables the term; a 0 bound means unbounded.
	RecomputeWeight      float64
	HolderMaxWaitSeconds float64
}

// DefaultConfig is Dynamo's default router behaviour with two fallbacks,
// and conservative kvgate knobs.
func DefaultConfig() Config {
	return Config{
		Policy:           PolicyDynamo,
		TierWeights:      [kvfleet.NumTiers]float64{1, 0.75, 0.25, 0},
		PrefillLoadScale: 1,
		Temperature:      0,
		Fallbacks:        2,
		Kvgate:           DefaultKvgateConfig(),

		HealthyPanicThreshold: DefaultHealthyPanicThreshold,
	}
}

// DefaultKvgateConfig turns every kvgate term on with small weights, so that
// the kvgate policy departs from Dynamo only where a term has evidence: a
// measured rate, a reported KV capacity, or a crowd of equally good workers.
//
// Measured on `kvgate-lab bench --only capacity` (BENCHMARKS.md, capacity):
// term (d) at weight 8 with no wait bound raised SLA capacity and the hit
// ratio under overload on every mix and fleet size tried, and term (a) is
// off: extproc measures a worker's prefill rate from time to first byte,
// which includes its queue, so under load the busy cache holder looks slow
// and (a) pushes requests off it, the collapse (d) exists to prevent.
func DefaultKvgateConfig() KvgateConfig {
	return KvgateConfig{
		ThroughputAware: false,
		// The Dynamo mocker's prefill model (lib/mocker) puts an 8k-token
		// batch near 170 ms, ~48k tokens/s; half of that is a cautious guess.
		DefaultPrefillTokensPerSec: 20000,
		AnticipateDecode:           true,
		KVHeadroom:                 0.9,
		// A preempted request is recomputed: charge an overflow block about
		// as much as re-prefilling it twice.
		KVOverflowWeight: 2,
		HerdWeight:       0.1,
		HerdTieBlocks:    1,
		HerdMinTied:      2,
		RecomputeWeight:  8,
	}
}

func finiteIn(v, lo, hi float64) bool {
	return !math.IsNaN(v) && v >= lo && v <= hi
}

// Validate reports the first invalid field of c.
func (c Config) Validate() error {
	if c.Policy != PolicyDynamo && c.Policy != PolicyKvgate {
		return fmt.Errorf("picker config: policy %q: want %q or %q", c.Policy, PolicyDynamo, PolicyKvgate)
	}
	for t, w := range c.TierWeights {
		if !finiteIn(w, 0, 1) {
			return fmt.Errorf("picker config: tier weight %s = %v outside [0, 1]", kvfleet.Tier(t), w)
		}
	}
	switch {
	case !finiteIn(c.PrefillLoadScale, 0, 1e6):
		return fmt.Errorf("picker config: prefill load scale %v outside [0, 1e6]", c.PrefillLoadScale)
	case !finiteIn(c.ActiveRequestWeight, 0, 1e6):
		return fmt.Errorf("picker config: active request weight %v outside [0, 1e6]", c.ActiveRequestWeight)
	case !finiteIn(c.Temperature, 0, 1e3):
		return fmt.Errorf("picker config: temperature %v outside [0, 1000]", c.Temperature)
	case c.Fallbacks < 0 || c.Fallbacks > MaxFallbacks:
		return fmt.Errorf("picker config: fallbacks %d outside [0, %d]", c.Fallbacks, MaxFallbacks)
	case c.MaxInflight < 0:
		return fmt.Errorf("picker config: max in-flight %d is negative", c.MaxInflight)
	case c.MaxQueuedPrefillTokens < 0:
		return fmt.Errorf("picker config: max queued prefill tokens %d is negative", c.MaxQueuedPrefillTokens)
	case !finiteIn(c.HealthyPanicThreshold, 0, 100):
		return fmt.Errorf("picker config: healthy panic threshold %v%% outside [0, 100]", c.HealthyPanicThreshold)
	}
	if c.Policy == PolicyKvgate {
		if err := c.Kvgate.validate(); err != nil {
			return fmt.Errorf("picker config: kvgate: %w", err)
		}
	}
	return nil
}

// Checked is a Config that Validate accepted. A caller that picks many
// times with one configuration (extproc's router: every request) checks it
// once, when the configuration is loaded, and picks with Checked.Pick:
// Pick and PickInto validate the Config they are given on every call.
// The zero Checked refuses to pick; Check makes one.
type Checked struct {
	cfg Config
	ok  bool
}

// Check validates c once for many picks.
func (c Config) Check() (Checked, error) {
	if err := c.Validate(); err != nil {
		return Checked{}, err
	}
	return Checked{cfg: c, ok: true}, nil
}

func (k KvgateConfig) validate() error {
	switch {
	case !finiteIn(k.DefaultPrefillTokensPerSec, 1, 1e9):
		return fmt.Errorf("default prefill tokens/s %v outside [1, 1e9]", k.DefaultPrefillTokensPerSec)
	case !finiteIn(k.KVHeadroom, 0.01, 1):
		return fmt.Errorf("KV headroom %v outside [0.01, 1]", k.KVHeadroom)
	case !finiteIn(k.KVOverflowWeight, 0, 1e6):
		return fmt.Errorf("KV overflow weight %v outside [0, 1e6]", k.KVOverflowWeight)
	case !finiteIn(k.HerdWeight, 0, 1e6):
		return fmt.Errorf("herd weight %v outside [0, 1e6]", k.HerdWeight)
	case !finiteIn(k.HerdTieBlocks, 0, 1e9):
		return fmt.Errorf("herd tie blocks %v outside [0, 1e9]", k.HerdTieBlocks)
	case k.HerdMinTied < 2:
		return fmt.Errorf("herd min tied %d below 2", k.HerdMinTied)
	case !finiteIn(k.RecomputeWeight, 0, 1e6):
		return fmt.Errorf("recompute weight %v outside [0, 1e6]", k.RecomputeWeight)
	case !finiteIn(k.HolderMaxWaitSeconds, 0, 1e6):
		return fmt.Errorf("holder max wait %v s outside [0, 1e6]", k.HolderMaxWaitSeconds)
	}
	return nil
}
