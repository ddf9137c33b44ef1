//go:build unix

package kvindex_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// benchFleet is a preloaded index shaped like a serving fleet: a pool of
// conversations that open with one of a few shared system prompts, and
// workers that each hold random-length prefixes of some of them (device
// first, the tail sometimes offloaded to host). A popular system prompt is
// then held by most workers, as in production.
type benchFleet struct {
	idx   *kvindex.Memory
	convs [][]uint64
}

const (
	benchPrompts        = 8
	benchConversations  = 256
	benchPrefixesPerWkr = 16
)

var (
	benchFleetsMu sync.Mutex
	benchFleets   = map[[2]int]*benchFleet{}
)

// fleetFor builds (once per process: benchmarks are re-run with growing
// b.N) the fleet for a chain length and worker count.
func fleetFor(b *testing.B, chainLen, workers int) *benchFleet {
	benchFleetsMu.Lock()
	defer benchFleetsMu.Unlock()
	key := [2]int{chainLen, workers}
	if f := benchFleets[key]; f != nil {
		return f
	}
	rng := rand.New(rand.NewPCG(uint64(chainLen), uint64(workers)))
	promptLen := chainLen / 4
	prompts := make([][]uint64, benchPrompts)
	for p := range prompts {
		prompts[p] = make([]uint64, promptLen)
		for i := range prompts[p] {
			prompts[p][i] = rng.Uint64()
		}
	}
	f := &benchFleet{idx: kvindex.NewMemory(kvindex.MemoryConfig{}), convs: make([][]uint64, benchConversations)}
	for c := range f.convs {
		conv := append(make([]uint64, 0, chainLen), prompts[c%benchPrompts]...)
		for len(conv) < chainLen {
			conv = append(conv, rng.Uint64())
		}
		f.convs[c] = conv
	}
	for w := range workers {
		id := memWorker(w)
		for range benchPrefixesPerWkr {
			conv := f.convs[rng.IntN(len(f.convs))]
			n := 1 + rng.IntN(chainLen)
			onDevice := n
			if rng.IntN(3) == 0 {
				onDevice = rng.IntN(n + 1)
			}
			if err := f.idx.Store(memCtx, id, kvfleet.TierDevice, kvindex.ChainBlocks(conv[:onDevice])); err != nil {
				b.Fatal(err)
			}
			if err := f.idx.Store(memCtx, id, kvfleet.TierHost, kvindex.ChainBlocks(conv[onDevice:n])); err != nil {
				b.Fatal(err)
			}
		}
	}
	benchFleets[key] = f
	return f
}

// cpuClock reads the process's CPU time (user+system). The machine the
// benchmarks run on is shared and noisy, so besides wall-clock ns/op each
// benchmark reports cpu-ns/op, which other processes disturb far less.
func cpuClock() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startCPU resets the timer and returns a func that reports CPU time per
// op, and per unit when perOp units make one op.
func startCPU(b *testing.B) func(units float64, unit string) {
	b.ResetTimer()
	start := cpuClock()
	return func(units float64, unit string) {
		cpu := float64(cpuClock() - start)
		b.ReportMetric(cpu/float64(b.N), "cpu-ns/op")
		if units > 0 {
			b.ReportMetric(cpu/units, "cpu-ns/"+unit)
		}
	}
}

func reportRate(b *testing.B, perOp float64, unit string) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)*perOp/s, unit)
	}
}

// benchWriter applies a stream of fresh blocks for its own workers, with
// removals of older ones (what engines send at steady state), so the index
// stays near a fixed size: each worker keeps its last benchLag batches.
type benchWriter struct {
	workers []kvfleet.WorkerID
	base    uint64
	round   uint64
	batch   []kvindex.Block
}

const (
	benchBatch = 16
	benchLag   = 256
)

func newBenchWriter(first, n int, seed uint64) *benchWriter {
	bw := &benchWriter{base: seed << 40, batch: make([]kvindex.Block, benchBatch)}
	for i := range n {
		bw.workers = append(bw.workers, memWorker(first+i))
	}
	return bw
}

func (bw *benchWriter) fill(round uint64) {
	for i := range bw.batch {
		h := mix64(bw.base + round*benchBatch + uint64(i))
		bw.batch[i] = kvindex.Block{Hash: h, Seg: h}
	}
}

