package tokenizer

import (
	"container/list"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
)

// SegmentCache makes multi-turn chat incremental. A chat request resends
// its whole history every turn, and the rendered prompt is cut by special
// tokens (<|im_start|>, <|im_end|>, …) into message-sized segments that the
// tokenizer encodes independently (added tokens split the text before
// normalization and pre-tokenization, as in HF tokenizers). Caching the ids
// of each segment by its content makes a new turn cost roughly its new
// text only, with ids identical to a full encode by construction: the same
// split, the same per-segment encoder, and an exact key comparison.
//
// The cache is bounded in bytes (segment text plus ids) and evicts the
// least recently used segment. Safe for concurrent use.
type SegmentCache struct {
	maxBytes int64
	// MinSegmentBytes: shorter segments are encoded directly; caching
	// "assistant\n" costs more than it saves.
	minSegment int

	mu    sync.Mutex
	items map[uint64]*list.Element // xxh3 of the segment → entry (collisions chained by exact compare)
	lru   *list.List
	bytes int64

	hits, misses, evictions atomic.Uint64
}

type segmentEntry struct {
	key  uint64
	text string
	ids  []uint32
}

// SegmentCacheStats is a snapshot of the cache's counters.
type SegmentCacheStats struct {
	Hits, Misses, Evictions uint64
	Segments                int
	Bytes                   int64
}

// NewSegmentCache returns a cache holding at most maxBytes of segments.
func NewSegmentCache(maxBytes int64) *SegmentCache {
	return &SegmentCache{maxBytes: maxBytes, minSegment: 64, items: map[uint64]*list.Element{}, lru: list.New()}
}

func (c *SegmentCache) cost(e *segmentEntry) int64 {
	return int64(len(e.text)) + 4*int64(len(e.ids)) + 64
}

func (c *SegmentCache) get(key uint64, text string) ([]uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok || el.Value.(*segmentEntry).text != text {
		return nil, false
	}
	c.lru.MoveToFront(el)
	return el.Value.(*segmentEntry).ids, true
}

func (c *SegmentCache) put(key uint64, text string, ids []uint32) {
	e := &segmentEntry{key: key, text: text, ids: ids}
	cost := c.cost(e)
	if cost > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.items[key]; ok {
		c.bytes -= c.cost(old.Value.(*segmentEntry))
		c.lru.Remove(old)
	}
	c.items[key] = c.lru.PushFront(e)
	c.bytes += cost
	for c.bytes > c.maxBytes {
		last := c.lru.Back()
		le := last.Value.(*segmentEntry)
		c.lru.Remove(last)
		delete(c.items, le.key)
		c.bytes -= c.cost(le)
		c.evictions.Add(1)
	}
}

// Stats returns the cache's counters.
func (c *SegmentCache) Stats() SegmentCacheStats {
	c.mu.Lock()
	n, b := c.lru.Len(), c.bytes
	c.mu.Unlock()
	return SegmentCacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load(), Segments: n, Bytes: b}
}

// EncodeCached appends the ids of text to dst exactly as EncodeAppend
// does, reusing the ids of segments (text between added tokens) that c has
// seen before. c may be nil.
func (t *Tokenizer) EncodeCached(dst []uint32, text string, c *SegmentCache) []uint32 {
	dst, _ = t.encodeCached(dst, text, c, nil)
	return dst
}

func (t *Tokenizer) encodeCached(dst []uint32, text string, c *SegmentCache, b *budget) ([]uint32, error) {
	if c == nil || t.rawAdded == nil {
		return t.encodeAppend(dst, text, b)
	}
	if !utf8.ValidString(text) {
		text = toValidUTF8(text)
	}
	t.rawAdded.split(text, t.added, func(s addedSplit) bool {
		if s.token >= 0 {
			dst = append(dst, t.added[s.token].ID)
			return b == nil || b.ids(len(dst))
		}
		piece := text[s.start:s.end]
		if len(piece) < c.minSegment {
			dst = t.encodeNormalizing(dst, piece, b)
			return !b.stopped()
		}
		key := xxh3.HashString(piece)
		if ids, ok := c.get(key, piece); ok {
			c.hits.Add(1)
			dst = append(dst, ids...)
			return b == nil || b.ids(len(dst))
		}
		c.misses.Add(1)
		n := len(dst)
		dst = t.encodeNormalizing(dst, piece, b)
		if b.stopped() {
			return false // a cut-short segment must not be cached
		}
		// The cache keeps its own copies: dst belongs to the caller, and
		// piece may point into a request body that is reused.
		c.put(key, string([]byte(piece)), append([]uint32(nil), dst[n:]...))
		return true
	})
	if b != nil {
		return dst, b.result(len(dst))
	}
	return dst, nil
}
