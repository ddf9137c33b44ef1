package tokenizer

// bpeModel is a byte-level BPE model working on raw bytes: the vocabulary
// and merges of tokenizer.json are translated from the byte-level alphabet
// at load time, so encoding never builds the alphabet's strings.
type bpeModel struct {
	byteID       [256]uint32
	merges       map[uint64]uint64 // pairKey(left, right) → rank<<32 | merged id
	rawVocab     stringTable       // id → raw bytes (Decode); indexed by them only for ignore_merges
	ignoreMerges bool
}

func pairKey(left, right uint32) uint64 { return uint64(left)<<32 | uint64(right) }

// smallWord is the symbol count up to which the quadratic merge loop (a scan
// over a few cached ranks) beats the heap.
const smallWord = 48

const noRank = ^uint32(0)

// encodeWord appends the ids of one pre-token (raw bytes, non-empty).
// Merges are applied lowest rank first, leftmost first among equal ranks,
// which is the order of tokenizers' BPE Word::merge_all (models/bpe/word.rs).
// b, when non-nil, is looked at inside the long-word loop so that a
// cancelled encode stops mid-word; the ids are then incomplete (the caller
// sees b's error).
func (m *bpeModel) encodeWord(dst []uint32, word string, b *budget) []uint32 {
	if m.ignoreMerges {
		// models/bpe/model.rs: with ignore_merges a word that is itself in
		// the vocabulary is emitted whole.
		if id, ok := m.rawVocab.lookup(word); ok {
			return append(dst, id)
		}
	}
	if len(word) == 1 {
		return append(dst, m.byteID[word[0]])
	}
	if len(word) > smallWord {
		return m.encodeLongWord(dst, word, b)
	}
	var ids, ranks, merged [smallWord]uint32
	n := len(word)
	for i := 0; i < n; i++ {
		ids[i] = m.byteID[word[i]]
	}
	for i := 0; i+1 < n; i++ {
		ranks[i], merged[i] = m.lookup(ids[i], ids[i+1])
	}
	for n > 1 {
		best := -1
		bestRank := noRank
		for i := 0; i+1 < n; i++ {
			if ranks[i] < bestRank {
				best, bestRank = i, ranks[i]
			}
		}
		if best < 0 {
			break
		}
		ids[best] = merged[best]
		copy(ids[best+1:n-1], ids[best+2:n])
		if best+2 < n-1 {
			copy(ranks[best+1:n-2], ranks[best+2:n-1])
			copy(merged[best+1:n-2], merged[best+2:n-1])
		}
		n--
		if best > 0 {
			ranks[best-1], merged[best-1] = m.lookup(ids[best-1], ids[best])
		}
		if best+1 < n {
			ranks[best], merged[best] = m.lookup(ids[best], ids[best+1])
		}
	}
	return append(dst, ids[:n]...)
}

func (m *bpeModel) lookup(left, right uint32) (rank, merged uint32) {
	v, ok := m.merges[pairKey(left, right)]
	if !ok {
		return noRank, 0
	}
	return uint32(v >> 32), uint32(v)
}

// mergeCheckEvery is how many heap pops pass between looks at the context
// in encodeLongWord (a power of two): ~5 ms of merging at the measured
// 0.3 µs per pop.
const mergeCheckEvery = 1 << 14

// mergeCandidate is a queued merge of the symbol at pos with its right
// neighbour; heap order is (rank, pos).
type mergeCandidate struct {
	rank uint32
	pos  int32
}

func (a mergeCandidate) less(b mergeCandidate) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

// encodeLongWord is the same merge order with a binary heap and a linked
// list of symbols, O(n log n) for long words (CJK runs, base64, minified
// code). Stale heap entries are skipped when popped, as in word.rs.
func (m *bpeModel) encodeLongWord(dst []uint32, word string, b *budget) []uint32 {
	n := len(word)
	ids := make([]uint32, n)
	next := make([]int32, n)
	prev := make([]int32, n)
	for i := 0; i < n; i++ {
		ids[i] = m.byteID[word[i]]
		next[i] = int32(i + 1)
		prev[i] = int32(i - 1)
	}
	next[n-1] = -1
	heap := make([]mergeCandidate, 0, n)
	push := func(c mergeCandidate) {
		heap = append(heap, c)
		for k := len(heap) - 1; k > 0; {
			parent := (k - 1) / 2
			if !heap[k].less(heap[parent]) {
				break
			}
			heap[k], heap[parent] = heap[parent], heap[k]
			k = parent
		}
	}
	pop := func() mergeCandidate {
		top := heap[0]
		last := len(heap) - 1
		heap[0] = heap[last]
		heap = heap[:last]
		for k := 0; ; {
			l, r, small := 2*k+1, 2*k+2, k
			if l < len(heap) && heap[l].less(heap[small]) {
				small = l
			}
			if r < len(heap) && heap[r].less(heap[small]) {
				small = r
			}
			if small == k {
				break
			}
			heap[k], heap[small] = heap[small], heap[k]
			k = small
		}
		return top
	}
	for i := 0; i+1 < n; i++ {
		if rank, _ := m.lookup(ids[i], ids[i+1]); rank != noRank {
			push(mergeCandidate{rank, int32(i)})
		}
	}
	alive := make([]bool, n)
	for i := range alive {
		alive[i] = true
	}
	for steps := 0; len(heap) > 0; steps++ {
		if b != nil && steps&(mergeCheckEvery-1) == mergeCheckEvery-1 && !b.alive() {
			return dst
		}
		c := pop()
		pos := c.pos
		right := next[pos]
		if !alive[pos] || right < 0 {
			continue
		}
		rank, merged := m.lookup(ids[pos], ids[right])
		if rank != c.rank {
			continue // the pair changed since this candidate was queued
		}
		ids[pos] = merged
		alive[right] = false
		next[pos] = next[right]
		if next[pos] >= 0 {
			prev[next[pos]] = pos
		}
		if p := prev[pos]; p >= 0 {
			if r, _ := m.lookup(ids[p], ids[pos]); r != noRank {
				push(mergeCandidate{r, p})
			}
		}
		if q := next[pos]; q >= 0 {
			if r, _ := m.lookup(ids[pos], ids[q]); r != noRank {
				push(mergeCandidate{r, pos})
			}
		}
	}
	for i := int32(0); i >= 0; i = next[i] {
		dst = append(dst, ids[i])
	}
	return dst
}
