package tokenizer

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// wordCache memoises pre-token → ids. Natural text repeats a small set of
// words, so most pre-tokens skip the merge loop (measured ~3× faster on the
// golden corpus). It is sharded to keep lock contention low, and bounded: a
// shard that reaches its capacity is emptied and refills, which bounds memory
// without per-entry bookkeeping.
//
// A shard holds no pointer per entry: words and ids are appended to two
// arenas and the index maps a word's 64-bit hash to its offsets, so neither
// a put nor the GC's marking costs anything per entry (a map[string][]uint32
// cost two allocations per new word and two pointers per cached word for
// every GC cycle to follow, issue 27 item 3). A hash shared by two words
// keeps the later one; the word is compared on every hit.
type wordCache struct {
	seed     maphash.Seed
	perShard int
	shards   [cacheShards]cacheShard
}

const (
	cacheShards = 64
	// maxCachedWord bounds the key length: long pre-tokens are rare and
	// would make the cache's memory depend on input size.
	maxCachedWord = 128
)

// cacheShard keeps its own counters so that goroutines on different shards
// do not contend on shared counter cache lines; the padding keeps shards on
// separate lines.
type cacheShard struct {
	mu     sync.RWMutex
	index  map[uint64]cachedWord // hash of the word → where it is
	words  []byte                // the cached words, back to back
	ids    []uint32              // their ids, back to back
	hits   atomic.Uint64
	misses atomic.Uint64
	resets atomic.Uint64
	_      [64]byte
}

// cachedWord locates one word and its ids in the shard's arenas. Words are
// at most maxCachedWord bytes, so are their ids.
type cachedWord struct {
	word, ids uint32 // offsets into words and ids
	wordLen   uint8
	idsLen    uint8
}

func newWordCache(capacity int) *wordCache {
	c := &wordCache{seed: maphash.MakeSeed(), perShard: max(capacity/cacheShards, 1)}
	for i := range c.shards {
		c.shards[i].index = make(map[uint64]cachedWord)
	}
	return c
}

func (c *wordCache) shard(h uint64) *cacheShard { return &c.shards[h%cacheShards] }

// appendCached appends word's cached ids to dst; false (dst unchanged)
// when word is not cached. The ids are copied under the shard's lock: a
// put may reuse the arenas once it lets go.
func (c *wordCache) appendCached(dst []uint32, word string) ([]uint32, bool) {
	h := maphash.String(c.seed, word)
	s := c.shard(h)
	s.mu.RLock()
	e, ok := s.index[h]
	if ok && string(s.words[e.word:e.word+uint32(e.wordLen)]) == word {
		dst = append(dst, s.ids[e.ids:e.ids+uint32(e.idsLen)]...)
	} else {
		ok = false
	}
	s.mu.RUnlock()
	if ok {
		s.hits.Add(1)
	} else {
		s.misses.Add(1)
	}
	return dst, ok
}

// put copies word and ids into the shard (word is usually a substring of
// the caller's text, which the cache must not keep alive). Words longer
// than maxCachedWord, or with more ids, are not cached.
func (c *wordCache) put(word string, ids []uint32) {
	if len(word) > maxCachedWord || len(ids) > maxCachedWord {
		return
	}
	h := maphash.String(c.seed, word)
	s := c.shard(h)
	s.mu.Lock()
	if len(s.index) >= c.perShard {
		s.clear()
		s.resets.Add(1)
	}
	s.index[h] = cachedWord{word: uint32(len(s.words)), ids: uint32(len(s.ids)), wordLen: uint8(len(word)), idsLen: uint8(len(ids))}
	s.words = append(s.words, word...)
	s.ids = append(s.ids, ids...)
	s.mu.Unlock()
}

// clear empties the shard, keeping its memory for the refill; the caller
// holds the lock.
func (s *cacheShard) clear() {
	clear(s.index)
	s.words, s.ids = s.words[:0], s.ids[:0]
}

func (c *wordCache) reset() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.clear()
		s.mu.Unlock()
	}
}

// counters sums the shards' counters.
func (c *wordCache) counters() (hits, misses, resets uint64) {
	for i := range c.shards {
		s := &c.shards[i]
		hits += s.hits.Load()
		misses += s.misses.Load()
		resets += s.resets.Load()
	}
	return hits, misses, resets
}
