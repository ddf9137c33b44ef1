package store

import "container/heap"

// entry is one resident block in one tier.
type entry struct {
	key     Key
	meta    Meta
	slot    int32  // host arena slot or disk slot
	sum     uint64 // blockSum of the data
	gen     uint64 // disk write generation (disk tier only)
	pins    int32
	lastUse uint64 // logical clock of the last store or hit
	heapIdx int    // position in tierIndex.leaves, -1 when not evictable
	dead    bool   // dropped from the index while pinned: free the slot on the last unpin
	root    bool   // its parent link would close a cycle: treated as a root
}

// tierIndex is the residency index of one tier with its eviction order.
//
// Eviction is leaf-first over the prefix lineage: a block whose child (a
// block naming it as Parent, same namespace) is resident in this tier is
// never evicted, because evicting a prefix while its continuation stays
// makes the continuation unreachable (lookups walk chains from the root).
// Among evictable blocks (leaves, unpinned) the least recently used goes
// first. Evictable blocks live in a min-heap on lastUse, so choosing a
// victim is O(1) and every change is O(log n), however long the chains.
type tierIndex struct {
	tier     Tier
	capacity int
	entries  map[Key]*entry
	children map[Key]int32 // resident children per parent key, whether or not the parent is resident
	leaves   leafHeap
	pinned   int // entries with pins > 0, dead ones included (they hold their slot until the last unpin)
}

func newTierIndex(t Tier, capacity int) *tierIndex {
	return &tierIndex{tier: t, capacity: capacity, entries: map[Key]*entry{}, children: map[Key]int32{}}
}

// parentKey is the key of e's parent, if it has one. A block naming itself
// as parent, or whose parent link would close a cycle, is treated as a
// root: parent links come from clients, and a cycle would leave no leaf to
// evict.
func parentKey(e *entry) (Key, bool) {
	if !e.meta.HasParent || e.meta.Parent == e.key.Hash || e.root {
		return Key{}, false
	}
	return Key{Namespace: e.key.Namespace, Hash: e.meta.Parent}, true
}

func (t *tierIndex) insert(e *entry) {
	e.heapIdx = -1
	if p, ok := parentKey(e); ok && t.children[e.key] > 0 && t.descendsFrom(p, e.key) {
		e.root = true
	}
	t.entries[e.key] = e
	if p, ok := parentKey(e); ok {
		t.children[p]++
		if pe := t.entries[p]; pe != nil {
			t.refresh(pe)
		}
	}
	t.refresh(e)
}

// descendsFrom reports whether resident block k has anc among its resident
// ancestors (k itself included). Only asked when a block arrives after its
// children (so usually never), and the index holds no cycle, so the walk
// ends.
func (t *tierIndex) descendsFrom(k, anc Key) bool {
	for range len(t.entries) + 1 {
		if k == anc {
			return true
		}
		e := t.entries[k]
		if e == nil {
			return false
		}
		p, ok := parentKey(e)
		if !ok {
			return false
		}
		k = p
	}
	return false
}

func (t *tierIndex) remove(e *entry) {
	delete(t.entries, e.key)
	if e.heapIdx >= 0 {
		heap.Remove(&t.leaves, e.heapIdx)
	}
	if p, ok := parentKey(e); ok {
		if t.children[p]--; t.children[p] <= 0 {
			delete(t.children, p)
		}
		if pe := t.entries[p]; pe != nil {
			t.refresh(pe)
		}
	}
}

func (t *tierIndex) evictable(e *entry) bool {
	return e.pins == 0 && t.children[e.key] == 0
}

// refresh puts e in or out of the eviction heap after its pins or
// children changed.
func (t *tierIndex) refresh(e *entry) {
	switch want := t.evictable(e); {
	case want && e.heapIdx < 0:
		heap.Push(&t.leaves, e)
	case !want && e.heapIdx >= 0:
		heap.Remove(&t.leaves, e.heapIdx)
	}
}

func (t *tierIndex) touch(e *entry, now uint64) {
	e.lastUse = now
	if e.heapIdx >= 0 {
		heap.Fix(&t.leaves, e.heapIdx)
	}
}

func (t *tierIndex) pin(e *entry) {
	if e.pins == 0 {
		t.pinned++
	}
	e.pins++
	t.refresh(e)
}

func (t *tierIndex) unpin(e *entry) {
	if e.pins > 0 {
		e.pins--
		if e.pins == 0 {
			t.pinned--
		}
	}
	if !e.dead {
		t.refresh(e)
	}
}

// victim is the block to evict next: the least recently used unpinned
// leaf, or nil when there is none (every leaf pinned; their ancestors stay
// too, by the lineage rule).
func (t *tierIndex) victim() *entry {
	if len(t.leaves) > 0 {
		return t.leaves[0]
	}
	return nil
}

type leafHeap []*entry

func (h leafHeap) Len() int           { return len(h) }
func (h leafHeap) Less(i, j int) bool { return h[i].lastUse < h[j].lastUse }
func (h leafHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *leafHeap) Push(x any) {
	e := x.(*entry)
	e.heapIdx = len(*h)
	*h = append(*h, e)
}
func (h *leafHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.heapIdx = -1
	return e
}