// apply sends one Store batch and, once warm, the Remove of the batch the
// same worker stored benchLag turns ago; it returns the events sent.
func (bw *benchWriter) apply(b *testing.B, idx kvindex.Index) int {
	n := uint64(len(bw.workers))
	w := bw.workers[bw.round%n]
	bw.fill(bw.round)
	if err := idx.Store(memCtx, w, kvfleet.TierDevice, bw.batch); err != nil {
		b.Fatal(err)
	}
	events := benchBatch
	if bw.round >= benchLag*n {
		bw.fill(bw.round - benchLag*n)
		if err := idx.Remove(memCtx, w, kvfleet.TierDevice, bw.batch); err != nil {
			b.Fatal(err)
		}
		events += benchBatch
	}
	bw.round++
	return events
}

// mix64 is SplitMix64's finaliser: distinct inputs, hash-like outputs.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// warm fills the index to its steady-state size, so the timed loop
// measures churn rather than table growth.
func (bw *benchWriter) warm(b *testing.B, idx kvindex.Index) {
	for bw.round < benchLag*uint64(len(bw.workers)) {
		bw.apply(b, idx)
	}
}

func BenchmarkMemoryStore(b *testing.B) {
	idx := kvindex.NewMemory(kvindex.MemoryConfig{})
	bw := newBenchWriter(0, 64, 1)
	bw.warm(b, idx)
	b.ReportAllocs()
	cpu := startCPU(b)
	events := 0
	for b.Loop() {
		events += bw.apply(b, idx)
	}
	cpu(float64(events), "event")
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(events)/s, "events/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
	}
}

func BenchmarkMemoryStoreParallel(b *testing.B) {
	idx := kvindex.NewMemory(kvindex.MemoryConfig{})
	var total atomic.Int64
	// Each goroutine owns its workers: one writer per worker.
	var writers []*benchWriter
	for n := range runtime.GOMAXPROCS(0) {
		bw := newBenchWriter(n*1000, 64/runtime.GOMAXPROCS(0), uint64(n+1))
		bw.warm(b, idx)
		writers = append(writers, bw)
	}
	var next atomic.Int64
	b.ReportAllocs()
	cpu := startCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		bw := writers[int(next.Add(1)-1)%len(writers)]
		events := 0
		for pb.Next() {
			events += bw.apply(b, idx)
		}
		total.Add(int64(events))
	})
	cpu(float64(total.Load()), "event")
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(total.Load())/s, "events/s")
	}
}

func benchMatch(b *testing.B, chainLen int, parallel bool) {
	for _, workers := range []int{8, 64, 512} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			f := fleetFor(b, chainLen, workers)
			var found atomic.Int64
			b.ReportAllocs()
			cpu := startCPU(b)
			if parallel {
				var seeds atomic.Uint64
				b.RunParallel(func(pb *testing.PB) {
					rng := rand.New(rand.NewPCG(seeds.Add(1), 7))
					n := 0
					var m kvindex.Match
					for pb.Next() {
						if err := f.idx.Match(memCtx, f.convs[rng.IntN(len(f.convs))], &m); err != nil {
							b.Fatal(err)
						}
						n += m.Len()
					}
					found.Add(int64(n))
				})
			} else {
				rng := rand.New(rand.NewPCG(1, 7))
				n := 0
				var m kvindex.Match
				for b.Loop() {
					if err := f.idx.Match(memCtx, f.convs[rng.IntN(len(f.convs))], &m); err != nil {
						b.Fatal(err)
					}
					n += m.Len()
				}
				found.Add(int64(n))
			}
			cpu(0, "")
			reportRate(b, 1, "matches/s")
			b.ReportMetric(float64(found.Load())/float64(b.N), "workers/match")
		})
	}
}

func BenchmarkMemoryMatch32(b *testing.B)          { benchMatch(b, 32, false) }
func BenchmarkMemoryMatch256(b *testing.B)         { benchMatch(b, 256, false) }
func BenchmarkMemoryMatch32Parallel(b *testing.B)  { benchMatch(b, 32, true) }
func BenchmarkMemoryMatch256Parallel(b *testing.B) { benchMatch(b, 256, true) }
