package enginesim

import (
	"time"

	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/kvevents"
)

// The scheduler follows vLLM v1's (vllm/v1/core/sched/scheduler.py) in the
// parts a router can observe:
//
//   - one token budget per step (MaxNumBatchedTokens) shared by running
//     sequences first, in admission order, then by waiting ones, FCFS;
//   - chunked prefill: a prompt larger than the budget left is computed
//     over several steps; a token is sampled only when every known token
//     of the sequence is computed;
//   - when a running sequence cannot get a block, the lowest-priority
//     running sequence (the last admitted) is preempted: its blocks are
//     freed and it goes back to the front of the waiting queue, to be
//     recomputed (with whatever prefix is still cached); no waiting
//     request is admitted in a step that preempted;
//   - a waiting request is admitted only if all the blocks its first chunk
//     needs are available; otherwise admission stops (FCFS, no skipping).

// seq is one request inside the engine.
type seq struct {
	req  Request
	seed uint64
	// hashes are the sequence hashes of the full blocks known so far: the
	// prompt's, computed at Submit, then each block filled by output
	// tokens as it is computed.
	hashes      []uint64
	blocks      []int32 // block table
	registered  int     // leading blocks of the table already registered
	numTokens   int     // prompt + generated
	numComputed int     // tokens whose KV is computed
	generated   int

	cachedTokens              int // at first admission; -1 before
	firstTokenAt, lastTokenAt time.Duration
	maxITL                    time.Duration
	preemptions               int
	outSalt                   uint64

	running, aborted bool
	transferUsed     bool // KVTransferred applied (a recompute after preemption computes locally)
	scheduled        int  // tokens in the step in flight
	decodeStep       bool // the step in flight computes one decode token
}

// token is the token at position pos of the sequence.
func (e *Engine) token(s *seq, pos int) uint32 {
	if pos < len(s.req.Tokens) {
		return s.req.Tokens[pos]
	}
	j := pos - len(s.req.Tokens)
	if e.cfg.OutputToken != nil {
		return e.cfg.OutputToken(j)
	}
	return uint32(mix64(s.outSalt + uint64(j)))
}

func (s *seq) output(now time.Duration) Output {
	return Output{
		ID:           s.req.ID,
		Arrival:      s.req.Arrival,
		FirstTokenAt: s.firstTokenAt,
		PromptTokens: len(s.req.Tokens),
		CachedTokens: max(s.cachedTokens, 0),
		OutputTokens: s.generated,
		MaxITL:       s.maxITL,
		Preemptions:  s.preemptions,
	}
}

// startStep fixes the batch of the step starting at start and its
// duration. It returns false, starting nothing, when nothing can run (only
// possible while released-later blocks are held).
func (e *Engine) startStep(start time.Duration) bool {
	bs := e.cfg.BlockSize
	e.batch = e.batch[:0]
	budget := e.cfg.MaxNumBatchedTokens
	prefillTokens, decoding, preempted := 0, false, false

	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := min(s.numTokens-s.numComputed, budget)
		scheduled := true
		for !e.ensureBlocks(s, s.numComputed+n) {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == s {
				scheduled = false
				break
			}
		}
		if !scheduled {
			break
		}
		s.scheduled, s.decodeStep = n, s.generated > 0 && n == 1 && s.numTokens-s.numComputed == 1
		e.batch = append(e.batch, s)
		budget -= n
	}

	for !preempted && len(e.waiting) > 0 && len(e.running) < e.cfg.MaxNumSeqs && budget > 0 {
		s := e.waiting[0]
		if s.req.Arrival > start {
			break
		}
		hit := e.prefixHit(s)
		transfer := s.req.KVTransferred && !s.transferUsed
		ext := 0 // blocks beyond the GPU hit that the KV tier holds
		if !transfer {
			ext = e.tierLookup(s, hit)
		}
		computed := (hit + ext) * bs
		n := min(s.numTokens-computed, budget)
		if transfer {
			// The remote engine computed the prompt; only its last token
			// is computed here, to sample from.
			computed, n = s.numTokens-1, 1
		}
		take := blocksFor(computed+n, bs) - hit
		for _, b := range s.hashes[:hit] {
			if blk, _ := e.pool.lookup(b); e.pool.blocks[blk].ref == 0 {
				take++ // a cached block in the free queue is taken off it
			}
		}
		if take > e.pool.free {
			break
		}
		if ext > 0 {
			// Fewer blocks onboarded than looked up (evicted meanwhile, a
			// failed copy) are computed instead; computed+n cannot grow,
			// so the blocks counted in take still suffice.
			if got := e.tierOnboard(s, hit, ext); got < ext {
				ext = got
				computed = (hit + ext) * bs
				n = min(s.numTokens-computed, budget)
			}
		}
		e.waiting = e.waiting[1:]
		for _, h := range s.hashes[:hit] {
			blk, _ := e.pool.lookup(h)
			e.pool.acquire(blk)
			s.blocks = append(s.blocks, blk)
		}
		s.registered, s.numComputed = hit, computed
		e.st.PrefixQueryTokens += uint64(s.numTokens)
		e.st.PrefixHitTokens += uint64(hit * bs)
		if s.cachedTokens < 0 {
			// vLLM's num_cached_tokens counts local and external
			// (connector) hits alike.
			s.cachedTokens = (hit + ext) * bs
			e.st.PromptTokens += uint64(len(s.req.Tokens))
		}
		e.ensureBlocks(s, computed+n) // cannot fail: checked above
		s.transferUsed = s.transferUsed || transfer
		s.running = true
		e.running = append(e.running, s)
		s.scheduled = n
		s.decodeStep = transfer || (s.generated > 0 && n == 1 && s.numTokens-s.numComputed == 1)
		e.batch = append(e.batch, s)
		budget -= n
	}

	e.tierFlush()
	if len(e.batch) == 0 {
		return false
	}
	for _, s := range e.batch {
		if s.decodeStep {
			decoding = true
		} else {
			prefillTokens += s.scheduled
		}
	}
	p := float64(e.pool.used()) / float64(e.cfg.NumGPUBlocks)
	d := StepDuration(prefillTokens, decoding, p, e.cfg.SpeedUp) + e.tierCopyTime()
	e.inFlight, e.stepStart, e.stepEnd = true, start, start+d
	e.st.Steps++
	e.st.BusyTime += d
	return true
}

