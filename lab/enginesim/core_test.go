package enginesim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/ingest"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// Expected timing values below were computed with python3 from the
// formulas in shared/notes/wire-formats.md §7, not by this package.
const (
	prefill1Ms    = 16.5166038609989
	prefill30Ms   = 16.95730209901
	prefill50Ms   = 17.26164449725
	prefill100Ms  = 18.023973988999998
	prefill8192Ms = 169.1369184042496
	decode0Ms     = 5.74
	decodeHalfMs  = 26.310000000000002
	decode1Ms     = 34.01
	decode2of64Ms = 7.40267578125 // p = 0.03125
)

func ms(v float64) time.Duration { return time.Duration(math.Round(v * float64(time.Millisecond))) }

func near(a, b time.Duration) bool { return a-b <= 2 && b-a <= 2 }

func TestTimingFormulas(t *testing.T) {
	for _, c := range []struct {
		got, want float64
		name      string
	}{
		{PrefillMs(1), prefill1Ms, "prefill(1)"},
		{PrefillMs(100), prefill100Ms, "prefill(100)"},
		{PrefillMs(8192), prefill8192Ms, "prefill(8192)"},
		{PrefillMs(0), 0, "prefill(0)"},
		{DecodeMs(0), decode0Ms, "decode(0)"},
		{DecodeMs(0.5), decodeHalfMs, "decode(0.5)"},
		{DecodeMs(1), decode1Ms, "decode(1)"},
		{DecodeMs(2), decode1Ms, "decode(2) clamps to 1"},
	} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if got, want := StepDuration(100, true, 0.5, 2), ms((prefill100Ms+decodeHalfMs)/2); !near(got, want) {
		t.Errorf("mixed step at speed-up 2 = %v, want %v", got, want)
	}
	if got := StepDuration(0, false, 0, 1); got != time.Millisecond {
		t.Errorf("empty step = %v, want the 1 ms floor", got)
	}
}

