// Package index is the fleet KV index: which worker holds which block
// (identified by its Dynamo sequence hash), on which storage tier.
//
// Two backends implement Index: Memory (embedded default) and Redis
// (standalone or Cluster, shared by several extproc replicas). A property
// test drives both with the same random event streams and requires
// identical Match results.
package index

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Tier is where a cached block lives. Lower is faster.
type Tier uint8

const (
	TierDevice   Tier = iota // GPU memory
	TierHost                 // CPU / pinned host memory
	TierDisk                 // local NVMe, disk
	TierExternal             // remote or shared storage
	NumTiers
)

func (t Tier) String() string {
	switch t {
	case TierDevice:
		return "device"
	case TierHost:
		return "host"
	case TierDisk:
		return "disk"
	case TierExternal:
		return "external"
	}
	return "tier" + strconv.Itoa(int(t))
}

// TierFromMedium maps a KV event's `medium` to a tier, as Dynamo's
// StorageTier::from_kv_medium does. Unknown media are reported as errors so
// that the caller can count and drop the event rather than guess.
func TierFromMedium(medium string) (Tier, error) {
	switch strings.ToUpper(medium) {
	case "", "GPU", "DEVICE":
		return TierDevice, nil
	case "CPU", "CPU_PINNED", "CPU_TIER1":
		return TierHost, nil
	case "CPU_TIER2", "DISK", "NVME", "STORAGE":
		return TierDisk, nil
	case "EXTERNAL", "NETWORK", "REMOTE", "SHARED":
		return TierExternal, nil
	}
	return 0, fmt.Errorf("unknown KV medium %q", medium)
}

// WorkerID names one engine instance: its HTTP endpoint (host:port, what
// the router sends requests to) and its data-parallel rank.
type WorkerID struct {
	Endpoint string
	DPRank   int
}

func (w WorkerID) String() string {
	return w.Endpoint + "#" + strconv.Itoa(w.DPRank)
}

// ParseWorkerID is the inverse of WorkerID.String.
func ParseWorkerID(s string) (WorkerID, error) {
	i := strings.LastIndexByte(s, '#')
	if i <= 0 {
		return WorkerID{}, fmt.Errorf("worker id %q: want endpoint#rank", s)
	}
	r, err := strconv.Atoi(s[i+1:])
	if err != nil || r < 0 {
		return WorkerID{}, fmt.Errorf("worker id %q: bad rank", s)
	}
	return WorkerID{Endpoint: s[:i], DPRank: r}, nil
}

// Depths holds, per tier t, how many leading blocks of the queried chain a
// worker holds on tier t or on any faster tier. Depths are therefore
// non-decreasing in t: Depths[TierDevice] <= Depths[TierHost] <= ...
type Depths [NumTiers]int

// Max is the longest prefix held on any tier.
func (d Depths) Max() int { return d[NumTiers-1] }

// Match maps each worker that holds at least the first block of the chain
// to its matched depths. Workers holding nothing are absent.
type Match map[WorkerID]Depths

// Stats describes an index's size.
type Stats struct {
	Blocks  int64 // distinct block hashes with at least one holder (Memory exact; Redis approximate)
	Entries int64 // (block, worker, tier) entries
	Workers int   // workers with at least one entry or a live registration
}

// Index is the fleet KV index. Implementations are safe for concurrent use.
//
// Events for one worker must be applied in order by one writer; events for
// different workers may be applied concurrently.
type Index interface {
	// Store records that worker holds the blocks on tier.
	Store(ctx context.Context, w WorkerID, tier Tier, hashes []uint64) error
	// Remove records that worker no longer holds the blocks on tier.
	Remove(ctx context.Context, w WorkerID, tier Tier, hashes []uint64) error
	// Clear forgets everything worker holds (AllBlocksCleared, or a lost
	// event stream that cannot be repaired); the worker stays known.
	Clear(ctx context.Context, w WorkerID) error
	// RemoveWorker forgets worker entirely (it died or left the fleet).
	RemoveWorker(ctx context.Context, w WorkerID) error
	// Match returns, per worker, the matched prefix depth of chain on each tier.
	Match(ctx context.Context, chain []uint64) (Match, error)
	// Stats reports the index's size.
	Stats(ctx context.Context) (Stats, error)
	// Close releases resources.
	Close() error
}

// maxEndpointLen bounds a worker's endpoint.
const maxEndpointLen = 1024

// validTier and validWorker guard every backend's writes: a bad tier or
// worker id is an error that changes nothing.
func validTier(t Tier) error {
	if t >= NumTiers {
		return fmt.Errorf("tier %d: want < %d", t, NumTiers)
	}
	return nil
}

func validWorker(w WorkerID) error {
	if w.Endpoint == "" || len(w.Endpoint) > maxEndpointLen || w.DPRank < 0 {
		return fmt.Errorf("worker id %q: want a non-empty endpoint of at most %d bytes and a rank >= 0", w.String(), maxEndpointLen)
	}
	return nil
}

// Generationer is implemented by backends whose data can vanish outside
// kvgate's control (Redis: FLUSHALL, a restart without persistence). The
// token changes when that happened; writers must then rebuild their
// entries. The in-memory backend lives and dies with its process and has
// no generation.
type Generationer interface {
	Generation(ctx context.Context) (string, error)
}
