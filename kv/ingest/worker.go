// Package ingest applies decoded KV events of one engine worker to the
// fleet index, the way NVIDIA Dynamo's KV router does
// (ai-dynamo/dynamo lib/kv-router, shared/notes/wire-formats.md §1): block
// identities are recomputed from each BlockStored's token_ids
// (blockhash.LocalHashes under the seed of the event's LoRA and the
// configured namespace) and chained onto the parent's sequence hash. The
// engine's own block hashes are opaque ids, used only to find a parent and
// to know what a BlockRemoved refers to.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// DefaultMaxBlocks bounds the engine-hash map when Config.MaxBlocks is 0:
// 4M blocks is more than any single engine's GPU plus host cache holds.
const DefaultMaxBlocks = 1 << 22

// Config describes the engine behind a worker.
type Config struct {
	// BlockSize is the engine's KV block size in tokens (vLLM --block-size).
	BlockSize int
	// Namespace is the cache namespace mixed into the hash seed of events
	// that carry no salt of their own (Dynamo's cache_namespace); "" for
	// none. Requests without a cache_salt are hashed with the same one; an
	// event's cache_salt (and a request's) takes its place.
	Namespace string
	// MaxBlocks bounds the engine hashes tracked for this worker; 0 means
	// DefaultMaxBlocks. The map mirrors the engine's cache, so size it from
	// the engine's block count (GPU + offload tiers) with headroom.
	MaxBlocks int
	// Tiers, when not 0, is the set of tiers (bit t = kvfleet.Tier t) this
	// stream may write; events for other tiers are rejected
	// (RejectTierNotAllowed). A node's kvagent stream credits host and disk
	// only: it must never claim, or drop, the engine's GPU blocks.
	Tiers uint8
	// ScopedClear makes Reset and AllBlocksCleared remove only the entries
	// this Worker stored (one Remove per tier) instead of Index.Clear, which
	// drops every tier of the worker. Set it when two streams feed one
	// worker (the engine's GPU events and its kvagent's host/disk events):
	// one stream's gap must not erase what the other announced.
	ScopedClear bool
	// ParentSeq, if set, resolves a parent engine hash this Worker does not
	// know (ok false: unknown) to its identity: sequence hash, namespace
	// salt (blockhash.NamespaceSalt) and place in its chain. The kvagent
	// stream offloads a block whose parent is often still on the GPU: only
	// the engine stream knows it. It must not call back into this Worker.
	ParentSeq func(engineHash uint64) (p BlockIdentity, ok bool)
}

// Validate reports a configuration that would reject every event.
func (c Config) Validate() error {
	if c.BlockSize <= 0 || c.BlockSize > blockhash.MaxBlockSize {
		return fmt.Errorf("ingest: block size must be in 1..%d, got %d", blockhash.MaxBlockSize, c.BlockSize)
	}
	if c.MaxBlocks < 0 {
		return fmt.Errorf("ingest: max blocks must not be negative, got %d", c.MaxBlocks)
	}
	return nil
}

// ErrNeedsReset is returned by Apply after an index operation failed part
// way: what the index holds for the worker is then unknown, and only Reset
// makes it known (empty) again.
var ErrNeedsReset = errors.New("ingest: worker state unknown after an index error; Reset it")

// BlockIdentity is what an engine block hash stands for: the block's
// sequence hash, the namespace salt it was hashed under, and its place in
// its chain (the index's kvindex.Block.Seg comes from it).
type BlockIdentity struct {
	Seq uint64 // Dynamo sequence hash of the block's prefix
	// NSSalt is the namespace share of the seed the block was hashed under
	// (blockhash.NamespaceSalt): a continuation event without a salt of its
	// own inherits its parent's (vLLM puts cache_salt on the first block
	// only, kv_cache_utils.generate_block_hash_extra_keys).
	NSSalt uint64
	// Pos is the block's position in its chain, counted from the first
	// block of a sequence (an event without a parent) along the parent
	// links; Seg is the sequence hash of the block at Pos -
	// Pos%kvindex.SegmentBlocks.
	Pos uint32
	Seg uint64
}

