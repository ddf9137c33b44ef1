package enginesim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kvagent/residency"
	"github.com/kvgate/kvgate/kvagent/store"
)

// StoreTier is a KVTier run in process on kvagent's own block store
// (kvagent/store): the node-local host tier of one engine with kvagent's
// policies (leaf-first eviction over the prefix lineage, its admission
// sketch), its residency changes published as KV events through
// kvagent/residency, medium "CPU", as the kvagent publishes them. It lets a
// virtual-time replay (lab/replay) measure what a host tier adds without a
// kvagent process.
//
// The arena holds a few filler bytes per block: the replay needs
// residency, not KV bytes. The copy time of an onboard is charged for
// CopyBlockBytes per block at the engine's HostToGPUGBps.
type StoreTier struct {
	st        *store.Store
	copyBytes int
	onEvents  func([]kvevents.Event)
	changes   []store.Change
	filler    []byte
	err       error
}

// StoreTierConfig sizes a StoreTier.
type StoreTierConfig struct {
	HostBlocks     int // host capacity in blocks, ≥ 1
	CopyBlockBytes int // KV bytes of one block, for the host→GPU copy time, ≥ 1
	// Dir holds the (small) arena file; default os.TempDir().
	Dir string
}

// arenaBytes is the filler stored per block.
const arenaBytes = 8

var storeTierSeq atomic.Uint64

// NewStoreTier opens a host tier; onEvents receives its KV events (the
// engine's own events go elsewhere; a replay feeds both to one indexer
// stream, as a kvagent and its engine publish for one worker). Close it.
func NewStoreTier(cfg StoreTierConfig, onEvents func([]kvevents.Event)) (*StoreTier, error) {
	if cfg.HostBlocks < 1 || cfg.HostBlocks > 1<<30 {
		return nil, fmt.Errorf("enginesim: host tier of %d blocks outside [1, 2^30]", cfg.HostBlocks)
	}
	if cfg.CopyBlockBytes < 1 || cfg.CopyBlockBytes > 1<<34 {
		return nil, fmt.Errorf("enginesim: host tier block of %d bytes outside [1, 2^34]", cfg.CopyBlockBytes)
	}
	dir := cfg.Dir
	if dir == "" {
		dir = os.TempDir()
	}
	t := &StoreTier{copyBytes: cfg.CopyBlockBytes, onEvents: onEvents, filler: make([]byte, arenaBytes)}
	st, err := store.Open(store.Config{
		BlockBytes: arenaBytes, HostBlocks: cfg.HostBlocks,
		ShmPath:  filepath.Join(dir, fmt.Sprintf("kvgate-replay-tier-%d-%d", os.Getpid(), storeTierSeq.Add(1))),
		OnChange: func(c store.Change) { t.changes = append(t.changes, c) },
	})
	if err != nil {
		return nil, fmt.Errorf("enginesim: host tier: %w", err)
	}
	t.st = st
	return t, nil
}

// Err is the first error the tier met (a failed put or an event that
// could not be converted); the tier keeps serving what it can.
func (t *StoreTier) Err() error { return t.err }

// Close drops the arena.
func (t *StoreTier) Close() error {
	err := t.st.Close()
	t.changes = t.changes[:0] // the removals of a closing tier go nowhere
	return err
}

func (t *StoreTier) fail(err error) {
	if t.err == nil && err != nil {
		t.err = err
	}
}

// publish delivers the changes the last call made, as KV events.
func (t *StoreTier) publish() {
	if len(t.changes) == 0 {
		return
	}
	evs, err := residency.Events(t.changes)
	t.fail(err)
	t.changes = t.changes[:0]
	if len(evs) > 0 && t.onEvents != nil {
		t.onEvents(evs)
	}
}

// Offload implements KVTier: each evicted block is put in the host tier
// (the store evicts leaf-first to make room).
func (t *StoreTier) Offload(blocks []TierBlock) {
	for _, b := range blocks {
		err := t.st.Put(store.Key{Namespace: b.LoRA, Hash: b.Hash}, store.Meta{Parent: b.Parent, HasParent: b.HasParent, TokenIDs: b.TokenIDs, LoRAName: b.LoRA}, t.filler)
		if err != nil && !errors.Is(err, store.ErrFull) {
			t.fail(err)
		}
	}
	t.publish()
}

// Lookup implements KVTier: the leading blocks of chain in host memory.
func (t *StoreTier) Lookup(lora string, chain []uint64) int {
	n := 0
	for _, tier := range t.st.Lookup(lora, chain) {
		if tier != store.TierHost {
			break
		}
		n++
	}
	return n
}

// Onboard implements KVTier: pin, "copy" and release the resident prefix.
func (t *StoreTier) Onboard(lora string, chain []uint64) int {
	slots, err := t.st.Acquire(lora, chain)
	if err != nil {
		t.fail(err)
		return 0
	}
	t.st.Release(slots)
	t.publish()
	return len(slots)
}

// BlockBytes implements KVTier: the KV bytes one onboarded block copies.
func (t *StoreTier) BlockBytes() int { return t.copyBytes }
