package enginesim

import (
	"math"
	"time"
)

// DefaultHostToGPUGBps is the default copy bandwidth of onboarded blocks.
const DefaultHostToGPUGBps = 25

// KVTier is a node-local KV tier below the GPU pool (kvgate's kvagent;
// KVAgentTier connects to one). The engine calls it synchronously: the
// tier's latency is not modelled, its bandwidth is (Config.HostToGPUGBps).
// Block hashes are the engine's own (the ids its KV events carry).
type KVTier interface {
	// Offload hands over blocks the GPU pool evicted, in eviction order.
	// Best effort: a block the tier cannot take is the tier's to count.
	Offload(blocks []TierBlock)
	// Lookup is how many leading blocks of chain the tier holds.
	Lookup(lora string, chain []uint64) int
	// Onboard copies the leading blocks of chain into GPU memory and
	// returns how many it copied (at most len(chain)).
	Onboard(lora string, chain []uint64) int
	// BlockBytes is the size of one block's KV, for the copy time.
	BlockBytes() int
}

// TierBlock is one offloaded block with what the tier's KV events need.
type TierBlock struct {
	Hash      uint64 // engine block hash
	Parent    uint64 // engine hash of the previous block
	HasParent bool
	TokenIDs  []uint32
	LoRA      string
}

// tierState is the engine's side of a KVTier.
type tierState struct {
	// blocks describes each registered GPU block by sequence hash, so that
	// an eviction can offload it with its tokens and parent.
	blocks    map[uint64]TierBlock
	pending   []TierBlock // evicted this step, offloaded at its end
	copyBytes int64       // onboarded this step
}

// tierRemember records block b of s (just registered) for a later offload.
func (e *Engine) tierRemember(s *seq, b int) {
	if e.cfg.KVTier == nil {
		return
	}
	if e.tier.blocks == nil {
		e.tier.blocks = make(map[uint64]TierBlock)
	}
	bs := e.cfg.BlockSize
	tb := TierBlock{Hash: engineHash(s.hashes[b]), LoRA: s.req.LoRA, TokenIDs: make([]uint32, bs)}
	if b > 0 {
		tb.Parent, tb.HasParent = engineHash(s.hashes[b-1]), true
	}
	for i := range tb.TokenIDs {
		tb.TokenIDs[i] = e.token(s, b*bs+i)
	}
	e.tier.blocks[s.hashes[b]] = tb
}

// tierEvicted queues the block of sequence hash h, just evicted, for offload.
func (e *Engine) tierEvicted(h uint64) {
	if e.cfg.KVTier == nil {
		return
	}
	if tb, ok := e.tier.blocks[h]; ok {
		delete(e.tier.blocks, h)
		e.tier.pending = append(e.tier.pending, tb)
	}
}

// tierFlush offloads the blocks evicted while the step was being planned.
func (e *Engine) tierFlush() {
	if len(e.tier.pending) == 0 {
		return
	}
	e.cfg.KVTier.Offload(e.tier.pending)
	e.st.TierOffloadedBlocks += uint64(len(e.tier.pending))
	e.tier.pending = e.tier.pending[:0]
}

// tierChain is the engine hashes of blocks [from, to) of s.
func tierChain(s *seq, from, to int) []uint64 {
	out := make([]uint64, to-from)
	for i := range out {
		out[i] = engineHash(s.hashes[from+i])
	}
	return out
}

// tierLookup is how many blocks after the GPU hit the tier holds, within
// the limit prefixHit keeps (the last prompt token is always computed).
func (e *Engine) tierLookup(s *seq, hit int) int {
	if e.cfg.KVTier == nil {
		return 0
	}
	limit := min(len(s.hashes), (s.numTokens-1)/e.cfg.BlockSize)
	if hit >= limit {
		return 0
	}
	return min(max(e.cfg.KVTier.Lookup(s.req.LoRA, tierChain(s, hit, limit)), 0), limit-hit)
}

// tierOnboard copies n blocks after the GPU hit from the tier and charges
// their bytes to the step; it returns how many were copied.
func (e *Engine) tierOnboard(s *seq, hit, n int) int {
	got := min(max(e.cfg.KVTier.Onboard(s.req.LoRA, tierChain(s, hit, hit+n)), 0), n)
	e.tier.copyBytes += int64(got) * int64(e.cfg.KVTier.BlockBytes())
	e.st.TierOnboardedBlocks += uint64(got)
	e.st.TierHitTokens += uint64(got * e.cfg.BlockSize)
	return got
}

// tierCopyTime is the host→GPU copy time of this step's onboarded bytes
// (divided by the speed-up like every step time), and resets the count.
// The copy is charged in series with the step's compute: vLLM's connector
// loads layer by layer overlapped with the forward pass, so this errs on
// the slow side, as StepDuration does for mixed batches.
func (e *Engine) tierCopyTime() time.Duration {
	b := e.tier.copyBytes
	e.tier.copyBytes = 0
	if b == 0 {
		return 0
	}
	sec := float64(b) / (e.cfg.HostToGPUGBps * 1e9) / e.cfg.SpeedUp
	return time.Duration(math.Round(sec * float64(time.Second)))
}
