package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/kv/kvevents"
)

// Tier is a storage tier of the kvagent.
type Tier uint8

const (
	TierHost Tier = 1 // host-memory arena (medium "CPU" in KV events)
	TierDisk Tier = 2 // local disk files (medium "DISK")
)

func (t Tier) String() string {
	switch t {
	case TierHost:
		return "host"
	case TierDisk:
		return "disk"
	}
	return fmt.Sprintf("Tier(%d)", uint8(t))
}

// Key identifies a block: Namespace is the model name plus any LoRA / cache
// salt ("model", "model/lora", ...); Hash is the engine's block hash
// (sequence hash: it already covers the whole prefix).
type Key struct {
	Namespace string
	Hash      uint64
}

// Meta travels with a block (persisted on disk with it) so that residency
// events can carry what vLLM's BlockStored carries: the indexer recomputes
// hashes from TokenIDs, so they must be exact.
type Meta struct {
	Parent    uint64 // engine hash of the previous block in the sequence
	HasParent bool
	TokenIDs  []uint32 // the block's tokens (len == tokens per block)
	LoRAName  string
}

func cloneMeta(m Meta) Meta {
	if m.TokenIDs != nil {
		m.TokenIDs = append([]uint32(nil), m.TokenIDs...)
	}
	return m
}

// Config configures a Store.
type Config struct {
	BlockBytes int    // bytes of KV per block (all tiers): layers × kv_heads × head_dim × 2 (K, V) × dtype bytes × tokens per block
	HostBlocks int    // host arena capacity in blocks (0 = no host tier)
	ShmPath    string // arena file; created/truncated at Open, removed at Close; default /dev/shm/kvgate-kvagent-<pid>
	DiskBlocks int    // disk capacity in blocks (0 = no disk tier)
	DiskDir    string
	DirectIO   string // "auto" (default: O_DIRECT if the filesystem takes it), "on", "off"
	AdmitAfter int    // disk admission: block must be seen this many times (default 2)
	DiskQueue  int    // pending disk writes (default 64); beyond it offloads to disk are dropped and counted
	Registerer prometheus.Registerer
	OnChange   func(Change) // residency changes, in order, never called while holding a lock Put/Get need
	Logger     *slog.Logger
}

// Change is one residency change. Kind is kv/kvevents' Kind. For
// BlockStored, Metas is parallel to Hashes. Callers must not modify the
// slices.
type Change struct {
	Kind      kvevents.Kind
	Tier      Tier
	Namespace string
	Hashes    []uint64
	Metas     []Meta
}

// Slot is the index of a host-arena slot: its bytes are
// [int(slot)*BlockBytes, +BlockBytes) of the shared-memory file.
type Slot int32

var (
	ErrNotFound   = errors.New("kvagent store: block not found")
	ErrCorrupt    = errors.New("kvagent store: block failed its checksum")
	ErrFull       = errors.New("kvagent store: host tier full: every slot is pinned or reserved")
	ErrClosed     = errors.New("kvagent store: closed")
	ErrNoHostTier = errors.New("kvagent store: no host tier configured (host_blocks is 0)")
)

type slotState uint8

const (
	slotFree     slotState = iota
	slotReserved           // handed out by Reserve (or being filled by Put / a promotion)
	slotResident           // holds e (which may be dead: dropped while pinned)
)

type hostSlot struct {
	state slotState
	e     *entry
}

// counters are indexed by Tier.
type counters struct {
	hits, offloadBytes, onboardBytes, evictions, dropped, corrupt [3]uint64
	misses, rejections                                            uint64
}

// Store is the kvagent's tiered block store. All methods are safe for
// concurrent use.
type Store struct {
	cfg   Config
	log   *slog.Logger
	arena *arena
	// diskFile is the disk tier's file (slots of header + block); diskIndex
	// is what it holds. Both nil without a disk tier.
	diskFile *diskFile

	hdrPool  sync.Pool // aligned header-region buffers
	dataPool sync.Pool // aligned block-sized buffers for unaligned O_DIRECT reads

	mu        sync.Mutex
	closed    bool
	inflight  sync.WaitGroup // operations touching the arena or the disk file outside mu
	clock     uint64         // logical time for LRU
	hostIndex *tierIndex     // what the arena holds; nil without a host tier
	hostSlots []hostSlot
	hostFree  []int32
	diskIndex *tierIndex // what diskFile holds; nil without a disk tier
	diskFree  []int32
	nextGen   uint64
	sketch    *frequencySketch
	pending   map[Key]bool // queued for a disk write
	queue     chan diskWrite
	bufFree   [][]byte
	bufCount  int
	writerEnd chan struct{}
	c         counters

	outbox     []Change
	delivering bool
	settled    *sync.Cond // broadcast when a disk write finishes or a delivery round ends (tests wait on it)

	collector prometheus.Collector
}