// next places the block after b in b's chain, whose sequence hash is seq.
func (b BlockIdentity) next(seq uint64) BlockIdentity {
	n := BlockIdentity{Seq: seq, NSSalt: b.NSSalt, Pos: b.Pos + 1, Seg: b.Seg}
	if n.Pos%kvindex.SegmentBlocks == 0 {
		n.Seg = seq
	}
	return n
}

// firstBlock places the first block of a sequence.
func firstBlock(seq, nsSalt uint64) BlockIdentity {
	return BlockIdentity{Seq: seq, NSSalt: nsSalt, Seg: seq}
}

func (b BlockIdentity) block() kvindex.Block { return kvindex.Block{Hash: b.Seq, Seg: b.Seg} }

// engineBlock is what kvgate knows about one engine block hash.
type engineBlock struct {
	BlockIdentity
	// refs counts, per tier, the announcements of this engine hash not yet
	// withdrawn. vLLM keeps several physical blocks under one hash
	// (BlockHashToBlockMap, no dedup) and its offload connector re-announces
	// hashes shared between chunks, each with its own removal later
	// ("consumers must reference-count", vllm#43468; llm-d-kv-cache#680,
	// Dynamo's EventDedupFilter): the block leaves a tier with its last
	// announcement, not its first removal.
	refs [kvfleet.NumTiers]uint16
}

func (b engineBlock) held() bool { return b.refs != [kvfleet.NumTiers]uint16{} }

// seqRefs counts, per tier, the engine hashes standing for one sequence
// hash, and keeps the segment the index entry was stored under. Distinct engine hashes can share a sequence hash (engine-side
// salts, multimodal inputs, per-group events of hybrid models); the index
// entry must live until the last of them is removed.
// Counts cannot overflow: they are bounded by len(blocks) <= MaxBlocks,
// which NewWorker clamps to maxMaxBlocks.
type seqRefs struct {
	n   [kvfleet.NumTiers]uint32
	seg uint64
}

const maxMaxBlocks = 1 << 31

// Worker turns one engine's event stream into Index operations. Apply and
// Reset serialise on a mutex (the Index contract wants one writer per
// worker); Stats may be called concurrently.
type Worker struct {
	id  kvfleet.WorkerID
	idx kvindex.Index
	cfg Config

	mu      sync.Mutex
	blocks  map[uint64]engineBlock // engine hash -> identity and tiers
	refs    map[uint64]seqRefs     // sequence hash -> holders per tier
	entries int64                  // (sequence hash, tier) pairs with a holder
	broken  error                  // set when the index may disagree with blocks
	scratch []kvindex.Block

	// groupMain remembers, per KV-cache group seen with a
	// kv_cache_spec_kind, whether it is a main attention group, for the
	// removals that carry only group_idx (vLLM PR #40984). Bounded by
	// maxGroups.
	groupMain map[int]bool

	batches, storedEv, removedEv, clearedEv atomic.Uint64
	blocksStored, blocksRemoved             atomic.Uint64
	removedUnknown, conflicts, resets       atomic.Uint64
	refSaturated                            atomic.Uint64
	rejected                                [NumRejectReasons]atomic.Uint64
	engineHashes, seqEntries                atomic.Int64
	brokenReason                            atomic.Pointer[string]
}

// NewWorker returns a Worker for w that writes to idx. cfg should pass
// Validate; with a bad BlockSize every BlockStored is rejected and counted.
func NewWorker(w kvfleet.WorkerID, idx kvindex.Index, cfg Config) *Worker {
	if cfg.MaxBlocks <= 0 {
		cfg.MaxBlocks = DefaultMaxBlocks
	}
	cfg.MaxBlocks = min(cfg.MaxBlocks, maxMaxBlocks)
	return &Worker{
		id:        w,
		idx:       idx,
		cfg:       cfg,
		blocks:    make(map[uint64]engineBlock),
		refs:      make(map[uint64]seqRefs),
		groupMain: make(map[int]bool),
	}
}

// maxGroups bounds the KV-cache groups a Worker remembers: real hybrid
// models have a handful.
const maxGroups = 256

