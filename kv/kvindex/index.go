// Package kvindex is the fleet KV index: which worker holds which block
// (identified by its Dynamo sequence hash), on which storage tier.
//
// Two backends implement Index: Memory (embedded default) and Redis
// (standalone or Cluster, shared by several extproc replicas). A property
// test drives both with the same random event streams and requires
// identical Match results.
package kvindex

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

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
	// Store records that worker holds the blocks on tier. Each block
	// carries its segment (Block.Seg); a block must be removed with the
	// segment it was stored with.
	Store(ctx context.Context, w kvfleet.WorkerID, tier kvfleet.Tier, blocks []Block) error
	// Remove records that worker no longer holds the blocks on tier.
	Remove(ctx context.Context, w kvfleet.WorkerID, tier kvfleet.Tier, blocks []Block) error
	// Clear forgets everything worker holds (AllBlocksCleared, or a lost
	// event stream that cannot be repaired); the worker stays known.
	Clear(ctx context.Context, w kvfleet.WorkerID) error
	// RemoveWorker forgets worker entirely (it died or left the fleet).
	RemoveWorker(ctx context.Context, w kvfleet.WorkerID) error
	// Match fills into (emptied first) with, per worker, the matched
	// prefix depth of chain on each tier, from one walk over the chain.
	// chain is a chain's hashes from position 0: block p is looked for in
	// segment chain[p - p%SegmentBlocks], as ChainBlocks places it. into is
	// the caller's, reused across calls (match.go); on an error it is
	// empty.
	Match(ctx context.Context, chain []uint64, into *Match) error
	// Stats reports the index's size.
	Stats(ctx context.Context) (Stats, error)
	// Close releases resources.
	Close() error
}

// maxEndpointLen bounds a worker's endpoint.
const maxEndpointLen = 1024

// validTier and validWorker guard every backend's writes: a bad tier or
// worker id is an error that changes nothing.
func validTier(t kvfleet.Tier) error {
	if t >= kvfleet.NumTiers {
		return fmt.Errorf("tier %d: want < %d", t, kvfleet.NumTiers)
	}
	return nil
}

func validWorker(w kvfleet.WorkerID) error {
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

// Shared is implemented by a backend whose data lives outside the process,
// in a store that every kvgate process opening the same index: section
// reads and writes (Redis). Processes ask the index for it instead of
// comparing backend names, so a new backend declares what it can do in
// its own file:
//   - another process (the indexer) may feed a Shared index, so an extproc
//     replica need not run an indexer of its own; an index without it
//     lives and dies with its process, which must feed it itself
//     (daemon/extprocd);
//   - the extproc replicas share their in-flight load through the same
//     store (extproc/sharedload.go), on the index's connection settings
//     (addresses, Cluster, AUTH, TLS).
type Shared interface {
	// LoadStore is the client and the key prefix under which the extproc
	// replicas keep their shared load beside the index. The index keeps
	// the client: callers never close it.
	LoadStore() (client redis.UniversalClient, prefix string)
}
