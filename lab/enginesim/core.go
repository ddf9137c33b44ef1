// Package enginesim simulates a vLLM-like LLM inference engine, for routing
// experiments without GPUs.
//
// # The core (core.go, scheduler.go, cache.go, timing.go)
//
// Engine is pure and deterministic: it runs on virtual time, reads no
// clock, starts no goroutine and is not safe for concurrent use (a wrapper
// serialises calls). It models what a router can observe of vLLM v1:
//
//   - a prefix cache of NumGPUBlocks fixed-size blocks, reference-counted by
//     running sequences, with LRU eviction of unreferenced blocks only
//     (cache.go); blocks are identified by Dynamo sequence hashes
//     (kv/blockhash) under the request's LoRA and Config.Namespace;
//   - prefix matching at admission, reported per request as CachedTokens
//     (vLLM prompt_tokens_details.cached_tokens);
//   - continuous batching with MaxNumSeqs, MaxNumBatchedTokens, chunked
//     prefill, FCFS admission and recompute preemption (scheduler.go);
//   - step durations from the Dynamo mocker's timing model (timing.go);
//   - KV events exactly as vLLM publishes them: BlockStored (engine block
//     hashes, parent, token ids, block size, lora name), BlockRemoved on
//     eviction, AllBlocksCleared on Reset, one callback per step.
//
// Driving it: Submit requests (Arrival is virtual time); Advance(to) runs
// every step that ends at or before to and starts the next one, returning
// first-token and completion records; NextEventTime says when Advance next
// has something to do. A wall-clock wrapper calls Advance(elapsed) from its
// loop; a discrete-event replayer calls it at NextEventTime. A step's batch
// is fixed when the step starts, so a request submitted with Arrival t
// joins the first step starting at or after t that was not yet started.
//
// Usage:
//
//	e, _ := enginesim.New(enginesim.Config{}, publish)
//	_ = e.Submit(enginesim.Request{ID: "r1", Tokens: prompt, MaxTokens: 64, Arrival: now})
//	for _, o := range e.Advance(now + time.Second) { ... }
package enginesim

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/zeebo/xxh3"
)

// Defaults are the Dynamo mocker's (notes §7), which are vLLM's.
const (
	DefaultBlockSize           = 64
	DefaultNumGPUBlocks        = 16384
	DefaultMaxNumSeqs          = 256
	DefaultMaxNumBatchedTokens = 8192
)

// Bounds on Config and Request, far above any real deployment, so that a bad
// flag is an error and not an allocation failure.
const (
	MaxNumGPUBlocks = 1 << 24
	MaxRequestIDLen = 1024
	MaxLoRANameLen  = 1024
	MaxOutputTokens = 1 << 24
)

// Config describes one simulated engine. Zero fields take the defaults.
type Config struct {
	BlockSize           int     // tokens per KV block (vLLM --block-size)
	NumGPUBlocks        int     // KV cache capacity in blocks
	MaxNumSeqs          int     // running sequences per step
	MaxNumBatchedTokens int     // tokens computed per step
	SpeedUp             float64 // divides every step's duration; 0 = 1
	// Namespace is the cache namespace mixed into block identities
	// (Dynamo cache_salt); the router must hash with the same one.
	Namespace string
	// OutputToken, if set, is the i-th generated token (from 0) of every
	// request, so that decode blocks hold what a wrapper streams. Nil gives
	// each request its own pseudo-random tokens.
	OutputToken func(i int) uint32
	// KVTier, if set, is a node-local KV tier (the kvagent, kvtier.go):
	// blocks the GPU pool evicts are offloaded to it, and at admission the
	// part of the prompt beyond the GPU-cached prefix is looked up there;
	// hits are onboarded and charged as a host→GPU copy instead of a
	// prefill. It is called synchronously from the engine's steps.
	KVTier KVTier
	// HostToGPUGBps is the copy bandwidth of onboarded blocks in GB/s
	// (default 25: what a PCIe 5 x16 link sustains for pinned copies).
	HostToGPUGBps float64
}

