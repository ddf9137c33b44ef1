package replay

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/extproc/loadview"
	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/picker"
)

// Policy names, in the order results are shown.
const (
	PolicyRandom       = "random"
	PolicyRoundRobin   = "round-robin"
	PolicyLeastLoaded  = "least-loaded"
	PolicyApproxPrefix = "approx-prefix"
	PolicyDynamo       = "dynamo"
	// PolicyKvgate is what extproc runs: the kvgate picker on the index's
	// match deepened by pending-prefix credit (loadview.Pending, as
	// extproc/match.go, Router.match, does): a worker is also credited, for
	// PendingPrefixTTL, with the prefixes of requests routed to it whose
	// KV events have not arrived yet.
	PolicyKvgate = "kvgate"
	// PolicyKvgateEventsOnly is the kvgate picker on the index alone (the
	// default before pending credit), kept to measure what the credit buys.
	PolicyKvgateEventsOnly = "kvgate-events-only"
)

// PendingPrefixTTL is how long kvgate credits a routed prefix
// before only KV events count: longer than a prefill under load, shorter
// than a cache lifetime.
const PendingPrefixTTL = loadview.PendingTTL

// AllPolicies lists every policy, baselines first.
//
// PolicyLLMD and PolicySGLang are the peers' own policies (policy_llmd.go,
// policy_sglang.go).
var AllPolicies = []string{PolicyRandom, PolicyRoundRobin, PolicyLeastLoaded, PolicyApproxPrefix, PolicyDynamo, PolicyLLMD, PolicySGLang, PolicyKvgate, PolicyKvgateEventsOnly}

// Options configure a replay. Zero fields take the defaults noted.
type Options struct {
	Workers   int // engines in the fleet, 1..1024; default 8
	BlockSize int // engine KV block size; default TraceBlockSize (512)
	// GPUBlocks is each engine's cache capacity in blocks; default the
	// Dynamo mocker's 16,384 blocks of 64 tokens (1 Mi tokens) expressed
	// in BlockSize blocks.
	GPUBlocks int
	// RateScale multiplies the arrival rate (timestamps are divided by it);
	// default 1.
	RateScale float64
	// TimeCompression plays the trace c times faster on engines c times
	// faster (timestamps ÷ c, engine speed-up × c): the same schedule in
	// 1/c of the virtual time, as a wall-clock harness would run it. All
	// reported times are virtual (compressed). Default 1.
	TimeCompression float64
	SpeedUp         float64 // engine speed-up (mocker speedup_ratio); default 1
	// HostBlocks gives each engine a node-local host tier of this many
	// blocks (enginesim.StoreTier: kvagent's store and policies); 0: none.
	// HostBlockBytes is one block's KV size for the host→GPU copy time
	// (default DefaultHostBlockBytes) and HostToGPUGBps the copy
	// bandwidth (default enginesim's).
	HostBlocks     int
	HostBlockBytes int
	HostToGPUGBps  float64
	Policies       []string // default AllPolicies
	Seed           uint64   // randomness of random routing and picker tie-breaks
	// Kvgate, if set, is the kvgate policies' picker configuration (its
	// Policy is forced to kvgate); default picker.DefaultConfig's knobs.
	// `kvgate-lab replay --term NAME=off` sets it (SwitchTerm).
	Kvgate *picker.Config
	// GoodputSLA is the TTFT a request must meet to count in
	// PolicyResult.GoodputRPS; default DefaultGoodputSLA.
	GoodputSLA time.Duration
	// AbandonAfter, when > 0, gives every request a client that abandons
	// it when it has no first token AbandonAfter × GoodputSLA after its
	// arrival (abandon.go); 0: clients wait for ever. At most 100.
	AbandonAfter float64
	// Flow, if set, is kvgate-flow's flow-control configuration (zero
	// fields: extprocconfig's defaults); FlowSteer leaves saturated
	// workers out of its picks while any has room (flow.go).
	Flow      *extprocconfig.FlowControl
	FlowSteer bool
	// Progress, if set, is called now and then with the policy being
	// replayed and how many of its requests have been routed.
	Progress func(policy string, routed, total int)
}