// Open creates the host arena, opens (or creates) the disk tier, recovers
// the disk index from its files and announces the recovered blocks.
func Open(cfg Config) (*Store, error) {
	if err := cfg.applyDefaults(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, log: cfg.Logger, pending: map[Key]bool{}}
	s.settled = sync.NewCond(&s.mu)
	s.sketch = newFrequencySketch(cfg.HostBlocks + cfg.DiskBlocks)
	s.hdrPool.New = func() any { return alignedBuffer(headerRegion) }
	s.dataPool.New = func() any { return alignedBuffer(cfg.BlockBytes) }
	if cfg.HostBlocks > 0 {
		a, err := openArena(cfg.ShmPath, cfg.BlockBytes, cfg.HostBlocks)
		if err != nil {
			return nil, err
		}
		s.arena = a
		s.hostIndex = newTierIndex(TierHost, cfg.HostBlocks)
		s.hostSlots = make([]hostSlot, cfg.HostBlocks)
		s.hostFree = make([]int32, 0, cfg.HostBlocks)
		for i := cfg.HostBlocks - 1; i >= 0; i-- {
			s.hostFree = append(s.hostFree, int32(i))
		}
	}
	if cfg.DiskBlocks > 0 {
		if err := s.openDisk(); err != nil {
			if s.arena != nil {
				s.arena.close()
			}
			return nil, err
		}
	}
	if cfg.Registerer != nil {
		s.collector = newCollector(s)
		if err := cfg.Registerer.Register(s.collector); err != nil {
			if s.queue != nil {
				close(s.queue)
				<-s.writerEnd
			}
			s.closeFiles()
			return nil, fmt.Errorf("kvagent store: register metrics: %w", err)
		}
	}
	s.flush()
	return s, nil
}

