package replay

import "container/list"

// PooledLRUHitRatio is the hit ratio of one LRU prefix cache holding
// capacityBlocks blocks of blockSize tokens (pass the fleet's total GPU
// capacity, workers × GPU blocks) serving the whole trace in arrival order.
// It is the bar for a router: a fleet whose caches were pooled into one,
// with no routing mistakes, still evicts. The infinite-cache ideal
// (IdealHitRatio) is the bar for capacity.
//
// As in IdealHitRatio a request's hit is its longest cached prefix of full
// blocks, capped so that the last prompt token is computed. Its prompt
// blocks are then touched from the last to the first, so that the prefix
// root is the most recently used: vLLM frees a finished request's blocks
// in reverse order "so that the tail blocks are evicted first"
// (vllm/v1/core/kv_cache_manager.py, KVCacheManager.free), and evicting a
// root would strand every block after it. Output blocks are not cached:
// the trace's next turn names its own prompt blocks.
func PooledLRUHitRatio(reqs []TraceRequest, blockSize, capacityBlocks int) float64 {
	if blockSize <= 0 || capacityBlocks <= 0 {
		return 0
	}
	lru := list.New() // front = most recently used; values are hashes
	where := make(map[uint64]*list.Element, capacityBlocks)
	return singleCacheHitRatio(reqs, blockSize,
		func(h uint64) bool { _, ok := where[h]; return ok },
		func(chain []uint64) {
			for i := len(chain) - 1; i >= 0; i-- {
				h := chain[i]
				if e, ok := where[h]; ok {
					lru.MoveToFront(e)
					continue
				}
				where[h] = lru.PushFront(h)
				if lru.Len() > capacityBlocks {
					old := lru.Back()
					delete(where, old.Value.(uint64))
					lru.Remove(old)
				}
			}
		})
}
