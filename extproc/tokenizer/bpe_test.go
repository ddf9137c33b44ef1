package tokenizer

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// TestLongWordPathMatchesShortPath runs the heap merge loop on words the
// quadratic loop handles (and vice versa on the goldens via Encode): both
// must apply merges in the same order.
func TestLongWordPathMatchesShortPath(t *testing.T) {
	for _, m := range goldenModels {
		t.Run(m, func(t *testing.T) {
			tok := loadModel(t, m)
			words := 0
			for _, c := range readCases(t, "golden_"+m+".jsonl") {
				s := c.Text
				for i := 0; i < len(s); {
					end := tok.pattern.next(s, i)
					w := s[i:end]
					i = end
					if len(w) < 2 || len(w) > smallWord {
						continue
					}
					model := tok.model
					model.ignoreMerges = false
					short := model.encodeWord(nil, w, nil)
					long := model.encodeLongWord(nil, w, nil)
					if !slices.Equal(short, long) {
						t.Fatalf("%q: short path %v, heap path %v", w, short, long)
					}
					words++
				}
			}
			if words < 1000 {
				t.Fatalf("only %d words checked", words)
			}
		})
	}
}

// TestConcurrentEncode checks that goroutines sharing one Tokenizer (and its
// word cache) get the same ids as a sequential run.
func TestConcurrentEncode(t *testing.T) {
	tok := loadModel(t, "qwen3")
	cases := readCases(t, "golden_fuzz_qwen3.jsonl")
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for range 1500 {
				c := cases[rng.IntN(len(cases))]
				if !slices.Equal(tok.Encode(c.Text), c.IDs) {
					errs <- c.Text
					return
				}
			}
		}(uint64(g))
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Errorf("concurrent Encode differs on %q", s)
	}
}

// TestWordCacheBounded fills the cache far past its capacity.
func TestWordCacheBounded(t *testing.T) {
	c := newWordCache(cacheShards * 4)
	for i := range 10000 {
		c.put(string(rune('a'+i%26))+string(rune(0x4e00+i)), []uint32{uint32(i)})
	}
	total, words := 0, 0
	for i := range c.shards {
		total += len(c.shards[i].index)
		words += len(c.shards[i].words)
	}
	if total > cacheShards*4 {
		t.Fatalf("cache holds %d entries, capacity %d", total, cacheShards*4)
	}
	// The arenas are emptied with the index: they hold only what it does
	// (each word here is 4 bytes).
	if words > total*4 {
		t.Fatalf("cache arenas hold %d bytes of words for %d entries", words, total)
	}
	if _, _, resets := c.counters(); resets == 0 {
		t.Fatal("no shard was ever reset")
	}
}

// TestStatsCountCacheUse encodes one text twice: its multi-byte words miss
// the first time and hit the second.
func TestStatsCountCacheUse(t *testing.T) {
	tok := loadModel(t, "llama3_1")
	before := tok.Stats()
	text := "zyxwvut qponmlk jihgfed"
	tok.ResetWordCache()
	tok.Encode(text)
	mid := tok.Stats()
	tok.Encode(text)
	after := tok.Stats()
	if mid.WordCacheMisses-before.WordCacheMisses == 0 {
		t.Errorf("first encode: no miss counted (%+v → %+v)", before, mid)
	}
	if hits := after.WordCacheHits - mid.WordCacheHits; hits != mid.WordCacheMisses-before.WordCacheMisses {
		t.Errorf("second encode: %d hits, want one per first-pass miss (%+v → %+v → %+v)", hits, before, mid, after)
	}
}

// TestWordCacheHitsOnlyItsWord: a hit gives back exactly the ids stored for
// that word, a word that was never put misses, and a shard reset drops the
// words it held.
func TestWordCacheHitsOnlyItsWord(t *testing.T) {
	c := newWordCache(cacheShards * 64)
	c.put("hello", []uint32{1, 2})
	c.put("world", []uint32{3})
	c.put(string(make([]byte, maxCachedWord+1)), []uint32{9}) // too long: not cached
	dst := []uint32{7}
	dst, ok := c.appendCached(dst, "hello")
	if !ok || !slices.Equal(dst, []uint32{7, 1, 2}) {
		t.Fatalf("hello: %v %v", dst, ok)
	}
	if got, ok := c.appendCached(nil, "world"); !ok || !slices.Equal(got, []uint32{3}) {
		t.Fatalf("world: %v %v", got, ok)
	}
	for _, w := range []string{"hell", "hello!", "", string(make([]byte, maxCachedWord+1))} {
		if got, ok := c.appendCached(nil, w); ok || got != nil {
			t.Errorf("%q: hit %v (%v), want a miss", w, got, ok)
		}
	}
	c.reset()
	if _, ok := c.appendCached(nil, "hello"); ok {
		t.Fatal("hello still cached after reset")
	}
}