// ID returns the worker this Worker writes for.
func (w *Worker) ID() kvfleet.WorkerID { return w.id }

// Apply applies a batch's events in order. Events that cannot be applied
// faithfully are counted (Stats.Rejected) and skipped; the index is never
// given a block whose identity is uncertain. An error means the batch was
// not (fully) applied: a dp-rank mismatch (nothing applied), or an index
// error, after which Apply keeps returning ErrNeedsReset until Reset.
func (w *Worker) Apply(ctx context.Context, b kvevents.Batch) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken != nil {
		return fmt.Errorf("%w (cause: %v)", ErrNeedsReset, w.broken)
	}
	// vLLM offsets each DP rank's publisher port and stamps its rank; a
	// batch from another rank describes another cache.
	if b.HasDPRank && b.DPRank != w.id.DPRank {
		return fmt.Errorf("ingest: batch from dp rank %d delivered to worker %s", b.DPRank, w.id)
	}
	for i := range b.Events {
		ev := &b.Events[i]
		var err error
		if ev.Err != nil {
			r := RejectMalformedEvent
			if errors.Is(ev.Err, kvevents.ErrUnknownEventType) {
				r = RejectUnknownEventType
			}
			w.reject(r, ev, ev.Err.Error())
			continue
		}
		switch ev.Kind {
		case kvevents.BlockStored:
			err = w.stored(ctx, ev)
		case kvevents.BlockRemoved:
			err = w.removed(ctx, ev)
		case kvevents.AllBlocksCleared:
			err = w.clear(ctx)
			if err == nil {
				w.clearedEv.Add(1)
			}
		default:
			err = fmt.Errorf("unknown event kind %v", ev.Kind)
		}
		if err != nil {
			w.broken = err
			reason := err.Error()
			w.brokenReason.Store(&reason)
			w.publishSizes()
			return fmt.Errorf("ingest: worker %s: event %d (%v): %w", w.id, i, ev.Kind, err)
		}
	}
	w.batches.Add(1)
	w.publishSizes()
	return nil
}

// Reset forgets everything known about the worker, in the index and here.
// Use it when the event stream has a gap that replay cannot fill.
func (w *Worker) Reset(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.clear(ctx); err != nil {
		w.broken = err
		reason := err.Error()
		w.brokenReason.Store(&reason)
		w.publishSizes()
		return fmt.Errorf("ingest: reset worker %s: %w", w.id, err)
	}
	w.broken = nil
	w.brokenReason.Store(nil)
	w.resets.Add(1)
	w.publishSizes()
	return nil
}

// clear drops the worker's index entries first: if that fails, the local
// maps still describe a superset of what the index may hold.
func (w *Worker) clear(ctx context.Context) error {
	if w.cfg.ScopedClear {
		if err := w.removeOwn(ctx); err != nil {
			return err
		}
	} else if err := w.idx.Clear(ctx, w.id); err != nil {
		return fmt.Errorf("index clear: %w", err)
	}
	// Fresh maps rather than clear(): a cleared map keeps its buckets, and
	// an engine that restarted may come back with a smaller cache.
	w.blocks = make(map[uint64]engineBlock)
	w.refs = make(map[uint64]seqRefs)
	w.entries = 0
	return nil
}

// removeOwnChunk bounds one Remove call of a scoped clear, so that a large
// worker does not become one huge index command (one Redis pipeline).
const removeOwnChunk = 4096

// removeOwn removes, tier by tier, every entry this Worker stored: the
// scoped form of Index.Clear (Config.ScopedClear).
func (w *Worker) removeOwn(ctx context.Context) error {
	var byTier [kvfleet.NumTiers][]kvindex.Block
	for seq, r := range w.refs {
		for t := range r.n {
			if r.n[t] > 0 {
				byTier[t] = append(byTier[t], kvindex.Block{Hash: seq, Seg: r.seg})
			}
		}
	}
	for t, hs := range byTier {
		for len(hs) > 0 {
			n := min(len(hs), removeOwnChunk)
			if err := w.idx.Remove(ctx, w.id, kvfleet.Tier(t), hs[:n]); err != nil {
				return fmt.Errorf("index remove (scoped clear, tier %v): %w", kvfleet.Tier(t), err)
			}
			hs = hs[n:]
		}
	}
	return nil
}