// prefixHit is how many leading full blocks of s are cached, capped so
// that at least one token is computed (vLLM computes the last prompt token
// even on a full hit, to sample from it).
func (e *Engine) prefixHit(s *seq) int {
	limit := min(len(s.hashes), (s.numTokens-1)/e.cfg.BlockSize)
	n := 0
	for n < limit {
		if _, ok := e.pool.lookup(s.hashes[n]); !ok {
			break
		}
		n++
	}
	return n
}

// ensureBlocks grows s's block table to hold tokens tokens. false, taking
// nothing, when the free queue is too short.
func (e *Engine) ensureBlocks(s *seq, tokens int) bool {
	need := blocksFor(tokens, e.cfg.BlockSize) - len(s.blocks)
	if need <= 0 {
		return true
	}
	if need > e.pool.free {
		return false
	}
	for ; need > 0; need-- {
		b, h, evicted := e.pool.allocate()
		if evicted {
			e.st.EvictedBlocks++
			e.emitRemoved(h)
			e.tierEvicted(h)
		}
		s.blocks = append(s.blocks, b)
	}
	return true
}

func (e *Engine) preempt(s *seq) {
	e.freeBlocks(s)
	s.numComputed, s.registered, s.running = 0, 0, false
	s.preemptions++
	e.st.Preemptions++
	e.waiting = append(e.waiting, nil)
	copy(e.waiting[1:], e.waiting)
	e.waiting[0] = s
}

// freeBlocks releases s's blocks last first, so that a sequence's tail is
// evicted before its head (vLLM frees in reverse order for that reason).
func (e *Engine) freeBlocks(s *seq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		e.pool.release(s.blocks[i])
	}
	s.blocks = s.blocks[:0]
}

// finishStep applies the step in flight: computed tokens, registered
// blocks, sampled tokens, finished requests, and publishes its events.
func (e *Engine) finishStep() {
	end := e.stepEnd
	e.now, e.inFlight = end, false
	finished := false
	for _, s := range e.batch {
		if s.aborted {
			continue
		}
		s.numComputed += s.scheduled
		s.scheduled = 0
		e.registerFull(s)
		if s.numComputed < s.numTokens {
			continue // a prefill chunk: nothing sampled
		}
		s.generated++
		s.numTokens++
		e.st.GenerationTokens++
		if s.generated == 1 {
			s.firstTokenAt = end
			e.out = append(e.out, s.output(end))
		} else {
			s.maxITL = max(s.maxITL, end-s.lastTokenAt)
		}
		s.lastTokenAt = end
		if s.generated >= s.req.MaxTokens {
			e.finish(s, end)
			finished = true
		}
	}
	if finished {
		kept := e.running[:0]
		for _, s := range e.running {
			if s.running {
				kept = append(kept, s)
			}
		}
		clear(e.running[len(kept):])
		e.running = kept
	}
	clear(e.batch)
	e.batch = e.batch[:0]
	if len(e.events) > 0 {
		evs := e.events
		e.events = nil // handed over: the callee may keep them
		if e.onEvents != nil {
			e.onEvents(evs)
		}
	}
}

