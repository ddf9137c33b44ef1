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
	total := 0
	for i := range c.shards {
		total += len(c.shards[i].m)
	}
	if total > cacheShards*4 {
		t.Fatalf("cache holds %d entries, capacity %d", total, cacheShards*4)
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
