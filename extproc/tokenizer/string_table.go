package tokenizer

import (
	"hash/maphash"
	"math/bits"
)

// stringTable holds strings by entry number and finds an entry's number
// from its string, with no pointer the garbage collector must follow:
// every string lives in one byte slice, addressed by end offsets, and the
// hash index holds entry numbers. A vocabulary kept as map[string]uint32
// and [][]byte instead is some 300,000 pointers (Qwen3's 151,000 tokens,
// twice) that every GC cycle of the extproc marks again (issue 27 item 3).
type stringTable struct {
	data  []byte   // the strings of entries 0…n-1, back to back
	end   []uint32 // entry → end of its string in data (its start is end[e-1], or 0)
	ids   []uint32 // entry → the id lookup returns; nil: the entry number itself
	slots []uint32 // open addressing, linear probing: 1+entry of an indexed string, 0 = empty
	seed  maphash.Seed
}

// newStringTable builds the table of strs. ids, when non-nil, gives each
// entry's id (else an entry's id is its number). index says which entries
// lookup finds (nil: every non-empty one); the first of two equal indexed
// strings keeps the lookup.
func newStringTable(strs []string, ids []uint32, index func(entry int) bool) stringTable {
	t := stringTable{end: make([]uint32, len(strs)), ids: ids, seed: maphash.MakeSeed()}
	indexed := func(e int) bool { return strs[e] != "" && (index == nil || index(e)) }
	size, n := 0, 0
	for e, s := range strs {
		size += len(s)
		if indexed(e) {
			n++
		}
	}
	t.data = make([]byte, 0, size)
	for e, s := range strs {
		t.data = append(t.data, s...)
		t.end[e] = uint32(len(t.data))
	}
	// At most half full: a miss (most lookups) ends within a probe or two.
	t.slots = make([]uint32, 1<<bits.Len(uint(2*n+1)))
	mask := uint64(len(t.slots) - 1)
	for e, s := range strs {
		if !indexed(e) {
			continue
		}
		i := maphash.String(t.seed, s) & mask
		for t.slots[i] != 0 && string(t.entry(t.slots[i]-1)) != s {
			i = (i + 1) & mask
		}
		if t.slots[i] == 0 {
			t.slots[i] = uint32(e) + 1
		}
	}
	return t
}

// entry is entry e's string as bytes (nil when out of range); it shares
// the table's memory, which is never written after newStringTable.
func (t *stringTable) entry(e uint32) []byte {
	if int(e) >= len(t.end) {
		return nil
	}
	start := uint32(0)
	if e > 0 {
		start = t.end[e-1]
	}
	return t.data[start:t.end[e]]
}

// lookup returns the id of the indexed entry whose string is s.
func (t *stringTable) lookup(s string) (uint32, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	for i := maphash.String(t.seed, s) & mask; t.slots[i] != 0; i = (i + 1) & mask {
		if e := t.slots[i] - 1; string(t.entry(e)) == s {
			if t.ids != nil {
				return t.ids[e], true
			}
			return e, true
		}
	}
	return 0, false
}

// entries is the number of entries.
func (t *stringTable) entries() int { return len(t.end) }
