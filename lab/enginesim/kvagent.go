package enginesim

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/kvagent/connector"
)

// KVAgentTier is a KVTier backed by a kvgate kvagent through its engine
// connector (kvagent/connector): offloads write filler KV into reserved
// arena slots and commit them; onboards acquire, read (and check) and
// release slots. The filler is derived from the block hash, so a block
// read back with other bytes is caught and counted.
type KVAgentTier struct {
	c       *connector.Client
	model   string
	timeout time.Duration
	log     *slog.Logger

	mu      sync.Mutex // guards scratch (engines sharing one tier)
	scratch []byte

	offloadFailures, onboardFailures, corruptReads atomic.Uint64
}

// NewKVAgentTier uses c for blocks of model (the kvagent namespace is the
// model name, plus "/<lora>" for adapters). timeout bounds each call; a
// call that fails costs the engine a recompute, never a stall.
func NewKVAgentTier(c *connector.Client, model string, timeout time.Duration, log *slog.Logger) *KVAgentTier {
	if timeout <= 0 {
		timeout = time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	return &KVAgentTier{c: c, model: model, timeout: timeout, log: log, scratch: make([]byte, c.BlockBytes())}
}

func (k *KVAgentTier) namespace(lora string) string {
	if lora == "" {
		return k.model
	}
	return k.model + "/" + lora
}

// BlockBytes is the kvagent's block size.
func (k *KVAgentTier) BlockBytes() int { return k.c.BlockBytes() }

// Failures reports failed offloads, failed onboards and onboarded blocks
// whose bytes were not what was offloaded.
func (k *KVAgentTier) Failures() (offload, onboard, corrupt uint64) {
	return k.offloadFailures.Load(), k.onboardFailures.Load(), k.corruptReads.Load()
}

// fillBlock writes the deterministic filler of block hash h into dst.
func fillBlock(dst []byte, h uint64) {
	x := h
	for i := 0; i+8 <= len(dst); i += 8 {
		x = mix64(x)
		binary.LittleEndian.PutUint64(dst[i:], x)
	}
	for i := len(dst) &^ 7; i < len(dst); i++ {
		dst[i] = byte(h)
	}
}

// Offload groups blocks by namespace and offloads each group in chunks of
// the connector's chain limit.
func (k *KVAgentTier) Offload(blocks []TierBlock) {
	byNS := map[string][]TierBlock{}
	var order []string
	for _, b := range blocks {
		ns := k.namespace(b.LoRA)
		if _, ok := byNS[ns]; !ok {
			order = append(order, ns)
		}
		byNS[ns] = append(byNS[ns], b)
	}
	for _, ns := range order {
		bs := byNS[ns]
		for len(bs) > 0 {
			n := min(len(bs), k.c.MaxChain())
			k.offload(ns, bs[:n])
			bs = bs[n:]
		}
	}
}

func (k *KVAgentTier) offload(ns string, blocks []TierBlock) {
	ctx, cancel := context.WithTimeout(context.Background(), k.timeout)
	defer cancel()
	hashes := make([]uint64, len(blocks))
	for i, b := range blocks {
		hashes[i] = b.Hash
	}
	slots, err := k.c.Reserve(ctx, ns, hashes)
	if err != nil {
		// Every slot pinned: the engine drops the offload, as a real
		// connector must rather than wait.
		k.offloadFailures.Add(uint64(len(blocks)))
		k.log.Debug("kvagent offload: reserve failed", "blocks", len(blocks), "err", err)
		return
	}
	cb := make([]connector.Block, len(blocks))
	for i, b := range blocks {
		dst, err := k.c.Slot(slots[i])
		if err == nil {
			fillBlock(dst, b.Hash)
		}
		cb[i] = connector.Block{Hash: b.Hash, Parent: b.Parent, HasParent: b.HasParent, TokenIDs: b.TokenIDs, LoRAName: b.LoRA}
	}
	if err := k.c.Commit(ctx, ns, cb, slots); err != nil {
		k.offloadFailures.Add(uint64(len(blocks)))
		k.log.Warn("kvagent offload: commit failed", "blocks", len(blocks), "err", err)
		_ = k.c.Abort(context.Background(), slots)
	}
}

// Lookup asks the kvagent how much of chain it holds.
func (k *KVAgentTier) Lookup(lora string, chain []uint64) int {
	chain = chain[:min(len(chain), k.c.MaxChain())]
	ctx, cancel := context.WithTimeout(context.Background(), k.timeout)
	defer cancel()
	tiers, err := k.c.Lookup(ctx, k.namespace(lora), chain)
	if err != nil {
		k.log.Debug("kvagent lookup failed", "err", err)
		return 0
	}
	return len(tiers)
}

// Onboard acquires the chain's resident prefix, reads each block into GPU
// memory (here: checks it against its filler), and releases it.
func (k *KVAgentTier) Onboard(lora string, chain []uint64) int {
	chain = chain[:min(len(chain), k.c.MaxChain())]
	ctx, cancel := context.WithTimeout(context.Background(), k.timeout)
	defer cancel()
	slots, err := k.c.Acquire(ctx, k.namespace(lora), chain)
	if err != nil {
		k.onboardFailures.Add(1)
		k.log.Debug("kvagent onboard: acquire failed", "err", err)
		return 0
	}
	n := len(slots)
	k.mu.Lock()
	for i, s := range slots {
		src, err := k.c.Slot(s)
		if err != nil {
			n = i
			break
		}
		fillBlock(k.scratch, chain[i])
		if !bytes.Equal(src, k.scratch) {
			k.corruptReads.Add(1)
			n = i
			break
		}
	}
	k.mu.Unlock()
	if err := k.c.Release(context.Background(), slots); err != nil {
		k.log.Warn("kvagent onboard: release failed", "err", err)
	}
	return n
}
