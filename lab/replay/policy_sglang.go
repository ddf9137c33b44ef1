package replay

import (
	"slices"
	"time"
)

// PolicySGLang is SGLang's cache-aware router (sgl-project/sglang,
// sgl-router/src/policies/cache_aware.rs, with the router's command-line
// defaults of sgl-router/py_src/sglang_router/router_args.py at 083d6013:
// cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold
// 1.5, eviction_interval_secs 120, max_tree_size 2^26).
//
// Per request: when the router's in-flight counts are imbalanced — the
// spread max − min above balance_abs_threshold and max above
// balance_rel_threshold × min, both — it sends the request to the least
// loaded worker. Otherwise it matches the prompt against an approximate
// radix tree of what it sent each worker before (no engine feedback): if
// the longest match covers more than cache_threshold of the prompt, the
// worker that holds that match gets it, else the worker whose tree is
// smallest. Either way the prompt is inserted into the chosen worker's
// tree.
//
// SGLang's tree holds characters of the request text; the replay's holds
// the prompt's KV block hashes (prefix-closed, so the same longest-prefix
// question), and counts its size and max_tree_size in tokens. With 2^26
// the eviction never binds on the replay's traces, as it rarely does in
// SGLang: the tree believes every worker still caches all it was sent.
const PolicySGLang = "sglang"

// The router's defaults (router_args.py).
const (
	sglangCacheThreshold   = 0.3
	sglangBalanceAbs       = 64
	sglangBalanceRel       = 1.5
	sglangEvictionInterval = 120 * time.Second
	sglangMaxTreeTokens    = 1 << 26
)

// sglangTree is the router's approximate tree: per worker, the block
// hashes it was sent and when each was last sent.
type sglangTree struct {
	blocks    []map[uint64]time.Duration
	lastEvict time.Duration
}

func newSGLangTree(workers int) *sglangTree {
	t := &sglangTree{blocks: make([]map[uint64]time.Duration, workers)}
	for i := range t.blocks {
		t.blocks[i] = map[uint64]time.Duration{}
	}
	return t
}

// match is the longest prefix of chain any worker's tree holds, and the
// worker holding it (the most recently used holder when several do).
func (t *sglangTree) match(chain []uint64) (int, int) {
	matched, who := 0, -1
	for i, h := range chain {
		holder, last := -1, time.Duration(-1)
		for w, b := range t.blocks {
			if at, ok := b[h]; ok && at > last {
				holder, last = w, at
			}
		}
		if holder < 0 {
			break
		}
		matched, who = i+1, holder
	}
	return matched, who
}

// smallest is the worker whose tree holds the fewest blocks (the first of
// equals, as the tree's tenant scan keeps the first minimum).
func (t *sglangTree) smallest() int {
	best := 0
	for w, b := range t.blocks {
		if len(b) < len(t.blocks[best]) {
			best = w
		}
	}
	return best
}

func (t *sglangTree) insert(w int, chain []uint64, at time.Duration) {
	for _, h := range chain {
		t.blocks[w][h] = at
	}
}

// evict trims each worker's tree to maxBlocks, least recently sent first,
// every eviction interval (the router's background thread).
func (t *sglangTree) evict(at time.Duration, maxBlocks int) {
	if at-t.lastEvict < sglangEvictionInterval {
		return
	}
	t.lastEvict = at
	for _, b := range t.blocks {
		if len(b) <= maxBlocks {
			continue
		}
		type entry struct {
			h  uint64
			at time.Duration
		}
		es := make([]entry, 0, len(b))
		for h, a := range b {
			es = append(es, entry{h, a})
		}
		slices.SortFunc(es, func(x, y entry) int { return int(x.at - y.at) })
		for _, e := range es[:len(es)-maxBlocks] {
			delete(b, e.h)
		}
	}
}

// pickSGLang routes one request as SGLang's cache-aware router does.
func (s *simulation) pickSGLang(chain []uint64, at time.Duration) int {
	if s.sglang == nil {
		s.sglang = newSGLangTree(len(s.workers))
	}
	t := s.sglang
	t.evict(at, sglangMaxTreeTokens/s.opt.BlockSize)
	minLoad, maxLoad, least := 0, 0, 0
	for j, wk := range s.workers {
		l := s.load.Snapshot(wk.ID).InflightRequests
		if j == 0 || l < minLoad {
			minLoad, least = l, j
		}
		maxLoad = max(maxLoad, l)
	}
	var w int
	switch matched, holder := t.match(chain); {
	case maxLoad-minLoad > sglangBalanceAbs && float64(maxLoad) > float64(minLoad)*sglangBalanceRel:
		w = least
	case len(chain) > 0 && float64(matched)/float64(len(chain)) > sglangCacheThreshold:
		w = holder
	default:
		w = t.smallest()
	}
	t.insert(w, chain, at)
	return w
}
