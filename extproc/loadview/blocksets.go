package loadview

import "math/rand/v2"

// blockSets is Recent's table from a block's sequence hash to its holders:
// open addressing with linear probing and backward-shift deletion (Knuth,
// TAOCP vol. 3 §6.4, Algorithm R), in place of a map[uint64]holderSet.
//
// Why not the map: a ~8k-token decision records its 512-block chain (and
// Pending.Merge forgets the confirmed part of it), so per block the map was
// hashed five times (Merge's lookup and delete, Record's lookup and
// store, the evicted record's lookup), a third of Router.Decide's CPU
// (BENCHMARKS.md, issue 27 item 3). Here a lookup finds a slot whose set
// is then changed in place, a new key claims the empty slot the same probe
// ended on, and a key is hashed once per operation.
//
// The slot's position comes from the block hash xor a per-table random seed
// through murmur3's 64-bit finalizer (a bijection that mixes every bit into
// the top ones): block hashes of client prompts are computable offline
// (vLLM's hash seed is public), so without the seed a client could choose
// prompts whose blocks pile onto one run of slots. Even then a probe is
// bounded by the table's size, which is bounded by Recent's MaxEntries.
//
// A slot is empty when its set is (holderSet.len() == 0): a stored set
// always has a holder, so no separate flag is needed.
type blockSets struct {
	slots []blockSlot // len is a power of two, or 0
	shift uint        // 64 - log2(len(slots))
	n     int         // occupied slots
	seed  uint64
}

type blockSlot struct {
	key uint64
	set holderSet
}

// blockSetsMinSlots is the first table's size.
const blockSetsMinSlots = 64

func newBlockSets() blockSets {
	return blockSets{seed: rand.Uint64()}
}

// home is key's first probe position.
func (t *blockSets) home(key uint64) int {
	x := key ^ t.seed
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return int(x >> t.shift)
}

// find returns key's slot, or -1.
func (t *blockSets) find(key uint64) int {
	if t.n == 0 {
		return -1
	}
	mask := len(t.slots) - 1
	for i := t.home(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.set.head.seq == 0 {
			return -1
		}
		if s.key == key {
			return i
		}
	}
}

// get returns key's holders (the empty set when it has none); the result
// is a copy, for reading.
func (t *blockSets) get(key uint64) holderSet {
	if i := t.find(key); i >= 0 {
		return t.slots[i].set
	}
	return holderSet{}
}

// slot returns key's slot, claiming an empty one (whose set the caller
// must fill before any other call) when key has none. Slot positions
// move on growth and deletion: a position is valid until the next call
// that changes the table.
func (t *blockSets) slot(key uint64) int {
	// Grow at half full: linear probing's expected probes for a missing
	// key stay near 2.5 (Knuth §6.4), and misses are common here (new
	// pairs, evicted records whose pair was already forgotten).
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := len(t.slots) - 1
	for i := t.home(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.set.head.seq == 0 {
			s.key = key
			t.n++
			return i
		}
		if s.key == key {
			return i
		}
	}
}

func (t *blockSets) grow() {
	n := max(2*len(t.slots), blockSetsMinSlots)
	old := t.slots
	t.slots = make([]blockSlot, n)
	t.shift = uint(64 - log2(n))
	mask := n - 1
	for k := range old {
		s := &old[k]
		if s.set.head.seq == 0 {
			continue
		}
		i := t.home(s.key)
		for t.slots[i].set.head.seq != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = *s
	}
}

func log2(n int) int {
	l := 0
	for n > 1 {
		n >>= 1
		l++
	}
	return l
}

// removeAt empties slot i, moving later keys of its probe run back so that
// every key stays reachable from its home without tombstones.
func (t *blockSets) removeAt(i int) {
	mask := len(t.slots) - 1
	t.n--
	for {
		t.slots[i] = blockSlot{}
		j := i
		for {
			j = (j + 1) & mask
			if t.slots[j].set.head.seq == 0 {
				return
			}
			k := t.home(t.slots[j].key)
			// The key at j stays when its home lies cyclically in (i, j].
			if i <= j {
				if i < k && k <= j {
					continue
				}
			} else if i < k || k <= j {
				continue
			}
			break
		}
		t.slots[i] = t.slots[j]
		i = j
	}
}