func (c *Config) applyDefaults() error {
	if c.BlockBytes <= 0 {
		return fmt.Errorf("kvagent store: block_bytes must be > 0, got %d", c.BlockBytes)
	}
	if c.HostBlocks < 0 || c.DiskBlocks < 0 {
		return fmt.Errorf("kvagent store: host_blocks (%d) and disk_blocks (%d) must be >= 0", c.HostBlocks, c.DiskBlocks)
	}
	if c.HostBlocks == 0 && c.DiskBlocks == 0 {
		return errors.New("kvagent store: no tier: host_blocks and disk_blocks are both 0")
	}
	if c.HostBlocks > 1<<30 || c.DiskBlocks > 1<<30 {
		return fmt.Errorf("kvagent store: host_blocks (%d) and disk_blocks (%d) must be < 2^30", c.HostBlocks, c.DiskBlocks)
	}
	if c.ShmPath == "" {
		c.ShmPath = fmt.Sprintf("/dev/shm/kvgate-kvagent-%d", os.Getpid())
	}
	if c.DiskBlocks > 0 && c.DiskDir == "" {
		return errors.New("kvagent store: disk_blocks > 0 needs a disk dir")
	}
	switch c.DirectIO {
	case "":
		c.DirectIO = "auto"
	case "auto", "on", "off":
	default:
		return fmt.Errorf("kvagent store: direct_io %q: want auto, on or off", c.DirectIO)
	}
	if c.AdmitAfter < 0 || c.DiskQueue < 0 {
		return fmt.Errorf("kvagent store: admit_after (%d) and disk_queue (%d) must be >= 0", c.AdmitAfter, c.DiskQueue)
	}
	if c.AdmitAfter == 0 {
		c.AdmitAfter = 2
	}
	if c.DiskQueue == 0 {
		c.DiskQueue = 64
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Close stops the disk writer (after draining its queue), drops the host
// arena and announces the removal of every host block.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.inflight.Wait()
	if s.queue != nil {
		close(s.queue)
		<-s.writerEnd
	}
	s.mu.Lock()
	if s.hostIndex != nil {
		for i := range s.hostSlots {
			if hs := s.hostSlots[i]; hs.state == slotResident && !hs.e.dead {
				s.hostIndex.remove(hs.e)
				s.announceLocked(kvevents.BlockRemoved, TierHost, hs.e.key, nil)
			}
			s.hostSlots[i] = hostSlot{}
		}
	}
	s.mu.Unlock()
	s.flush()
	if s.collector != nil {
		s.cfg.Registerer.Unregister(s.collector)
	}
	return s.closeFiles()
}

func (s *Store) closeFiles() error {
	var errs []error
	if s.arena != nil {
		errs = append(errs, s.arena.close())
	}
	if s.diskFile != nil {
		errs = append(errs, s.diskFile.close())
	}
	return errors.Join(errs...)
}

// ShmPath is the host arena's shared-memory file.
func (s *Store) ShmPath() string { return s.cfg.ShmPath }

// BlockBytes is the size of every block.
func (s *Store) BlockBytes() int { return s.cfg.BlockBytes }

// begin registers an operation that will touch the arena or disk file
// outside the lock; called with mu held.
func (s *Store) beginLocked() error {
	if s.closed {
		return ErrClosed
	}
	s.inflight.Add(1)
	return nil
}

func (s *Store) tick() uint64 {
	s.clock++
	return s.clock
}

// allocHostLocked returns a reserved host slot, evicting the least recently
// used leaf if no slot is free.
func (s *Store) allocHostLocked() (int32, bool) {
	if n := len(s.hostFree); n > 0 {
		i := s.hostFree[n-1]
		s.hostFree = s.hostFree[:n-1]
		s.hostSlots[i].state = slotReserved
		return i, true
	}
	v := s.hostIndex.victim()
	if v == nil {
		return -1, false
	}
	s.evictHostLocked(v)
	s.hostSlots[v.slot] = hostSlot{state: slotReserved}
	return v.slot, true
}

// evictHostLocked removes v from the host index; an admitted block that is
// not on disk yet is demoted (its bytes copied into the disk queue before
// the slot is reused).
func (s *Store) evictHostLocked(v *entry) {
	s.hostIndex.remove(v)
	s.c.evictions[TierHost]++
	s.announceLocked(kvevents.BlockRemoved, TierHost, v.key, nil)
	if s.diskIndex == nil || s.diskIndex.entries[v.key] != nil || s.pending[v.key] {
		return
	}
	if s.admittedLocked(v.key) {
		s.enqueueDiskLocked(v.key, v.meta, v.sum, s.arena.slot(v.slot))
	} else {
		s.c.rejections++
	}
}

func (s *Store) freeHostSlotLocked(i int32) {
	s.hostSlots[i] = hostSlot{}
	s.hostFree = append(s.hostFree, i)
}

// installHostLocked makes the reserved slot i resident as k. If k became
// resident meanwhile (two offloads or promotions of one block), i is freed
// and the existing entry returned: a hash names its content, so the bytes
// are the same.
func (s *Store) installHostLocked(k Key, m Meta, i int32, sum uint64) *entry {
	now := s.tick()
	if e := s.hostIndex.entries[k]; e != nil {
		s.freeHostSlotLocked(i)
		s.hostIndex.touch(e, now)
		return e
	}
	e := &entry{key: k, meta: m, slot: i, sum: sum, lastUse: now}
	s.hostSlots[i] = hostSlot{state: slotResident, e: e}
	s.hostIndex.insert(e)
	s.announceLocked(kvevents.BlockStored, TierHost, k, &e.meta)
	return e
}

// releaseHostLocked drops one pin of e.
func (s *Store) releaseHostLocked(e *entry) {
	s.hostIndex.unpin(e)
	if e.dead && e.pins == 0 {
		s.freeHostSlotLocked(e.slot)
	}
}

// dropHostLocked removes a corrupt block; its slot is freed once unpinned.
func (s *Store) dropHostLocked(e *entry) {
	if e.dead {
		return
	}
	s.hostIndex.remove(e)
	s.announceLocked(kvevents.BlockRemoved, TierHost, e.key, nil)
	e.dead = true
	if e.pins == 0 {
		s.freeHostSlotLocked(e.slot)
	}
}

func (s *Store) admittedLocked(k Key) bool {
	return s.sketch.estimate(k) >= s.cfg.AdmitAfter
}
