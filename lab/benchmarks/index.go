// Package benchmarks measures kvgate's components on realistic workloads
// and writes the figures as Markdown, each with a baseline measured in the
// same run.
package benchmarks

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// IndexOptions sizes the index benchmark. Zero fields take the defaults
// noted; at the defaults the memory backend and the baseline together take
// about a minute.
type IndexOptions struct {
	ChainLengths []int         // blocks per queried chain; default 32, 256
	WorkerCounts []int         // fleet sizes; default 8, 64, 512
	Phase        time.Duration // length of each measured phase (events, matches) per backend and case; default 2s
	Writers      int           // goroutines applying events, each owning a share of the workers; default 2
	Matchers     int           // goroutines matching; default GOMAXPROCS
	// The fleet: Conversations chains open with one of Prompts shared
	// system prompts (a quarter of the chain); each worker holds random-
	// length prefixes of PrefixesPerWorker of them, device first and, for a
	// third, the tail on host.
	Prompts           int // default 8
	Conversations     int // default 256
	PrefixesPerWorker int // default 16
	BatchSize         int // hashes per Store or Remove call; default 16
	// KeptBatches is how many batches each worker keeps during the events
	// phase before removing its oldest, so the index stays at a steady size.
	KeptBatches int    // default 64
	Seed        uint64 // fleet and query randomness
	NoBaseline  bool   // skip the naive baseline (and the ratios)
}

func (o *IndexOptions) fill() error {
	setInts := func(p *[]int, def ...int) { // copies, so callers' slices are not shared
		if len(*p) == 0 {
			*p = def
		} else {
			*p = slices.Clone(*p)
		}
	}
	setInts(&o.ChainLengths, 32, 256)
	setInts(&o.WorkerCounts, 8, 64, 512)
	setInt := func(p *int, def int) {
		if *p == 0 {
			*p = def
		}
	}
	if o.Phase == 0 {
		o.Phase = 2 * time.Second
	}
	setInt(&o.Writers, 2)
	setInt(&o.Matchers, runtime.GOMAXPROCS(0))
	setInt(&o.Prompts, 8)
	setInt(&o.Conversations, 256)
	setInt(&o.PrefixesPerWorker, 16)
	setInt(&o.BatchSize, 16)
	setInt(&o.KeptBatches, 64)
	for _, n := range o.ChainLengths {
		if n < 1 || n > 1<<16 {
			return fmt.Errorf("chain length %d: want 1..65536", n)
		}
	}
	for _, n := range o.WorkerCounts {
		if n < 1 || n > 1<<16 {
			return fmt.Errorf("worker count %d: want 1..65536", n)
		}
	}
	switch {
	case o.Phase < 0 || o.Phase > time.Hour:
		return fmt.Errorf("phase %v: want up to an hour", o.Phase)
	case o.Writers < 1 || o.Writers > 1024:
		return fmt.Errorf("writers %d: want 1..1024", o.Writers)
	case o.Matchers < 1 || o.Matchers > 1024:
		return fmt.Errorf("matchers %d: want 1..1024", o.Matchers)
	case o.Prompts < 1 || o.Conversations < o.Prompts || o.Conversations > 1<<20:
		return fmt.Errorf("prompts %d, conversations %d: want 1 <= prompts <= conversations <= 1048576", o.Prompts, o.Conversations)
	case o.PrefixesPerWorker < 1 || o.PrefixesPerWorker > 1<<12:
		return fmt.Errorf("prefixes per worker %d: want 1..4096", o.PrefixesPerWorker)
	case o.BatchSize < 1 || o.BatchSize > 1<<12:
		return fmt.Errorf("batch size %d: want 1..4096", o.BatchSize)
	case o.KeptBatches < 1 || o.KeptBatches > 1<<16:
		return fmt.Errorf("kept batches %d: want 1..65536", o.KeptBatches)
	}
	return nil
}

// BaselineName is the backend name of the naive index in the table.
const BaselineName = "baseline (map+mutex)"

// IndexRow is one line of the table.
type IndexRow struct {
	Backend         string
	Workers, Chain  int
	EventsPerSec    float64
	MatchesPerSec   float64
	P50, P99        time.Duration
	WorkersPerMatch float64 // mean result size: how many workers hold the chain's first block
}