// SeqOf returns the identity of an engine block hash this Worker holds on
// some tier (the other stream's Config.ParentSeq).
func (w *Worker) SeqOf(engineHash uint64) (BlockIdentity, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b, ok := w.blocks[engineHash]
	return b.BlockIdentity, ok
}

func (w *Worker) allowed(t kvfleet.Tier) bool {
	return w.cfg.Tiers == 0 || w.cfg.Tiers&(1<<t) != 0
}

func (w *Worker) reject(r RejectReason, ev *kvevents.Event, detail string) {
	n := w.rejected[r].Add(1)
	// The 1st, 2nd, 4th, 8th… of each reason at Warn for the reasons that
	// mean the fleet and kvgate disagree; the rest at Debug.
	level := slog.LevelDebug
	if r.surprising() && n&(n-1) == 0 {
		level = slog.LevelWarn
	}
	slog.Log(context.Background(), level, "kv event rejected", "worker", w.id.String(), "kind", ev.Kind.String(), "reason", r.String(), "detail", detail, "count", n)
}

// mainGroup reports whether ev belongs to a KV-cache group kvgate indexes:
// for hybrid models (vLLM PR #37688) every group publishes the same engine
// hashes, and Dynamo indexes only the main attention group, identified by
// kv_cache_spec_kind, else group 0 (ai-dynamo/dynamo PR #12189;
// zmq_wire/filter.rs KvCacheSpecKind::is_main_attention: full_attention,
// mla_attention, sink_full_attention; an unknown kind is non-main).
func (w *Worker) mainGroup(ev *kvevents.Event) bool {
	if ev.SpecKind != "" {
		main := isMainAttention(ev.SpecKind)
		if ev.HasGroupIdx {
			if _, ok := w.groupMain[ev.GroupIdx]; ok || len(w.groupMain) < maxGroups {
				w.groupMain[ev.GroupIdx] = main
			}
		}
		return main
	}
	if !ev.HasGroupIdx {
		return true // no hybrid metadata: a single-group engine
	}
	if main, ok := w.groupMain[ev.GroupIdx]; ok {
		return main
	}
	return ev.GroupIdx == 0
}

func isMainAttention(kind string) bool {
	switch kind {
	case "full_attention", "mla_attention", "sink_full_attention":
		return true
	}
	return false
}

// local reports whether ev describes blocks held by the publishing worker:
// absent or LOCAL. REMOTE and values kvgate does not know fail closed, as
// Dynamo's convert_event does (zmq_wire/convert.rs: no shared-index
// consumer exists yet).
func local(ev *kvevents.Event) bool {
	return ev.Locality == "" || strings.EqualFold(ev.Locality, "LOCAL")
}

// screen applies the rules common to stores and removals; false: rejected.
func (w *Worker) screen(ev *kvevents.Event) bool {
	if !local(ev) {
		w.reject(RejectNonLocal, ev, fmt.Sprintf("locality %q", ev.Locality))
		return false
	}
	if !w.mainGroup(ev) {
		w.reject(RejectNonMainGroup, ev, fmt.Sprintf("group_idx %d, kv_cache_spec_kind %q", ev.GroupIdx, ev.SpecKind))
		return false
	}
	return true
}