func newEngine(t *testing.T, cfg Config, on func([]kvevents.Event)) *Engine {
	t.Helper()
	e, err := New(cfg, on)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// runAll advances e until idle and returns the final records by id.
func runAll(t *testing.T, e *Engine) map[string]Output {
	t.Helper()
	done := map[string]Output{}
	for i := 0; ; i++ {
		next, ok := e.NextEventTime()
		if !ok {
			return done
		}
		if i > 1_000_000 {
			t.Fatal("engine does not go idle")
		}
		for _, o := range e.Advance(next) {
			if o.Done {
				done[o.ID] = o
			}
		}
	}
}

func tokens(base uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

func TestStepTimingOfOneRequest(t *testing.T) {
	e := newEngine(t, Config{BlockSize: 16, NumGPUBlocks: 64}, nil)
	arrival := 5 * time.Second
	if err := e.Submit(Request{ID: "a", Tokens: tokens(1, 30), MaxTokens: 3, Arrival: arrival}); err != nil {
		t.Fatal(err)
	}
	if next, ok := e.NextEventTime(); !ok || next != arrival {
		t.Fatalf("NextEventTime = %v, %v; want the arrival %v", next, ok, arrival)
	}
	o := runAll(t, e)["a"]
	// Step 1 prefills 30 tokens (2 blocks); steps 2 and 3 decode with 2 of
	// 64 blocks in use.
	first := arrival + ms(prefill30Ms)
	if !near(o.FirstTokenAt, first) {
		t.Errorf("first token at %v, want %v", o.FirstTokenAt, first)
	}
	if want := first + 2*ms(decode2of64Ms); !near(o.FinishedAt, want) {
		t.Errorf("finished at %v, want %v", o.FinishedAt, want)
	}
	if o.OutputTokens != 3 || o.PromptTokens != 30 || o.CachedTokens != 0 {
		t.Errorf("output %+v", o)
	}
	if !near(o.MaxITL, ms(decode2of64Ms)) || !near(o.MeanITL(), ms(decode2of64Ms)) {
		t.Errorf("ITL max %v mean %v, want %v", o.MaxITL, o.MeanITL(), ms(decode2of64Ms))
	}
}

func TestChunkedPrefillSplitsLongPrompt(t *testing.T) {
	e := newEngine(t, Config{BlockSize: 16, NumGPUBlocks: 64, MaxNumBatchedTokens: 100}, nil)
	if err := e.Submit(Request{ID: "long", Tokens: tokens(1, 250), MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	// Step by step: the first two steps produce nothing.
	var firsts []Output
	steps := 0
	for {
		next, ok := e.NextEventTime()
		if !ok {
			break
		}
		outs := e.Advance(next)
		if e.Stats().Steps > uint64(steps) {
			steps = int(e.Stats().Steps)
		}
		for _, o := range outs {
			if !o.Done {
				firsts = append(firsts, o)
			}
		}
	}
	if steps != 3 {
		t.Errorf("%d steps for a 250-token prompt at 100 tokens per step, want 3", steps)
	}
	if len(firsts) != 1 {
		t.Fatalf("%d first-token records, want 1", len(firsts))
	}
	want := ms(prefill100Ms) + ms(prefill100Ms) + ms(prefill50Ms)
	if !near(firsts[0].FirstTokenAt, want) {
		t.Errorf("first token at %v, want %v (three prefill chunks)", firsts[0].FirstTokenAt, want)
	}
}

func TestPrefixCacheHit(t *testing.T) {
	const bs = 16
	e := newEngine(t, Config{BlockSize: bs, NumGPUBlocks: 256}, nil)
	shared := tokens(1000, 6*bs)
	a := append(append([]uint32{}, shared...), tokens(5000, 4*bs+5)...)
	b := append(append([]uint32{}, shared...), tokens(9000, 3*bs)...)
	must(t, e.Submit(Request{ID: "a", Tokens: a, MaxTokens: 4}))
	if o := runAll(t, e)["a"]; o.CachedTokens != 0 {
		t.Fatalf("cold request cached %d tokens", o.CachedTokens)
	}
	must(t, e.Submit(Request{ID: "b", Tokens: b, MaxTokens: 4, Arrival: time.Second}))
	if o := runAll(t, e)["b"]; o.CachedTokens != 6*bs {
		t.Errorf("shared 6-block prefix: cached %d tokens, want %d", o.CachedTokens, 6*bs)
	}
	// A full repeat of an exact multiple of the block size still computes
	// its last token: the last block is not a hit.
	must(t, e.Submit(Request{ID: "a2", Tokens: a[:10*bs], MaxTokens: 1, Arrival: 2 * time.Second}))
	if o := runAll(t, e)["a2"]; o.CachedTokens != 9*bs {
		t.Errorf("full repeat of 10 blocks: cached %d tokens, want %d", o.CachedTokens, 9*bs)
	}
	// Another LoRA is another cache.
	must(t, e.Submit(Request{ID: "lora", Tokens: a, MaxTokens: 1, LoRA: "x", Arrival: 3 * time.Second}))
	if o := runAll(t, e)["lora"]; o.CachedTokens != 0 {
		t.Errorf("same prompt under a LoRA cached %d tokens, want 0", o.CachedTokens)
	}
	st := e.Stats()
	if st.PrefixHitTokens != uint64(6*bs+9*bs) || st.PrefixQueryTokens != uint64(len(a)+len(b)+10*bs+len(a)) {
		t.Errorf("prefix stats hits %d queries %d", st.PrefixHitTokens, st.PrefixQueryTokens)
	}
}

func TestLRUEvictsLeastRecentlyUsedUnreferenced(t *testing.T) {
	const bs = 4
	// 8 blocks: A and B (2 blocks each, plus one decode block each) fit, and
	// then D needs 6 blocks.
	var removed []uint64
	e := newEngine(t, Config{BlockSize: bs, NumGPUBlocks: 8}, func(evs []kvevents.Event) {
		for _, ev := range evs {
			if ev.Kind == kvevents.BlockRemoved {
				removed = append(removed, ev.BlockHashes...)
			}
		}
	})
	seqHashes := func(toks []uint32) []uint64 {
		seed := blockhash.Seed("", "")
		return blockhash.SequenceHashes(blockhash.LocalHashes(toks, bs, seed))
	}
	a, b := tokens(100, 2*bs+1), tokens(200, 2*bs+1)
	must(t, e.Submit(Request{ID: "a", Tokens: a, MaxTokens: 1}))
	runAll(t, e)
	must(t, e.Submit(Request{ID: "b", Tokens: b, MaxTokens: 1, Arrival: time.Second}))
	runAll(t, e)
	// Touch A again: B is now least recently used.
	must(t, e.Submit(Request{ID: "a-again", Tokens: a, MaxTokens: 1, Arrival: 2 * time.Second}))
	if o := runAll(t, e)["a-again"]; o.CachedTokens != 2*bs {
		t.Fatalf("A's prefix not cached: %d", o.CachedTokens)
	}
	// D (5 blocks worth of prompt + output) must evict 2 cached blocks.
	must(t, e.Submit(Request{ID: "d", Tokens: tokens(300, 5*bs+1), MaxTokens: 1, Arrival: 3 * time.Second}))
	runAll(t, e)
	bh := seqHashes(b)
	evictedB := 0
	for _, r := range removed {
		for _, h := range bh {
			if r == engineHash(h) {
				evictedB++
			}
		}
		for _, h := range seqHashes(a) {
			if r == engineHash(h) {
				t.Errorf("A's block %#x evicted while B's older blocks were evictable", h)
			}
		}
	}
	if evictedB != 2 {
		t.Errorf("%d of B's blocks evicted, want 2 (removed %d blocks)", evictedB, len(removed))
	}
}

func TestEvictionNeverTouchesReferencedBlocks(t *testing.T) {
	const bs = 4
	var e *Engine
	violations := 0
	e = newEngine(t, Config{BlockSize: bs, NumGPUBlocks: 12}, func(evs []kvevents.Event) {
		// Events arrive at step end; blocks referenced by running sequences
		// then must not be among the removed ones.
		refd := map[uint64]bool{}
		for _, s := range e.running {
			for _, b := range s.blocks {
				if m := e.pool.blocks[b]; m.cached {
					refd[engineHash(m.hash)] = true
				}
			}
		}
		for _, ev := range evs {
			if ev.Kind == kvevents.BlockRemoved {
				for _, h := range ev.BlockHashes {
					if refd[h] {
						violations++
					}
				}
			}
		}
	})
	// A long-running request holds 3 blocks while short ones churn the rest.
	must(t, e.Submit(Request{ID: "long", Tokens: tokens(1, 2*bs+1), MaxTokens: 3}))
	for i := 0; i < 20; i++ {
		must(t, e.Submit(Request{ID: fmt.Sprint("s", i), Tokens: tokens(uint32(1000+100*i), 2*bs+2), MaxTokens: 1}))
	}
	done := runAll(t, e)
	if len(done) != 21 {
		t.Fatalf("%d requests finished, want 21", len(done))
	}
	if violations != 0 {
		t.Errorf("%d referenced blocks were evicted", violations)
	}
	if e.Stats().EvictedBlocks == 0 {
		t.Error("the workload never evicted; the test proves nothing")
	}
}

// checkPool verifies the block pool's invariants against the sequences.
func checkPool(t *testing.T, e *Engine) {
	t.Helper()
	p := e.pool
	refs := make([]int32, len(p.blocks))
	count := func(s *seq) {
		for _, b := range s.blocks {
			refs[b]++
		}
	}
	for _, s := range e.running {
		count(s)
	}
	for _, s := range e.held {
		count(s)
	}
	queued := 0
	for i := p.head; i != noBlock; i = p.blocks[i].next {
		queued++
		if queued > len(p.blocks) {
			t.Fatal("free queue has a cycle")
		}
	}
	if queued != p.free {
		t.Fatalf("free queue holds %d blocks, counter says %d", queued, p.free)
	}
	for i, m := range p.blocks {
		if m.ref != refs[i] {
			t.Fatalf("block %d: ref %d, sequences hold it %d times", i, m.ref, refs[i])
		}
		if (m.ref == 0) != m.queued {
			t.Fatalf("block %d: ref %d but queued=%v", i, m.ref, m.queued)
		}
		if m.cached {
			if b, ok := p.byHash[m.hash]; !ok || b != int32(i) {
				t.Fatalf("block %d cached as %#x but the map says %d, %v", i, m.hash, b, ok)
			}
		}
	}
	if len(p.byHash) > len(p.blocks) {
		t.Fatalf("%d cached hashes in %d blocks", len(p.byHash), len(p.blocks))
	}
	for _, s := range e.running {
		if len(s.blocks)*e.cfg.BlockSize < s.numComputed {
			t.Fatalf("%s: %d blocks for %d computed tokens", s.req.ID, len(s.blocks), s.numComputed)
		}
		for b := 0; b < s.numComputed/e.cfg.BlockSize; b++ {
			if m := p.blocks[s.blocks[b]]; !m.cached || m.hash != s.hashes[b] {
				t.Fatalf("%s: full block %d not registered under its hash", s.req.ID, b)
			}
		}
	}
}

// randomWorkload submits requests drawn from a few shared prefixes, LoRAs
// and lengths, arriving over a short window so that they contend.
func randomWorkload(t *testing.T, e *Engine, rng *rand.Rand, n, bs int) {
	t.Helper()
	prefixes := make([][]uint32, 5)
	for i := range prefixes {
		prefixes[i] = tokens(uint32(100000*(i+1)), rng.IntN(6*bs)+1)
	}
	at := time.Duration(0)
	for i := 0; i < n; i++ {
		p := prefixes[rng.IntN(len(prefixes))]
		toks := append(append([]uint32{}, p...), tokens(uint32(10_000_000+1000*i), rng.IntN(5*bs)+1)...)
		lora := ""
		if rng.IntN(4) == 0 {
			lora = "adapter"
		}
		at += time.Duration(rng.IntN(40)) * time.Millisecond
		r := Request{ID: fmt.Sprint("r", i), Tokens: toks, MaxTokens: rng.IntN(3*bs) + 1, LoRA: lora, Arrival: at}
		if err := e.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRandomWorkloadsKeepInvariants(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		bs := 1 + rng.IntN(8)
		cfg := Config{BlockSize: bs, NumGPUBlocks: 40 + rng.IntN(60), MaxNumSeqs: 1 + rng.IntN(8), MaxNumBatchedTokens: bs + rng.IntN(40)}
		e := newEngine(t, cfg, nil)
		randomWorkload(t, e, rng, 60, bs)
		finished := 0
		for steps := 0; ; steps++ {
			next, ok := e.NextEventTime()
			if !ok {
				break
			}
			if steps > 1_000_000 {
				t.Fatalf("seed %d: engine does not go idle", seed)
			}
			for _, o := range e.Advance(next) {
				if o.Done {
					finished++
					if o.CachedTokens%bs != 0 || o.CachedTokens >= o.PromptTokens {
						t.Fatalf("seed %d: %s cached %d of %d tokens", seed, o.ID, o.CachedTokens, o.PromptTokens)
					}
					if o.FirstTokenAt < o.Arrival || o.FinishedAt < o.FirstTokenAt {
						t.Fatalf("seed %d: %s times out of order: %+v", seed, o.ID, o)
					}
				}
			}
			checkPool(t, e)
			if u := e.pool.used(); u > cfg.NumGPUBlocks {
				t.Fatalf("seed %d: %d blocks used of %d", seed, u, cfg.NumGPUBlocks)
			}
			if len(e.running) > cfg.MaxNumSeqs {
				t.Fatalf("seed %d: %d running, max %d", seed, len(e.running), cfg.MaxNumSeqs)
			}
		}
		if finished != 60 {
			t.Fatalf("seed %d: %d of 60 requests finished", seed, finished)
		}
	}
}

func TestPreemptionRecomputesAndFinishes(t *testing.T) {
	const bs = 4
	// Two requests whose outputs together outgrow the cache.
	e := newEngine(t, Config{BlockSize: bs, NumGPUBlocks: 10}, nil)
	must(t, e.Submit(Request{ID: "a", Tokens: tokens(1, 2*bs), MaxTokens: 4 * bs}))
	must(t, e.Submit(Request{ID: "b", Tokens: tokens(500, 2*bs), MaxTokens: 4 * bs}))
	done := runAll(t, e)
	if len(done) != 2 || done["a"].OutputTokens != 4*bs || done["b"].OutputTokens != 4*bs {
		t.Fatalf("outputs %+v", done)
	}
	if e.Stats().Preemptions == 0 || done["b"].Preemptions == 0 {
		t.Errorf("no preemption of the later request (stats %+v)", e.Stats())
	}
	if done["a"].Preemptions != 0 {
		t.Errorf("the first request was preempted %d times; the last admitted goes first", done["a"].Preemptions)
	}
}

// TestEventsReproduceCacheInIndex feeds the engine's events through the
// real ingest path into kvindex.Memory and checks, after every step that
// changed the cache (each such step publishes events), that the index and
// the engine agree on every chain the workload produced.
func TestEventsReproduceCacheInIndex(t *testing.T) {
	ctx := context.Background()
	for seed := uint64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		bs := 1 + rng.IntN(8)
		idx := kvindex.NewMemory(kvindex.MemoryConfig{})
		wid := kvfleet.WorkerID{Endpoint: "sim:1", DPRank: 0}
		ns := ""
		if seed%3 == 0 {
			ns = "tenant"
		}
		w := ingest.NewWorker(wid, idx, ingest.Config{BlockSize: bs, Namespace: ns})
		chains := map[string]*seq{}
		var e *Engine
		checked := 0
		check := func(evs []kvevents.Event) {
			if err := w.Apply(ctx, kvevents.Batch{Events: evs}); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			checked++
			// The callback runs at the end of the step, before the next
			// one starts: the engine's cache is what the events describe.
			for id, s := range chains {
				want := 0
				for want < len(s.hashes) {
					if _, ok := e.pool.lookup(s.hashes[want]); !ok {
						break
					}
					want++
				}
				m, err := kvindex.MatchMap(ctx, idx, s.hashes)
				if err != nil {
					t.Fatal(err)
				}
				if got := m[wid][kvfleet.TierDevice]; got != want {
					t.Fatalf("seed %d check %d: chain of %s: index depth %d, engine holds %d", seed, checked, id, got, want)
				}
			}
			st := w.Stats()
			if st.SequenceEntries != int64(len(e.pool.byHash)) {
				t.Fatalf("seed %d check %d: index has %d entries, engine caches %d", seed, checked, st.SequenceEntries, len(e.pool.byHash))
			}
			for r, n := range st.Rejected {
				if n != 0 {
					t.Fatalf("seed %d: ingest rejected %d events (%v)", seed, n, ingest.RejectReason(r))
				}
			}
		}
		e = newEngine(t, Config{BlockSize: bs, NumGPUBlocks: 30 + rng.IntN(50), MaxNumSeqs: 1 + rng.IntN(6), MaxNumBatchedTokens: bs + rng.IntN(30), Namespace: ns}, check)
		randomWorkload(t, e, rng, 50, bs)
		for id, s := range e.seqs {
			chains[id] = s
		}
		runAll(t, e)
		if checked < 20 {
			t.Errorf("seed %d: only %d steps published events", seed, checked)
		}
		if w.Stats().BlocksRemoved == 0 {
			t.Errorf("seed %d: no evictions; the cache was too large to test removals", seed)
		}
		// Reset publishes AllBlocksCleared, which empties the kvindex.
		must(t, e.Reset())
		if st, _ := idx.Stats(ctx); st.Entries != 0 {
			t.Errorf("seed %d: %d index entries after Reset", seed, st.Entries)
		}
	}
}

func TestSubmitValidation(t *testing.T) {
	e := newEngine(t, Config{BlockSize: 4, NumGPUBlocks: 4}, nil)
	for _, r := range []Request{
		{ID: "", Tokens: tokens(1, 3), MaxTokens: 1},
		{ID: "x", MaxTokens: 1},
		{ID: "x", Tokens: tokens(1, 3), MaxTokens: 0},
		{ID: "x", Tokens: tokens(1, 3), MaxTokens: 1, Arrival: -1},
		{ID: "x", Tokens: tokens(1, 15), MaxTokens: 2}, // 17 tokens need 5 blocks of 4
	} {
		if err := e.Submit(r); err == nil {
			t.Errorf("Submit(%+v) accepted", r)
		}
	}
	must(t, e.Submit(Request{ID: "x", Tokens: tokens(1, 3), MaxTokens: 1}))
	if err := e.Submit(Request{ID: "x", Tokens: tokens(1, 3), MaxTokens: 1}); err == nil {
		t.Error("duplicate id accepted")
	}
	if _, err := New(Config{BlockSize: -1}, nil); err == nil {
		t.Error("negative block size accepted")
	}
	if _, err := New(Config{SpeedUp: math.NaN()}, nil); err == nil {
		t.Error("NaN speed-up accepted")
	}
}

func TestAbortResetAndHold(t *testing.T) {
	const bs = 4
	e := newEngine(t, Config{BlockSize: bs, NumGPUBlocks: 16}, nil)
	must(t, e.Submit(Request{ID: "a", Tokens: tokens(1, 9), MaxTokens: 50}))
	e.Advance(ms(prefill1Ms * 3)) // prefill done, decoding
	if g, ok := e.Progress("a"); !ok || g < 1 {
		t.Fatalf("progress %d, %v", g, ok)
	}
	if err := e.Reset(); !errors.Is(err, ErrBlocksInUse) {
		t.Errorf("Reset while running: %v, want ErrBlocksInUse", err)
	}
	o, ok := e.Abort("a")
	if !ok || !o.Done || !o.Aborted {
		t.Fatalf("abort: %+v %v", o, ok)
	}
	if _, ok := e.Abort("a"); ok {
		t.Error("second abort succeeded")
	}
	if runAll(t, e)["a"].ID != "" {
		t.Error("aborted request reported again")
	}
	must(t, e.Reset())
	if e.Stats().CachedBlocks != 0 {
		t.Error("blocks cached after Reset")
	}
	must(t, e.Submit(Request{ID: "p", Tokens: tokens(1, 9), MaxTokens: 1, HoldBlocks: true, Arrival: e.Now()}))
	o = runAll(t, e)["p"]
	if len(o.BlockIDs) != 3 || e.Stats().UsedBlocks != 3 {
		t.Fatalf("held %v, used %d; want 3 blocks held", o.BlockIDs, e.Stats().UsedBlocks)
	}
	if !e.Release("p") || e.Stats().UsedBlocks != 0 {
		t.Error("Release did not free the held blocks")
	}
	// A decode-side request whose KV was transferred: no prefill cost.
	must(t, e.Submit(Request{ID: "d", Tokens: tokens(7000, 40), MaxTokens: 2, KVTransferred: true, Arrival: e.Now()}))
	start := e.Now()
	o = runAll(t, e)["d"]
	if o.FirstTokenAt-start > ms(decode1Ms) {
		t.Errorf("transferred request took %v to its first token, more than one decode step", o.FirstTokenAt-start)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