func (e *Engine) finish(s *seq, end time.Duration) {
	s.running = false
	delete(e.seqs, s.req.ID)
	e.st.Finished++
	o := s.output(end)
	o.Done, o.FinishedAt = true, end
	if s.req.HoldBlocks {
		o.BlockIDs = make([]int, len(s.blocks))
		for i, b := range s.blocks {
			o.BlockIDs[i] = int(b)
		}
		e.held[s.req.ID] = s
	} else {
		e.freeBlocks(s)
	}
	e.out = append(e.out, o)
}

// registerFull registers the blocks of s that became full of computed
// tokens. A block whose hash another sequence registered meanwhile (both
// computed the same prefix) is swapped for the registered copy, so that
// every cached hash has exactly one block and every referenced full block
// is registered: the published events then describe the cache exactly.
func (e *Engine) registerFull(s *seq) {
	bs := e.cfg.BlockSize
	full := s.numComputed / bs
	run := -1 // first block of the current run of newly registered blocks
	for b := s.registered; b < full; b++ {
		if b == len(s.hashes) {
			s.hashes = append(s.hashes, e.hashBlock(s, b))
		}
		h := s.hashes[b]
		if other, ok := e.pool.lookup(h); ok {
			e.pool.acquire(other)
			e.pool.release(s.blocks[b])
			s.blocks[b] = other
			if run >= 0 {
				e.emitStored(s, run, b)
				run = -1
			}
			continue
		}
		e.pool.register(s.blocks[b], h)
		e.tierRemember(s, b)
		if run < 0 {
			run = b
		}
	}
	if run >= 0 {
		e.emitStored(s, run, full)
	}
	s.registered = max(s.registered, full)
}

// hashBlock computes the sequence hash of block b of s, which holds output
// tokens (prompt blocks are hashed at Submit).
func (e *Engine) hashBlock(s *seq, b int) uint64 {
	bs := e.cfg.BlockSize
	for i := range e.scratch {
		e.scratch[i] = e.token(s, b*bs+i)
	}
	local := blockhash.LocalHashes(e.scratch, bs, s.seed)[0]
	if b == 0 {
		return local
	}
	return blockhash.Chain(s.hashes[b-1], local)
}

// emitStored publishes blocks [from, to) of s as one BlockStored, with the
// previous block as parent, as vLLM's cache_full_blocks does.
func (e *Engine) emitStored(s *seq, from, to int) {
	if e.onEvents == nil {
		return
	}
	bs := e.cfg.BlockSize
	ev := kvevents.Event{Kind: kvevents.BlockStored, BlockSize: bs, LoRAName: s.req.LoRA}
	ev.BlockHashes = make([]uint64, to-from)
	for i := range ev.BlockHashes {
		ev.BlockHashes[i] = engineHash(s.hashes[from+i])
	}
	if from > 0 {
		ev.ParentHash, ev.HasParent = engineHash(s.hashes[from-1]), true
	} else {
		// vLLM announces the salt with the block that starts at token 0
		// only (kv_cache_utils.generate_block_hash_extra_keys).
		ev.CacheSalt = s.req.CacheSalt
	}
	lo, hi := from*bs, to*bs
	if hi <= len(s.req.Tokens) {
		ev.TokenIDs = s.req.Tokens[lo:hi:hi]
	} else {
		ev.TokenIDs = make([]uint32, hi-lo)
		for i := range ev.TokenIDs {
			ev.TokenIDs[i] = e.token(s, lo+i)
		}
	}
	e.events = append(e.events, ev)
}

func (e *Engine) emitRemoved(h uint64) {
	if e.onEvents == nil {
		return
	}
	if n := len(e.events); n > 0 && e.events[n-1].Kind == kvevents.BlockRemoved {
		e.events[n-1].BlockHashes = append(e.events[n-1].BlockHashes, engineHash(h))
		return
	}
	e.events = append(e.events, kvevents.Event{Kind: kvevents.BlockRemoved, BlockHashes: []uint64{engineHash(h)}})
}