// DefaultGPUBlocks is Options.GPUBlocks' default at blockSize: the Dynamo
// mocker's 16,384 blocks of 64 tokens (1 Mi tokens).
func DefaultGPUBlocks(blockSize int) int {
	return max(1, enginesim.DefaultNumGPUBlocks*enginesim.DefaultBlockSize/blockSize)
}

// Validate reports the first bad option, after defaults are applied.
func (o Options) Validate() error { return o.fill() }

// MaxWorkers bounds Options.Workers.
const MaxWorkers = 1024

func (o *Options) fill() error {
	if o.Workers == 0 {
		o.Workers = 8
	}
	if o.BlockSize == 0 {
		o.BlockSize = TraceBlockSize
	}
	if o.GPUBlocks == 0 && o.BlockSize > 0 {
		o.GPUBlocks = DefaultGPUBlocks(o.BlockSize)
	}
	if o.RateScale == 0 {
		o.RateScale = 1
	}
	if o.TimeCompression == 0 {
		o.TimeCompression = 1
	}
	if o.SpeedUp == 0 {
		o.SpeedUp = 1
	}
	if o.HostBlockBytes == 0 {
		o.HostBlockBytes = DefaultHostBlockBytes * o.BlockSize / TraceBlockSize
	}
	if len(o.Policies) == 0 {
		o.Policies = AllPolicies
	}
	if o.GoodputSLA == 0 {
		o.GoodputSLA = DefaultGoodputSLA
	}
	finite := func(v, lo, hi float64) bool { return !math.IsNaN(v) && v >= lo && v <= hi }
	switch {
	case o.Workers < 1 || o.Workers > MaxWorkers:
		return fmt.Errorf("replay: workers %d outside [1, %d]", o.Workers, MaxWorkers)
	case !finite(o.RateScale, 1e-3, 1e4):
		return fmt.Errorf("replay: rate scale %v outside [0.001, 10000]", o.RateScale)
	case !finite(o.TimeCompression, 1e-3, 1e4):
		return fmt.Errorf("replay: time compression %v outside [0.001, 10000]", o.TimeCompression)
	case !finite(o.SpeedUp, 1e-3, 1e4):
		return fmt.Errorf("replay: speed-up %v outside [0.001, 10000]", o.SpeedUp)
	case !finite(o.AbandonAfter, 0, 100):
		return fmt.Errorf("replay: abandon-after %v outside [0, 100] (× the TTFT SLA)", o.AbandonAfter)
	case o.GoodputSLA < time.Millisecond || o.GoodputSLA > time.Hour:
		return fmt.Errorf("replay: goodput SLA %v outside [1ms, 1h]", o.GoodputSLA)
	case o.HostBlocks < 0 || o.HostBlocks > 1<<26:
		return fmt.Errorf("replay: host tier of %d blocks outside [0, 2^26]", o.HostBlocks)
	case o.HostBlockBytes < 1 || o.HostBlockBytes > 1<<34:
		return fmt.Errorf("replay: host block bytes %d outside [1, 2^34]", o.HostBlockBytes)
	}
	seen := map[string]bool{}
	for _, p := range o.Policies {
		if !knownPolicy(p) {
			return fmt.Errorf("replay: unknown policy %q (want some of %v)", p, AllPolicies)
		}
		if seen[p] {
			return fmt.Errorf("replay: policy %q listed twice", p)
		}
		seen[p] = true
	}
	return o.engineConfig().Validate()
}

func knownPolicy(p string) bool {
	for _, q := range append(AllPolicies[:len(AllPolicies):len(AllPolicies)], ExtraPolicies...) {
		if p == q {
			return true
		}
	}
	return false
}