func (c Config) withDefaults() Config {
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.NumGPUBlocks == 0 {
		c.NumGPUBlocks = DefaultNumGPUBlocks
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if c.SpeedUp == 0 {
		c.SpeedUp = 1
	}
	if c.HostToGPUGBps == 0 {
		c.HostToGPUGBps = DefaultHostToGPUGBps
	}
	return c
}

// Validate reports the first bad field, after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.BlockSize < 1 || c.BlockSize > blockhash.MaxBlockSize:
		return fmt.Errorf("enginesim: block size %d outside [1, %d]", c.BlockSize, blockhash.MaxBlockSize)
	case c.NumGPUBlocks < 1 || c.NumGPUBlocks > MaxNumGPUBlocks:
		return fmt.Errorf("enginesim: GPU blocks %d outside [1, %d]", c.NumGPUBlocks, MaxNumGPUBlocks)
	case c.MaxNumSeqs < 1 || c.MaxNumSeqs > 1<<20:
		return fmt.Errorf("enginesim: max num seqs %d outside [1, 2^20]", c.MaxNumSeqs)
	case c.MaxNumBatchedTokens < 1 || c.MaxNumBatchedTokens > 1<<24:
		return fmt.Errorf("enginesim: max num batched tokens %d outside [1, 2^24]", c.MaxNumBatchedTokens)
	case math.IsNaN(c.SpeedUp) || c.SpeedUp < 1e-3 || c.SpeedUp > 1e6:
		return fmt.Errorf("enginesim: speed-up %v outside [0.001, 1e6]", c.SpeedUp)
	case math.IsNaN(c.HostToGPUGBps) || c.HostToGPUGBps < 1e-3 || c.HostToGPUGBps > 1e6:
		return fmt.Errorf("enginesim: host-to-GPU bandwidth %v GB/s outside [0.001, 1e6]", c.HostToGPUGBps)
	case len(c.Namespace) > MaxLoRANameLen:
		return fmt.Errorf("enginesim: namespace of %d bytes, more than %d", len(c.Namespace), MaxLoRANameLen)
	}
	return nil
}

// Request is one generation request.
type Request struct {
	ID        string   // unique among the engine's unfinished requests
	Tokens    []uint32 // the prompt; kept (not copied) until the request ends: do not modify
	MaxTokens int      // tokens to generate, >= 1 (the simulator never stops early)
	LoRA      string   // adapter name; "" = base model
	// CacheSalt is the request's cache_salt: it replaces Config.Namespace
	// in the request's block identities, as vLLM salts them.
	CacheSalt string
	Arrival   time.Duration
	// KVTransferred: the prompt's KV was computed by another engine (P/D
	// decode side). Admission allocates the prompt's blocks and computes
	// only its last token, as a decode step, instead of prefilling.
	KVTransferred bool
	// HoldBlocks keeps the request's blocks referenced after it finishes,
	// until Release (P/D prefill side: vLLM's delayed free while a decoder
	// reads them). Output.BlockIDs lists them.
	HoldBlocks bool
}

// Output is one record of a request's progress, returned by Advance (and
// Abort). Each request yields a first-token record (Done false) when its
// first token is sampled, then a final record (Done true); a request
// aborted before its first token yields only the final one.
type Output struct {
	ID           string
	Done         bool // finished or aborted; false = first-token record
	Aborted      bool
	Arrival      time.Duration
	FirstTokenAt time.Duration // 0 if aborted before the first token
	FinishedAt   time.Duration // Done records only
	PromptTokens int
	// CachedTokens is the prefix-cache hit at the request's first
	// admission (vLLM num_cached_tokens): a multiple of BlockSize, and at
	// most PromptTokens−1 because the last prompt token is always computed.
	CachedTokens int
	OutputTokens int           // generated so far
	MaxITL       time.Duration // longest gap between consecutive tokens
	Preemptions  int
	BlockIDs     []int // HoldBlocks requests, final record: the held blocks
}

// MeanITL is the mean inter-token latency, 0 with fewer than two tokens.
func (o Output) MeanITL() time.Duration {
	if o.OutputTokens < 2 {
		return 0
	}
	return (o.FinishedAt - o.FirstTokenAt) / time.Duration(o.OutputTokens-1)
}

// Stats is a snapshot of the engine's state and counters; the wrapper maps
// them to vLLM metric names.
type Stats struct {
	Now              time.Duration
	Running, Waiting int
	UsedBlocks       int     // blocks referenced by sequences
	CachedBlocks     int     // blocks holding a registered hash
	KVUsage          float64 // UsedBlocks / NumGPUBlocks (vllm:kv_cache_usage_perc)
	NumGPUBlocks     int
	BlockSize        int
	RunningLoRAs     map[string]int // adapter → running requests; nil when none
	WaitingLoRAs     map[string]int

	PrefixQueryTokens uint64 // vllm:prefix_cache_queries
	PrefixHitTokens   uint64 // vllm:prefix_cache_hits
	PromptTokens      uint64 // prompt tokens of admitted requests
	GenerationTokens  uint64
	Steps             uint64
	BusyTime          time.Duration // sum of step durations
	Preemptions       uint64
	EvictedBlocks     uint64
	Finished          uint64 // requests that reached MaxTokens
	Aborted           uint64
	// With a KVTier: blocks offloaded on eviction, blocks onboarded at
	// admission, and the prompt tokens those onboarded blocks saved.
	TierOffloadedBlocks uint64
	TierOnboardedBlocks uint64
	TierHitTokens       uint64
}