func (w *Worker) stored(ctx context.Context, ev *kvevents.Event) error {
	// vLLM's OffloadingConnector announces CPU/STORAGE copies as
	// placeholders without tokens (block_size 0) unless
	// self_describing_kv_events is on (vllm#43468): nothing to hash.
	if len(ev.TokenIDs) == 0 {
		w.reject(RejectOffloadPlaceholder, ev, fmt.Sprintf("medium %q, block_size %d, %d hashes, no token_ids", ev.Medium, ev.BlockSize, len(ev.BlockHashes)))
		return nil
	}
	if !w.screen(ev) {
		return nil
	}
	if ev.BlockSize != w.cfg.BlockSize {
		w.reject(RejectBlockSize, ev, fmt.Sprintf("event block size %d, configured %d", ev.BlockSize, w.cfg.BlockSize))
		return nil
	}
	// vLLM only publishes full blocks, one engine hash per block.
	if len(ev.TokenIDs) != len(ev.BlockHashes)*ev.BlockSize {
		w.reject(RejectTokenCount, ev, fmt.Sprintf("%d tokens for %d blocks of %d", len(ev.TokenIDs), len(ev.BlockHashes), ev.BlockSize))
		return nil
	}
	tier, err := kvfleet.TierFromMedium(ev.Medium)
	if err != nil {
		w.reject(RejectUnknownMedium, ev, err.Error())
		return nil
	}
	if !w.allowed(tier) {
		w.reject(RejectTierNotAllowed, ev, fmt.Sprintf("medium %q (tier %v)", ev.Medium, tier))
		return nil
	}
	if ev.HasLoRAID && ev.LoRAID != 0 && ev.LoRAName == "" {
		w.reject(RejectLoRAWithoutName, ev, fmt.Sprintf("lora_id %d", ev.LoRAID))
		return nil
	}
	var parent *uint64
	var prev BlockIdentity // the parent, then each block in turn
	nsSalt := blockhash.NamespaceSalt(w.cfg.Namespace)
	if ev.HasParent {
		p, ok := w.blocks[ev.ParentHash]
		if !ok && w.cfg.ParentSeq != nil {
			p.BlockIdentity, ok = w.cfg.ParentSeq(ev.ParentHash)
		}
		switch {
		case ok:
			parent, prev = &p.Seq, p.BlockIdentity
			nsSalt = p.NSSalt
		case ev.ParentHash == 0:
			// llm-d-inference-sim writes 0 for "no parent" in the array
			// encoding (always 0 before llm-d/llm-d-inference-sim#570);
			// vLLM writes None. A real engine hash of 0 would be found
			// above, so only an unknown 0 starts a sequence.
		default:
			w.reject(RejectUnknownParent, ev, fmt.Sprintf("parent %#x", ev.ParentHash))
			return nil
		}
	}
	if ev.CacheSalt != "" {
		nsSalt = blockhash.NamespaceSalt(ev.CacheSalt)
	}
	newHashes := 0
	for _, h := range ev.BlockHashes {
		if _, ok := w.blocks[h]; !ok {
			newHashes++
		}
	}
	if len(w.blocks)+newHashes > w.cfg.MaxBlocks {
		w.reject(RejectCapacity, ev, fmt.Sprintf("%d tracked + %d new > %d", len(w.blocks), newHashes, w.cfg.MaxBlocks))
		return nil
	}
	seed := blockhash.BaseSeed + blockhash.LoRASalt(ev.LoRAName) + nsSalt
	seqs := blockhash.ContinueSequence(parent, blockhash.LocalHashes(ev.TokenIDs, ev.BlockSize, seed))
	add := w.scratch[:0]
	for i, h := range ev.BlockHashes {
		id := firstBlock(seqs[i], nsSalt)
		if i > 0 || parent != nil {
			id = prev.next(seqs[i])
			id.NSSalt = nsSalt // an event's cache_salt overrides its parent's
		}
		prev = id
		b, ok := w.blocks[h]
		if ok && b.Seq != seqs[i] {
			// The engine reused an id for other content (its hashes are
			// opaque to us). Retire the old identity on every tier first.
			w.conflicts.Add(1)
			if err := w.dropAll(ctx, h, b); err != nil {
				return err
			}
			b = engineBlock{}
		}
		b.BlockIdentity = id
		if b.refs[tier] == math.MaxUint16 {
			// 65,535 live announcements of one hash: count no further (a
			// removal then leaves the block held, never drops it early).
			w.refSaturated.Add(1)
			continue
		}
		b.refs[tier]++
		w.blocks[h] = b
		if b.refs[tier] > 1 {
			continue // another announcement of a block already held there
		}
		r := w.refs[b.Seq]
		r.n[tier]++
		r.seg = b.Seg
		w.refs[b.Seq] = r
		if r.n[tier] == 1 {
			w.entries++
			add = append(add, b.block())
		}
		w.blocksStored.Add(1)
	}
	w.scratch = add
	w.storedEv.Add(1)
	if len(add) == 0 {
		return nil
	}
	if err := w.idx.Store(ctx, w.id, tier, add); err != nil {
		return fmt.Errorf("index store: %w", err)
	}
	return nil
}

