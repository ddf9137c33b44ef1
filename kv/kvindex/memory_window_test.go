package kvindex_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// longChain is a chain longer than the match window's runs together
// (8 + 8 + 16 + 32 + 64 + 128 + 256 = 512 positions, memory_window.go),
// so a walk over it moves through every run size and past the largest.
const longChain = 700

// TestMemoryLongChainsMatchModel: workers hold prefixes of one long chain
// (and of its branches) with holes, on mixed tiers, so walks end inside
// runs, at their edges and at the chain's end; with enough holders of the
// first block the dense walk runs and hands over to the merge walk inside
// a run. Every Match must equal the model's, at every shard count (one
// shard: every run locks one lock; 64: a run locks many).
func TestMemoryLongChainsMatchModel(t *testing.T) {
	for _, shards := range []int{1, 8, 64} {
		t.Run(fmt.Sprint("shards", shards), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(shards), 27))
			idx := kvindex.NewMemory(kvindex.MemoryConfig{Shards: shards})
			model := newMemModel()
			chain := make([]uint64, longChain)
			for i := range chain {
				chain[i] = rng.Uint64()
			}
			// A branch shares the first 300 blocks and then diverges.
			branch := append([]uint64(nil), chain[:300]...)
			for len(branch) < longChain {
				branch = append(branch, rng.Uint64())
			}
			const workers = 96
			for w := range workers {
				src := chain
				if w%3 == 0 {
					src = branch
				}
				n := 1 + rng.IntN(longChain)
				if w%4 == 0 {
					n = longChain // some hold it whole
				}
				split := rng.IntN(n + 1)
				tier := kvfleet.Tier(1 + rng.IntN(int(kvfleet.NumTiers)-1))
				applyMemOp(t, idx, memOp{"store", w, kvfleet.TierDevice, src[:split]})
				model.store(memWorker(w), kvfleet.TierDevice, src[:split])
				applyMemOp(t, idx, memOp{"store", w, tier, src[split:n]})
				model.store(memWorker(w), tier, src[split:n])
				if w%5 == 0 { // a hole: one block gone from every tier
					h := []uint64{src[rng.IntN(n)]}
					for tier := range kvfleet.NumTiers {
						applyMemOp(t, idx, memOp{"remove", w, tier, h})
						model.remove(memWorker(w), tier, h)
					}
				}
			}
			queries := [][]uint64{chain, branch, chain[:1], chain[:513], branch[:301]}
			// A block nobody holds, inside the largest run.
			gap := append([]uint64(nil), chain...)
			gap[600] = 1
			queries = append(queries, gap)
			dense := 0
			for _, q := range queries {
				got, want := mustMatch(t, idx, q), model.match(q)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("Match(chain of %d) differs from the model:\n got %v\nwant %v", len(q), got, want)
				}
				if len(want) >= 64 {
					dense++
				}
			}
			deep := 0
			for _, d := range model.match(chain) {
				if d.Max() > 512 {
					deep++
				}
			}
			// Without these the walks above would not reach what they test.
			if dense == 0 || deep == 0 {
				t.Fatalf("%d queries with 64 or more holders, %d workers past position 512: the fleet does not exercise the walk", dense, deep)
			}
		})
	}
}

// TestMemoryLongChainsConcurrent: matchers walk long chains (several runs,
// each holding several shards' read locks at once) while one writer per
// worker stores and removes along them and others are cleared and
// removed; run with -race. A lock-order bug would hang here (the test's
// deadline), a torn read would show as depths out of order or beyond
// the chain. The end state must equal the model's.
func TestMemoryLongChainsConcurrent(t *testing.T) {
	idx := kvindex.NewMemory(kvindex.MemoryConfig{Shards: 16})
	rng := rand.New(rand.NewPCG(5, 27))
	chain := make([]uint64, longChain)
	for i := range chain {
		chain[i] = rng.Uint64()
	}
	const writers = 6
	models := make([]*memModel, writers)
	var wg sync.WaitGroup
	for wi := range writers {
		models[wi] = newMemModel()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(wi), 3))
			w := memWorker(wi)
			for range 300 {
				a := rng.IntN(longChain)
				b := a + 1 + rng.IntN(min(longChain-a, 200))
				hs := chain[a:b]
				tier := kvfleet.Tier(rng.IntN(int(kvfleet.NumTiers)))
				op := randomWrite{roll: rng.IntN(100), storeBelow: 65, removeBelow: 96}
				if err := op.apply(idx, models[wi], w, tier, kvindex.ChainBlocks(chain[:b])[a:], hs); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	var matches [3]int
	for r := range 3 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			var m kvindex.Match
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				q := chain[:longChain-(i*37+r*101)%400]
				if err := idx.Match(memCtx, q, &m); err != nil {
					t.Error(err)
					return
				}
				matches[r]++
				if !depthsOrdered(t, &m, len(q)) {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	for r, n := range matches {
		if n == 0 {
			t.Errorf("matcher %d never matched", r)
		}
	}
	merged := mergeModels(models)
	for _, q := range [][]uint64{chain, chain[:257], chain[100:]} {
		if got, want := mustMatch(t, idx, q), merged.match(q); !reflect.DeepEqual(got, want) {
			t.Fatalf("final Match(chain of %d) = %v, want %v", len(q), got, want)
		}
	}
	if got, want := mustStats(t, idx), merged.stats(); got != want {
		t.Fatalf("final Stats = %+v, want %+v", got, want)
	}
}