// Engine is one simulated engine. See the package comment.
type Engine struct {
	cfg      Config
	onEvents func([]kvevents.Event)
	pool     *blockPool

	now     time.Duration // end of the last step
	seqs    map[string]*seq
	waiting []*seq // FCFS; preempted sequences go back to the front
	running []*seq // admission order = priority order
	held    map[string]*seq

	// The step in flight, fixed when it started.
	inFlight  bool
	stalled   bool // nothing could run: wait for a Submit, Abort or Release
	stepStart time.Duration
	stepEnd   time.Duration
	batch     []*seq

	events  []kvevents.Event
	tier    tierState // with Config.KVTier
	out     []Output
	scratch []uint32 // one block of tokens, for hashing decode blocks
	salt    uint64   // mixed into default output tokens
	st      Stats
}

// New returns an idle engine at virtual time 0. onEvents, if not nil,
// receives each step's KV events in order; it may keep the slice.
func New(cfg Config, onEvents func([]kvevents.Event)) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Engine{
		cfg:      cfg,
		onEvents: onEvents,
		pool:     newBlockPool(cfg.NumGPUBlocks),
		seqs:     map[string]*seq{},
		held:     map[string]*seq{},
		scratch:  make([]uint32, cfg.BlockSize),
	}, nil
}

// Config returns the engine's configuration with defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// Now is the end of the last executed step (the engine's clock).
func (e *Engine) Now() time.Duration { return e.now }

// Submit queues a request. It fails, changing nothing, when the request is
// malformed, its ID is in use, or its prompt plus MaxTokens could never fit
// in the cache (vLLM rejects those against max_model_len).
func (e *Engine) Submit(r Request) error {
	switch {
	case r.ID == "" || len(r.ID) > MaxRequestIDLen:
		return fmt.Errorf("enginesim: request id of %d bytes: want 1..%d", len(r.ID), MaxRequestIDLen)
	case len(r.Tokens) == 0:
		return fmt.Errorf("enginesim: request %q: empty prompt", r.ID)
	case r.MaxTokens < 1 || r.MaxTokens > MaxOutputTokens:
		return fmt.Errorf("enginesim: request %q: max tokens %d outside [1, %d]", r.ID, r.MaxTokens, MaxOutputTokens)
	case len(r.LoRA) > MaxLoRANameLen:
		return fmt.Errorf("enginesim: request %q: LoRA name of %d bytes, more than %d", r.ID, len(r.LoRA), MaxLoRANameLen)
	case r.Arrival < 0:
		return fmt.Errorf("enginesim: request %q: negative arrival %v", r.ID, r.Arrival)
	}
	if need := blocksFor(len(r.Tokens)+r.MaxTokens, e.cfg.BlockSize); need > e.cfg.NumGPUBlocks {
		return fmt.Errorf("enginesim: request %q: %d prompt + %d output tokens need %d blocks, the cache holds %d",
			r.ID, len(r.Tokens), r.MaxTokens, need, e.cfg.NumGPUBlocks)
	}
	if _, dup := e.seqs[r.ID]; dup {
		return fmt.Errorf("enginesim: request %q is already in flight", r.ID)
	}
	if _, dup := e.held[r.ID]; dup {
		return fmt.Errorf("enginesim: request %q still holds blocks (Release it first)", r.ID)
	}
	seed := blockhash.Seed(r.LoRA, blockhash.RequestNamespace(r.CacheSalt, e.cfg.Namespace))
	local := blockhash.LocalHashes(r.Tokens, e.cfg.BlockSize, seed)
	e.salt++
	s := &seq{
		req:          r,
		seed:         seed,
		hashes:       blockhash.SequenceHashes(local),
		numTokens:    len(r.Tokens),
		cachedTokens: -1,
		outSalt:      xxh3.HashString(r.ID) ^ mix64(e.salt),
	}
	e.seqs[r.ID] = s
	e.waiting = append(e.waiting, s)
	e.stalled = false
	return nil
}