func (w *Worker) removed(ctx context.Context, ev *kvevents.Event) error {
	tier, err := kvfleet.TierFromMedium(ev.Medium)
	if err != nil {
		w.reject(RejectUnknownMedium, ev, err.Error())
		return nil
	}
	if !w.allowed(tier) {
		w.reject(RejectTierNotAllowed, ev, fmt.Sprintf("medium %q (tier %v)", ev.Medium, tier))
		return nil
	}
	if !w.screen(ev) {
		return nil
	}
	drop := w.scratch[:0]
	for _, h := range ev.BlockHashes {
		b, ok := w.blocks[h]
		if !ok || b.refs[tier] == 0 {
			w.removedUnknown.Add(1)
			continue
		}
		if b.refs[tier] == math.MaxUint16 {
			continue // saturated: held for good (see stored)
		}
		b.refs[tier]--
		w.setOrDelete(h, b)
		if b.refs[tier] > 0 {
			continue // still announced by another copy
		}
		if w.unref(b.Seq, tier) {
			drop = append(drop, b.block())
		}
		w.blocksRemoved.Add(1)
	}
	w.scratch = drop
	w.removedEv.Add(1)
	if len(drop) == 0 {
		return nil
	}
	if err := w.idx.Remove(ctx, w.id, tier, drop); err != nil {
		return fmt.Errorf("index remove: %w", err)
	}
	return nil
}

// dropAll retires engine hash h (held as b) from every tier.
func (w *Worker) dropAll(ctx context.Context, h uint64, b engineBlock) error {
	delete(w.blocks, h)
	for t := kvfleet.Tier(0); t < kvfleet.NumTiers; t++ {
		if b.refs[t] == 0 {
			continue
		}
		if w.unref(b.Seq, t) {
			if err := w.idx.Remove(ctx, w.id, t, []kvindex.Block{b.block()}); err != nil {
				return fmt.Errorf("index remove: %w", err)
			}
		}
	}
	return nil
}

// unref drops one holder of (seq, tier) and reports whether it was the last.
func (w *Worker) unref(seq uint64, t kvfleet.Tier) bool {
	r := w.refs[seq]
	r.n[t]--
	if r.n == ([kvfleet.NumTiers]uint32{}) {
		delete(w.refs, seq)
	} else {
		w.refs[seq] = r
	}
	if r.n[t] == 0 {
		w.entries--
		return true
	}
	return false
}

func (w *Worker) setOrDelete(h uint64, b engineBlock) {
	if !b.held() {
		delete(w.blocks, h)
	} else {
		w.blocks[h] = b
	}
}

func (w *Worker) publishSizes() {
	w.engineHashes.Store(int64(len(w.blocks)))
	w.seqEntries.Store(w.entries)
}

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() Stats {
	s := Stats{
		Batches:         w.batches.Load(),
		StoredEvents:    w.storedEv.Load(),
		RemovedEvents:   w.removedEv.Load(),
		ClearedEvents:   w.clearedEv.Load(),
		BlocksStored:    w.blocksStored.Load(),
		BlocksRemoved:   w.blocksRemoved.Load(),
		RemovedUnknown:  w.removedUnknown.Load(),
		HashConflicts:   w.conflicts.Load(),
		RefSaturated:    w.refSaturated.Load(),
		Resets:          w.resets.Load(),
		EngineHashes:    w.engineHashes.Load(),
		SequenceEntries: w.seqEntries.Load(),
	}
	for i := range s.Rejected {
		s.Rejected[i] = w.rejected[i].Load()
	}
	if r := w.brokenReason.Load(); r != nil {
		s.NeedsResetReason = *r
	}
	return s
}