// Index benchmarks each backend, and the baseline, on every (chain length,
// worker count) case and writes a Markdown report to w. Backends are run
// in name order and must be empty: each case adds its own workers and
// removes them (RemoveWorker) when done.
func Index(ctx context.Context, w io.Writer, backends map[string]kvindex.Index, opt IndexOptions) error {
	if err := opt.fill(); err != nil {
		return fmt.Errorf("index benchmark: %w", err)
	}
	names := make([]string, 0, len(backends))
	for name := range backends {
		if name == BaselineName {
			return fmt.Errorf("index benchmark: backend name %q is reserved", name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var rows []IndexRow
	caseNo := 0
	for _, chainLen := range opt.ChainLengths {
		for _, workers := range opt.WorkerCounts {
			caseNo++
			fleet := newIndexFleet(opt, chainLen, workers, caseNo)
			run := func(name string, idx kvindex.Index, shared bool) error {
				row, err := benchIndexCase(ctx, idx, fleet, opt, shared)
				if err != nil {
					return fmt.Errorf("index benchmark: %s, %d workers, chain %d: %w", name, workers, chainLen, err)
				}
				row.Backend = name
				rows = append(rows, row)
				return nil
			}
			for _, name := range names {
				if err := run(name, backends[name], true); err != nil {
					return err
				}
			}
			if !opt.NoBaseline {
				// A fresh baseline per case, dropped after: its RemoveWorker
				// scans every block, minutes for a 512-worker fleet.
				if err := run(BaselineName, newBaselineIndex(), false); err != nil {
					return err
				}
			}
		}
	}
	return writeIndexReport(ctx, w, rows, opt)
}

// indexFleet is one case's workload, the same for every backend.
type indexFleet struct {
	chainLen int
	workers  []kvfleet.WorkerID
	convs    [][]uint64
	preload  []indexEvent // in order per worker
	salt     uint64       // distinguishes fresh blocks of the events phase
}

type indexEvent struct {
	worker int
	tier   kvfleet.Tier
	blocks []kvindex.Block
}

func newIndexFleet(opt IndexOptions, chainLen, workers, caseNo int) *indexFleet {
	rng := rand.New(rand.NewPCG(opt.Seed, uint64(caseNo)))
	f := &indexFleet{chainLen: chainLen, salt: rng.Uint64()}
	for i := range workers {
		f.workers = append(f.workers, kvfleet.WorkerID{Endpoint: fmt.Sprintf("bench-%d-%d.kvgate.invalid:8000", caseNo, i)})
	}
	promptLen := chainLen / 4
	prompts := make([][]uint64, opt.Prompts)
	for p := range prompts {
		for range promptLen {
			prompts[p] = append(prompts[p], rng.Uint64())
		}
	}
	f.convs = make([][]uint64, opt.Conversations)
	for c := range f.convs {
		conv := append(make([]uint64, 0, chainLen), prompts[c%opt.Prompts]...)
		for len(conv) < chainLen {
			conv = append(conv, rng.Uint64())
		}
		f.convs[c] = conv
	}
	placed := make([][]kvindex.Block, len(f.convs))
	for c, conv := range f.convs {
		placed[c] = kvindex.ChainBlocks(conv)
	}
	for w := range workers {
		for range opt.PrefixesPerWorker {
			conv := placed[rng.IntN(len(f.convs))]
			n := 1 + rng.IntN(chainLen)
			onDevice := n
			if rng.IntN(3) == 0 {
				onDevice = rng.IntN(n + 1)
			}
			for _, part := range []struct {
				tier   kvfleet.Tier
				blocks []kvindex.Block
			}{{kvfleet.TierDevice, conv[:onDevice]}, {kvfleet.TierHost, conv[onDevice:n]}} {
				for start := 0; start < len(part.blocks); start += opt.BatchSize {
					end := min(start+opt.BatchSize, len(part.blocks))
					f.preload = append(f.preload, indexEvent{w, part.tier, part.blocks[start:end]})
				}
			}
		}
	}
	return f
}

// forEachWriter runs fn on opt.Writers goroutines, writer g owning the
// workers w with w % Writers == g: one writer per worker, as Index requires.
func forEachWriter(opt IndexOptions, fn func(g int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, opt.Writers)
	for g := range opt.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = fn(g)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// benchIndexCase preloads f into idx and measures it. A shared backend
// (one the caller passed in, used for every case) is left as found.
func benchIndexCase(ctx context.Context, idx kvindex.Index, f *indexFleet, opt IndexOptions, shared bool) (IndexRow, error) {
	row := IndexRow{Workers: len(f.workers), Chain: f.chainLen}
	if shared {
		defer func() {
			for _, w := range f.workers {
				_ = idx.RemoveWorker(context.WithoutCancel(ctx), w)
			}
		}()
	}
	err := forEachWriter(opt, func(g int) error {
		for _, ev := range f.preload {
			if ev.worker%opt.Writers != g {
				continue
			}
			if err := idx.Store(ctx, f.workers[ev.worker], ev.tier, ev.blocks); err != nil {
				return fmt.Errorf("preload: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return row, err
	}
	if row.EventsPerSec, err = measureEvents(ctx, idx, f, opt); err != nil {
		return row, err
	}
	lat, matches, found, elapsed, err := measureMatches(ctx, idx, f, opt)
	if err != nil {
		return row, err
	}
	row.MatchesPerSec = float64(matches) / elapsed.Seconds()
	row.P50, row.P99 = lat.quantile(0.50), lat.quantile(0.99)
	row.WorkersPerMatch = float64(found) / float64(matches)
	return row, nil
}

// measureEvents applies, on opt.Writers goroutines until the phase ends,
// what engines send at steady state: each worker in turn stores a batch of
// new blocks and removes the batch it stored KeptBatches turns ago.
// Events are hashes applied (a Store of 16 hashes is 16 events).
func measureEvents(ctx context.Context, idx kvindex.Index, f *indexFleet, opt IndexOptions) (float64, error) {
	var events atomic.Int64
	start := time.Now()
	deadline := start.Add(opt.Phase)
	err := forEachWriter(opt, func(g int) error {
		var owned []int
		for w := g; w < len(f.workers); w += opt.Writers {
			owned = append(owned, w)
		}
		if len(owned) == 0 {
			return nil
		}
		// Fresh blocks, each the first of its own chain (engines' events
		// carry blocks of many chains; a Redis index then writes one
		// segment key per block, its costliest case).
		batch := make([]kvindex.Block, opt.BatchSize)
		fill := func(w, round int) {
			for i := range batch {
				h := mix64(f.salt ^ uint64(w)<<40 ^ uint64(round*opt.BatchSize+i))
				batch[i] = kvindex.Block{Hash: h, Seg: h}
			}
		}
		n := int64(0)
		for turn := 0; ; turn++ {
			w, round := owned[turn%len(owned)], turn/len(owned)
			fill(w, round)
			if err := idx.Store(ctx, f.workers[w], kvfleet.TierDevice, batch); err != nil {
				return fmt.Errorf("events: %w", err)
			}
			n += int64(len(batch))
			if round >= opt.KeptBatches {
				fill(w, round-opt.KeptBatches)
				if err := idx.Remove(ctx, f.workers[w], kvfleet.TierDevice, batch); err != nil {
					return fmt.Errorf("events: %w", err)
				}
				n += int64(len(batch))
			}
			if turn%16 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
				if time.Now().After(deadline) {
					break
				}
			}
		}
		events.Add(n)
		return nil
	})
	return float64(events.Load()) / time.Since(start).Seconds(), err
}

// measureMatches queries whole conversations of the pool, uniformly, on
// opt.Matchers goroutines until the phase ends. Timing each call costs two
// clock reads, included in matches/s.
func measureMatches(ctx context.Context, idx kvindex.Index, f *indexFleet, opt IndexOptions) (lat *latencySample, matches, found int64, elapsed time.Duration, err error) {
	samples := make([]*latencySample, opt.Matchers)
	errs := make([]error, opt.Matchers)
	var nMatches, nFound atomic.Int64
	start := time.Now()
	deadline := start.Add(opt.Phase)
	var wg sync.WaitGroup
	for g := range opt.Matchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(opt.Seed^0x6d61746368, uint64(g)))
			s := newLatencySample(rng)
			samples[g] = s
			var n, hit int64
			var m kvindex.Match // reused, as the request path reuses its buffers
			for {
				chain := f.convs[rng.IntN(len(f.convs))]
				t0 := time.Now()
				err := idx.Match(ctx, chain, &m)
				t1 := time.Now()
				if err != nil {
					errs[g] = fmt.Errorf("match: %w", err)
					return
				}
				s.add(t1.Sub(t0))
				n++
				hit += int64(m.Len())
				if t1.After(deadline) {
					break
				}
				if n%64 == 0 && ctx.Err() != nil {
					errs[g] = ctx.Err()
					return
				}
			}
			nMatches.Add(n)
			nFound.Add(hit)
		}()
	}
	wg.Wait()
	elapsed = time.Since(start)
	for _, e := range errs {
		if e != nil {
			return nil, 0, 0, 0, e
		}
	}
	lat = samples[0]
	for _, s := range samples[1:] {
		lat.merge(s)
	}
	return lat, nMatches.Load(), nFound.Load(), elapsed, nil
}

// latencySample keeps every latency up to a cap and a uniform reservoir
// (Vitter's algorithm R) beyond it, so quantiles stay exact for short runs
// and unbiased for long ones at bounded memory.
type latencySample struct {
	rng  *rand.Rand
	seen int64
	keep []time.Duration
}

const latencySampleCap = 1 << 20

func newLatencySample(rng *rand.Rand) *latencySample {
	return &latencySample{rng: rng, keep: make([]time.Duration, 0, 1<<12)}
}

func (s *latencySample) add(d time.Duration) {
	s.seen++
	if len(s.keep) < latencySampleCap {
		s.keep = append(s.keep, d)
		return
	}
	if j := s.rng.Int64N(s.seen); j < latencySampleCap {
		s.keep[j] = d
	}
}

// merge pools o into s. When either was subsampled, its values are
// weighted by repetition to their share of calls, so fast and slow
// goroutines count by the calls they made.
func (s *latencySample) merge(o *latencySample) {
	if s.seen == int64(len(s.keep)) && o.seen == int64(len(o.keep)) {
		s.keep = append(s.keep, o.keep...)
		s.seen += o.seen
		return
	}
	total := s.seen + o.seen
	pooled := make([]time.Duration, 0, latencySampleCap)
	for _, part := range []*latencySample{s, o} {
		want := int(int64(latencySampleCap) * part.seen / total)
		for i := range want {
			pooled = append(pooled, part.keep[i*len(part.keep)/max(want, 1)])
		}
	}
	s.keep, s.seen = pooled, total
}

func (s *latencySample) quantile(q float64) time.Duration {
	if len(s.keep) == 0 {
		return 0
	}
	slices.Sort(s.keep)
	return s.keep[min(len(s.keep)-1, int(q*float64(len(s.keep))))]
}

// mix64 is SplitMix64's finaliser: distinct inputs give hash-like, distinct
// outputs, like the XXH3 sequence hashes engines send.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func machineArch(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "uname", "-m").Output()
	if err != nil {
		return runtime.GOARCH + " (uname -m failed)"
	}
	return strings.TrimSpace(string(out))
}

func writeIndexReport(ctx context.Context, w io.Writer, rows []IndexRow, opt IndexOptions) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## Fleet KV index\n\n")
	fmt.Fprintf(&b, "Machine: %d CPUs, GOMAXPROCS %d, %s, %s/%s (uname -m: %s).\n\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH, machineArch(ctx))
	fmt.Fprintf(&b, "Workload: %d conversations opening with one of %d shared system prompts (a quarter of the chain); "+
		"each worker preloaded with random-length prefixes of %d of them (device, a third with the tail on host). "+
		"Events: %d writers, each worker storing %d new blocks per call and removing what it stored %d calls earlier; "+
		"events/s counts hashes. Matches: whole conversations on %d goroutines; p50/p99 per call. %v per phase.\n\n",
		opt.Conversations, opt.Prompts, opt.PrefixesPerWorker, opt.Writers, opt.BatchSize, opt.KeptBatches, opt.Matchers, opt.Phase)
	if !opt.NoBaseline {
		fmt.Fprintf(&b, "Baseline: %s, a naive index (one map of maps behind one mutex) measured in the same run; the ratio columns divide by it.\n\n", BaselineName)
	}
	b.WriteString("| backend | workers | chain | events/s | matches/s | p50 | p99 | workers/match | events × baseline | matches × baseline |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		evRatio, mRatio := "", ""
		if !opt.NoBaseline && r.Backend != BaselineName {
			for _, base := range rows {
				if base.Backend == BaselineName && base.Workers == r.Workers && base.Chain == r.Chain {
					evRatio = fmt.Sprintf("%.2f", r.EventsPerSec/base.EventsPerSec)
					mRatio = fmt.Sprintf("%.2f", r.MatchesPerSec/base.MatchesPerSec)
				}
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.0f | %.0f | %s | %s | %.1f | %s | %s |\n",
			r.Backend, r.Workers, r.Chain, r.EventsPerSec, r.MatchesPerSec, r.P50, r.P99, r.WorkersPerMatch, evRatio, mRatio)
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("index benchmark: write report: %w", err)
	}
	return nil
}
