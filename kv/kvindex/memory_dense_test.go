package kvindex_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// The dense walk (a first block held by many workers) against the model,
// through random stores, removals, clears and worker removals that keep
// changing the cached holder bitsets: prefixes of one shared chain on
// most of 160 workers, on mixed tiers, so matches have many workers with
// tier-dependent depths.
func TestMemoryDenseWalkMatchesModel(t *testing.T) {
	const workers, hashSpace = 160, 24
	dense, handedOver := 0, 0
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 2))
			idx := kvindex.NewMemory(kvindex.MemoryConfig{Shards: 1 << (seed % 4)})
			model := newMemModel()
			shared := make([]uint64, hashSpace)
			for i := range shared {
				shared[i] = uint64(i)
			}
			for round := range 20 {
				for range 40 {
					w := rng.IntN(workers)
					n := 1 + rng.IntN(hashSpace)
					split := rng.IntN(n + 1)
					for _, part := range []struct {
						tier kvfleet.Tier
						hs   []uint64
					}{{kvfleet.TierDevice, shared[:split]}, {kvfleet.Tier(1 + rng.IntN(3)), shared[split:n]}} {
						if len(part.hs) == 0 {
							continue
						}
						applyMemOp(t, idx, memOp{"store", w, part.tier, part.hs})
						model.store(memWorker(w), part.tier, part.hs)
					}
				}
				randomMemOps(t, rng, idx, model, 60, workers, hashSpace)
				for q := range 8 {
					chain := append([]uint64(nil), shared[:1+rng.IntN(hashSpace)]...)
					if q%4 == 3 {
						chain[rng.IntN(len(chain))] = 1000 + uint64(q) // a block nobody holds
					}
					got, want := mustMatch(t, idx, chain), model.match(chain)
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("round %d: Match(%v) = %v, want %v", round, chain, got, want)
					}
					if len(want) >= 64 {
						dense++
						// The dense walk hands the workers still matching
						// to the merge walk once 32 or fewer are left
						// before the chain's last block.
						deep := 0
						for _, d := range want {
							if d.Max() >= len(chain)-1 {
								deep++
							}
						}
						if len(chain) >= 2 && deep <= 32 {
							handedOver++
						}
					}
				}
			}
		})
	}
	// A stream that never reached the dense walk would pass vacuously.
	if dense < 100 || handedOver < 20 {
		t.Fatalf("only %d queries had a first block with 64 or more holders, %d of them handed over to the merge walk", dense, handedOver)
	}
}