// DefaultHostBlockBytes is the KV of one 512-token block of Qwen3-8B
// (36 layers × 8 KV heads × head dim 128 × K and V × 2 bytes = 147,456
// bytes a token; Qwen/Qwen3-8B config.json): what a host-tier hit copies.
const DefaultHostBlockBytes = 512 * 147456

func (o *Options) engineConfig() enginesim.Config {
	return enginesim.Config{BlockSize: o.BlockSize, NumGPUBlocks: o.GPUBlocks, SpeedUp: o.SpeedUp * o.TimeCompression, HostToGPUGBps: o.HostToGPUGBps}
}

// arrival is request r's virtual arrival time.
func (o *Options) arrival(r TraceRequest) time.Duration {
	return time.Duration(float64(r.Timestamp) * float64(time.Millisecond) / (o.RateScale * o.TimeCompression))
}

// Result is a replay's outcome. Its JSON form is the `kvgate-lab replay
// --json` schema.
type Result struct {
	Trace         string  `json:"trace"`
	Workers       int     `json:"workers"`
	Requests      int     `json:"requests"`
	IdealHitRatio float64 `json:"ideal_hit_ratio"`
	// PooledLRUHitRatio is one LRU cache of the fleet's total GPU capacity
	// (PooledLRUHitRatio); 0 for a live replay, whose geometry is unknown.
	PooledLRUHitRatio float64                  `json:"pooled_lru_hit_ratio,omitempty"`
	Policies          map[string]*PolicyResult `json:"policies"`
	Order             []string                 `json:"-"` // policies in the order run
	BlockSize         int                      `json:"-"`
	GPUBlocks         int                      `json:"-"`
	// WallClock marks a live replay: HitOverTime is in wall-clock time
	// since the first request was sent, not virtual time.
	WallClock bool `json:"-"`
}

// PolicyResult holds one policy's figures.
//
//   - HitRatio: prefix-cached prompt tokens / prompt tokens, from the
//     engines' cached_tokens.
//   - ITLP50Ms, ITLP90Ms: median and p90 over requests (with two or more
//     output tokens) of each request's mean inter-token latency.
//   - ThroughputRPS: completed requests / (last completion − first arrival).
//   - LoadImbalance: max / mean of requests routed per worker (1 = even).
type PolicyResult struct {
	HitRatio      float64 `json:"hit_ratio"`
	TTFTP50Ms     float64 `json:"ttft_p50_ms"`
	TTFTP90Ms     float64 `json:"ttft_p90_ms"`
	TTFTP99Ms     float64 `json:"ttft_p99_ms"`
	ITLP50Ms      float64 `json:"itl_p50_ms"`
	ITLP90Ms      float64 `json:"itl_p90_ms"`
	E2EP90Ms      float64 `json:"e2e_p90_ms"`
	ThroughputRPS float64 `json:"throughput_rps"`
	LoadImbalance float64 `json:"load_imbalance"`
	// HostHitRatio is the part of HitRatio loaded from the host tier
	// (Options.HostBlocks); absent without one.
	HostHitRatio float64 `json:"host_hit_ratio,omitempty"`
	// TermMeans is each listed picker term's column (picker.TermList, in
	// KV blocks, weight applied) at the chosen worker, averaged over the
	// requests: what each term weighed in the policy's choices. Picker
	// policies only (dynamo, kvgate); `kvgate-lab replay --term` prints it.
	TermMeans map[string]float64 `json:"-"`
	// Overload measures: GoodputRPS is the requests per second whose TTFT
	// met Options.GoodputSLA (a refused request is a miss), SLAAttainment
	// their share of all requests; with flow control (kvgate-flow),
	// ShedRate and Refused are the requests refused (queue bounds or
	// max_wait), QueueWaitP99Ms the p99 wait of those that waited.
	GoodputRPS     float64 `json:"goodput_rps"`
	SLAAttainment  float64 `json:"sla_attainment"`
	ShedRate       float64 `json:"shed_rate,omitempty"`
	Refused        int     `json:"refused,omitempty"`
	QueueWaitP99Ms float64 `json:"queue_wait_p99_ms,omitempty"`
	// With Options.AbandonAfter: the requests whose client gave up before
	// their first token (misses), and their share.
	Abandoned   int     `json:"abandoned,omitempty"`
	AbandonRate float64 `json:"abandon_rate,omitempty"`
	// With two or more priority bands or tenants in the trace: attainment
	// per band and per tenant; across the well-behaved tenants (goodput.go)
	// Jain's index of their attainments, their pooled attainment and the
	// lowest.
	Bands                    []GroupAttainment `json:"bands,omitempty"`
	Tenants                  []GroupAttainment `json:"tenants,omitempty"`
	JainIndex                float64           `json:"jain_index,omitempty"`
	WellBehavedAttainment    float64           `json:"well_behaved_sla_attainment,omitempty"`
	WellBehavedMinAttainment float64           `json:"well_behaved_min_sla_attainment,omitempty"`
	// IndexRejects counts KV events the indexer rejected (kv-aware
	// policies); a replay is only as good as its index.
	IndexRejects uint64 `json:"-"`

	// For charts: every request's TTFT (ms, sorted) and the hit ratio per
	// time bucket of arrivals.
	TTFTsMs     []float64     `json:"-"`
	HitOverTime []HitPoint    `json:"-"`
	Elapsed     time.Duration `json:"-"` // wall time the replay took
}