// NextEventTime is when Advance next has work: the end of the step in
// flight, or the start of the next one. false: idle with nothing queued.
func (e *Engine) NextEventTime() (time.Duration, bool) {
	if e.inFlight {
		return e.stepEnd, true
	}
	return e.nextStart()
}

func (e *Engine) nextStart() (time.Duration, bool) {
	if e.stalled {
		return 0, false
	}
	if len(e.running) > 0 {
		return e.now, true
	}
	if len(e.waiting) > 0 {
		return max(e.now, e.waiting[0].req.Arrival), true
	}
	return 0, false
}

// Advance runs every step that ends at or before to, then starts the next
// step if it starts at or before to. It returns the first-token and final
// records produced, in time order; the slice is reused by the next call.
func (e *Engine) Advance(to time.Duration) []Output {
	e.out = e.out[:0]
	for {
		if !e.inFlight {
			start, ok := e.nextStart()
			if !ok || start > to {
				break
			}
			if !e.startStep(start) {
				e.stalled = true
				break
			}
		}
		if e.stepEnd > to {
			break
		}
		e.finishStep()
	}
	return e.out
}

// Abort ends a waiting or running request now; its blocks are released
// (those it computed stay cached). false: no such request in flight.
func (e *Engine) Abort(id string) (Output, bool) {
	s, ok := e.seqs[id]
	if !ok {
		return Output{}, false
	}
	if s.running {
		e.running = removeSeq(e.running, s)
		e.freeBlocks(s)
	} else {
		e.waiting = removeSeq(e.waiting, s)
	}
	s.aborted = true // a step in flight skips it
	delete(e.seqs, id)
	e.stalled = false
	e.st.Aborted++
	o := s.output(e.now)
	o.Done, o.Aborted = true, true
	return o, true
}

// Release frees the blocks a HoldBlocks request kept after finishing.
func (e *Engine) Release(id string) bool {
	s, ok := e.held[id]
	if !ok {
		return false
	}
	delete(e.held, id)
	e.freeBlocks(s)
	e.stalled = false
	return true
}

// Progress is how many tokens an unfinished request has generated.
func (e *Engine) Progress(id string) (generated int, ok bool) {
	s, ok := e.seqs[id]
	if !ok {
		return 0, false
	}
	return s.generated, true
}

// ErrBlocksInUse is returned by Reset while sequences hold blocks.
var ErrBlocksInUse = errors.New("enginesim: cannot reset the prefix cache while blocks are in use")

// Reset drops every cached block and publishes AllBlocksCleared. Like
// vLLM's reset_prefix_cache it refuses while any block is referenced.
func (e *Engine) Reset() error {
	if used := e.pool.used(); used > 0 {
		return fmt.Errorf("%w (%d blocks)", ErrBlocksInUse, used)
	}
	e.pool.clearHashes()
	clear(e.tier.blocks)
	if e.onEvents != nil {
		e.onEvents([]kvevents.Event{{Kind: kvevents.AllBlocksCleared}})
	}
	return nil
}

// Stats returns a snapshot.
func (e *Engine) Stats() Stats {
	s := e.st
	s.Now = e.now
	s.Running, s.Waiting = len(e.running), len(e.waiting)
	s.UsedBlocks = e.pool.used()
	s.CachedBlocks = len(e.pool.byHash)
	s.NumGPUBlocks, s.BlockSize = e.cfg.NumGPUBlocks, e.cfg.BlockSize
	s.KVUsage = float64(s.UsedBlocks) / float64(s.NumGPUBlocks)
	s.RunningLoRAs = loraCounts(e.running)
	s.WaitingLoRAs = loraCounts(e.waiting)
	return s
}

func loraCounts(ss []*seq) map[string]int {
	var m map[string]int
	for _, s := range ss {
		if s.req.LoRA != "" {
			if m == nil {
				m = map[string]int{}
			}
			m[s.req.LoRA]++
		}
	}
	return m
}

func blocksFor(tokens, blockSize int) int { return (tokens + blockSize - 1) / blockSize }

// mix64 is SplitMix64's finaliser, a bijection on uint64.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// engineHash is the opaque block id the engine publishes for a block of
// sequence hash h. vLLM's ids are its own content hashes, unrelated to
// Dynamo's; a bijection keeps them distinct per content, as vLLM's are, and
// makes sure the router cannot pass by recomputing hashes from token ids.
func engineHash(h uint64) uint64 { return mix64(h ^ 0x6b76676174650000) }

func removeSeq(list []*seq, s *seq) []*seq {
	for i, x := range list {
		if x == s {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}
