package preprocess

import (
	"container/list"
	"crypto/sha256"
	"sync"
)

// renderCache keeps the token ids engines returned, keyed by the SHA-256
// of the /tokenize body sent (which names the model and holds every input
// the render reads), so a retried or repeated request costs no second
// call. It is bounded twice: by entries (extproc.preprocess.engine.
// cache_entries) and by the token ids held in all (maxTokens), and evicts
// the least recently used entry past either. A prefix-level cache is not
// possible here: the engine renders whole requests, and a request's
// tokens are not a prefix of a longer one's in general (the generation
// prompt, a template's last-turn handling).
type renderCache struct {
	mu         sync.Mutex
	maxEntries int
	maxTokens  int
	tokens     int // token ids held
	order      *list.List
	byKey      map[[sha256.Size]byte]*list.Element
}

type renderEntry struct {
	key    [sha256.Size]byte
	tokens []uint32
}

// cacheMaxTokens bounds the token ids the cache holds: 4 MiB of ids.
const cacheMaxTokens = 1 << 20

func newRenderCache(maxEntries, maxTokens int) *renderCache {
	return &renderCache{maxEntries: maxEntries, maxTokens: maxTokens, order: list.New(), byKey: map[[sha256.Size]byte]*list.Element{}}
}

// get appends the cached ids of key to dst; ok is false on a miss.
func (c *renderCache) get(key [sha256.Size]byte, dst []uint32) ([]uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byKey[key]
	if e == nil {
		return dst, false
	}
	c.order.MoveToFront(e)
	return append(dst, e.Value.(*renderEntry).tokens...), true
}

// put keeps a copy of tokens under key. A list longer than the whole
// token bound is not kept.
func (c *renderCache) put(key [sha256.Size]byte, tokens []uint32) {
	if len(tokens) > c.maxTokens {
		return
	}
	own := append([]uint32(nil), tokens...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byKey[key]; e != nil {
		old := e.Value.(*renderEntry)
		c.tokens += len(own) - len(old.tokens)
		old.tokens = own
		c.order.MoveToFront(e)
	} else {
		c.byKey[key] = c.order.PushFront(&renderEntry{key: key, tokens: own})
		c.tokens += len(own)
	}
	for c.order.Len() > c.maxEntries || c.tokens > c.maxTokens {
		last := c.order.Back()
		ent := last.Value.(*renderEntry)
		c.order.Remove(last)
		delete(c.byKey, ent.key)
		c.tokens -= len(ent.tokens)
	}
}

// size reports the entries and token ids held.
func (c *renderCache) size() (entries, tokens int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len(), c.tokens
}