// HitPoint is the hit ratio of the requests arriving in one time bucket.
type HitPoint struct {
	At       time.Duration // bucket start, virtual time (wall clock for a live replay)
	HitRatio float64
}

// Run replays reqs once per policy and returns the figures. name labels the
// trace in the result.
func Run(ctx context.Context, name string, reqs []TraceRequest, opt Options) (*Result, error) {
	if err := opt.fill(); err != nil {
		return nil, err
	}
	if err := checkFits(reqs, &opt); err != nil {
		return nil, err
	}
	res := &Result{
		Trace: name, Workers: opt.Workers, Requests: len(reqs),
		IdealHitRatio:     IdealHitRatio(reqs, opt.BlockSize),
		PooledLRUHitRatio: PooledLRUHitRatio(reqs, opt.BlockSize, opt.Workers*opt.GPUBlocks),
		Policies:          map[string]*PolicyResult{},
		BlockSize:         opt.BlockSize, GPUBlocks: opt.GPUBlocks,
	}
	for i, p := range opt.Policies {
		pr, err := runPolicy(ctx, p, uint64(i), reqs, &opt)
		if err != nil {
			return nil, err
		}
		res.Policies[p] = pr
		res.Order = append(res.Order, p)
	}
	return res, nil
}

// checkFits rejects an empty trace and a request no engine could hold.
func checkFits(reqs []TraceRequest, opt *Options) error {
	if len(reqs) == 0 {
		return fmt.Errorf("replay: empty trace")
	}
	for _, r := range reqs {
		need := (r.InputLength + max(1, r.OutputLength) + opt.BlockSize - 1) / opt.BlockSize
		if need > opt.GPUBlocks {
			return fmt.Errorf("replay: trace line %d needs %d blocks of %d tokens, more than an engine's %d (raise --gpu-blocks)",
				r.Line, need, opt.BlockSize, opt.GPUBlocks)
		}
	}
	return nil
}

// runPolicy replays reqs once under policy on a fresh fleet; idx varies the
// policy's random stream. opt must be filled.
func runPolicy(ctx context.Context, policy string, idx uint64, reqs []TraceRequest, opt *Options) (*PolicyResult, error) {
	start := time.Now()
	sim, err := newSimulation(policy, idx, reqs, opt)
	if err != nil {
		return nil, err
	}
	pr, err := sim.run(ctx)
	if err != nil {
		return nil, fmt.Errorf("replay: policy %s: %w", policy, err)
	}
	pr.Elapsed = time.Since(start)
	return pr, nil
}
