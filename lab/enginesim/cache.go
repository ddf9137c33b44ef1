package enginesim

// blockPool is the engine's fixed set of KV blocks, after vLLM v1's
// BlockPool (vllm/v1/core/block_pool.py): blocks are reference-counted by
// the sequences using them; a full block is registered under its Dynamo
// sequence hash once computed, so that later prompts with the same prefix
// reuse it; blocks with no reference wait in a free queue, least recently
// freed first, and allocation takes the queue's head, evicting the cached
// hash it held.
//
// One deviation from vLLM: a freed block that holds no hash (a partial
// block) goes to the head of the queue instead of the tail, since reusing
// it first evicts nothing of value.
type blockPool struct {
	blocks []blockMeta
	byHash map[uint64]int32 // registered sequence hash → block
	// The free queue is a doubly linked list through blockMeta.prev/next.
	head, tail int32
	free       int // blocks in the free queue (reference count 0)
}

type blockMeta struct {
	hash       uint64 // sequence hash; valid when cached
	ref        int32  // sequences using the block
	prev, next int32  // free queue links; -1 at the ends
	cached     bool   // registered in byHash
	queued     bool   // in the free queue
}

const noBlock int32 = -1

func newBlockPool(n int) *blockPool {
	p := &blockPool{blocks: make([]blockMeta, n), byHash: make(map[uint64]int32, n), head: noBlock, tail: noBlock}
	for i := range p.blocks {
		p.blocks[i].prev, p.blocks[i].next = noBlock, noBlock
		p.pushTail(int32(i))
	}
	return p
}

func (p *blockPool) pushTail(b int32) {
	m := &p.blocks[b]
	m.prev, m.next, m.queued = p.tail, noBlock, true
	if p.tail != noBlock {
		p.blocks[p.tail].next = b
	} else {
		p.head = b
	}
	p.tail = b
	p.free++
}

func (p *blockPool) pushHead(b int32) {
	m := &p.blocks[b]
	m.prev, m.next, m.queued = noBlock, p.head, true
	if p.head != noBlock {
		p.blocks[p.head].prev = b
	} else {
		p.tail = b
	}
	p.head = b
	p.free++
}

func (p *blockPool) unlink(b int32) {
	m := &p.blocks[b]
	if m.prev != noBlock {
		p.blocks[m.prev].next = m.next
	} else {
		p.head = m.next
	}
	if m.next != noBlock {
		p.blocks[m.next].prev = m.prev
	} else {
		p.tail = m.prev
	}
	m.prev, m.next, m.queued = noBlock, noBlock, false
	p.free--
}

// lookup returns the block registered under sequence hash h.
func (p *blockPool) lookup(h uint64) (int32, bool) {
	b, ok := p.byHash[h]
	return b, ok
}

// acquire adds a reference to b, taking it off the free queue if needed.
func (p *blockPool) acquire(b int32) {
	m := &p.blocks[b]
	if m.queued {
		p.unlink(b)
	}
	m.ref++
}

// allocate takes the free queue's head for a new use. When that block
// held a cached hash, the hash is evicted and returned with evicted true.
// The caller checks p.free first; allocate on an empty queue returns
// noBlock.
func (p *blockPool) allocate() (b int32, evictedHash uint64, evicted bool) {
	b = p.head
	if b == noBlock {
		return noBlock, 0, false
	}
	p.unlink(b)
	m := &p.blocks[b]
	if m.cached {
		delete(p.byHash, m.hash)
		evictedHash, evicted = m.hash, true
		m.cached, m.hash = false, 0
	}
	m.ref = 1
	return b, evictedHash, evicted
}

// release drops one reference; a block left unreferenced joins the free
// queue (cached ones at the tail, to be evicted last).
func (p *blockPool) release(b int32) {
	m := &p.blocks[b]
	m.ref--
	if m.ref > 0 {
		return
	}
	if m.cached {
		p.pushTail(b)
	} else {
		p.pushHead(b)
	}
}

// register records that b holds the computed block of sequence hash h.
func (p *blockPool) register(b int32, h uint64) {
	m := &p.blocks[b]
	m.hash, m.cached = h, true
	p.byHash[h] = b
}

// clearHashes forgets every registered hash (vLLM reset_prefix_cache). The
// caller has checked that no block is referenced.
func (p *blockPool) clearHashes() {
	for i := range p.blocks {
		p.blocks[i].cached, p.blocks[i].hash = false, 0
	}
	clear(p.byHash)
}

// used is how many blocks sequences reference.
func (p *blockPool) used() int { return len(p.blocks) - p.free }
