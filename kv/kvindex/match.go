package kvindex

import (
	"context"
	"iter"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// Match is Index.Match's answer: each worker that holds at least the first
// block of the chain, with its matched depths. Workers holding nothing are
// absent; a worker appears once.
//
// It is two parallel slices, filled into a buffer the caller owns and
// reuses, rather than a map built per call: at 512 workers sharing a
// system prompt a map of 451 entries was a quarter of the memory index's
// Match (runtime.mapassign, BENCHMARKS.md "Issue 27"), a cost per holder
// that no walk over the chain removes. Appending to reused slices is a
// copy per holder. Lookup by worker, which only some callers need (the
// request path lists the pool's workers with their depths), builds a map
// index on its first use and keeps it, cleared, across Resets.
//
// The zero value is an empty Match; a nil *Match reads as empty.
type Match struct {
	workers []kvfleet.WorkerID
	depths  []kvfleet.Depths
	// byWorker indexes workers[:indexed] (built by Lookup; nil until a
	// Lookup needs it).
	byWorker map[kvfleet.WorkerID]int32
	indexed  int
}

// linearLookupMax: up to this many entries Lookup scans; past it, it
// indexes. A scan of a few string compares beats hashing.
const linearLookupMax = 8

// Reset empties m, keeping its storage for the next fill.
func (m *Match) Reset() {
	clear(m.workers) // drop the endpoint strings' references
	m.workers = m.workers[:0]
	m.depths = m.depths[:0]
	if m.indexed > 0 {
		clear(m.byWorker)
		m.indexed = 0
	}
}

// Len is the number of workers in m.
func (m *Match) Len() int {
	if m == nil {
		return 0
	}
	return len(m.workers)
}

// At returns entry i (0 <= i < Len).
func (m *Match) At(i int) (kvfleet.WorkerID, kvfleet.Depths) {
	return m.workers[i], m.depths[i]
}

// SetDepthsAt replaces entry i's depths.
func (m *Match) SetDepthsAt(i int, d kvfleet.Depths) { m.depths[i] = d }

// All yields every entry, in m's order.
func (m *Match) All() iter.Seq2[kvfleet.WorkerID, kvfleet.Depths] {
	return func(yield func(kvfleet.WorkerID, kvfleet.Depths) bool) {
		for i := range m.Len() {
			if !yield(m.workers[i], m.depths[i]) {
				return
			}
		}
	}
}

// Add appends w with d. The caller knows w is not in m yet (an index
// reports each worker once); Set is for when it may be.
func (m *Match) Add(w kvfleet.WorkerID, d kvfleet.Depths) {
	m.workers = append(m.workers, w)
	m.depths = append(m.depths, d)
}

// Lookup returns w's depths and whether w is in m.
func (m *Match) Lookup(w kvfleet.WorkerID) (kvfleet.Depths, bool) {
	if i := m.find(w); i >= 0 {
		return m.depths[i], true
	}
	return kvfleet.Depths{}, false
}

// Set sets w's depths, adding w if it is not in m.
func (m *Match) Set(w kvfleet.WorkerID, d kvfleet.Depths) {
	if i := m.find(w); i >= 0 {
		m.depths[i] = d
		return
	}
	m.Add(w, d)
}

// find returns w's position in m, or -1.
func (m *Match) find(w kvfleet.WorkerID) int {
	n := m.Len()
	if n <= linearLookupMax {
		for i := range n {
			if m.workers[i] == w {
				return i
			}
		}
		return -1
	}
	if m.byWorker == nil {
		m.byWorker = make(map[kvfleet.WorkerID]int32, n)
	}
	for ; m.indexed < n; m.indexed++ {
		m.byWorker[m.workers[m.indexed]] = int32(m.indexed)
	}
	if i, ok := m.byWorker[w]; ok {
		return int(i)
	}
	return -1
}

// Map copies m into a map: for tests and tools that compare or print whole
// results. The request path reads m in place.
func (m *Match) Map() map[kvfleet.WorkerID]kvfleet.Depths {
	out := make(map[kvfleet.WorkerID]kvfleet.Depths, m.Len())
	for w, d := range m.All() {
		out[w] = d
	}
	return out
}

// MatchMap runs idx.Match into a fresh buffer and returns it as a map: for
// tools and tests that read one result whole.
func MatchMap(ctx context.Context, idx Index, chain []uint64) (map[kvfleet.WorkerID]kvfleet.Depths, error) {
	var m Match
	if err := idx.Match(ctx, chain, &m); err != nil {
		return nil, err
	}
	return m.Map(), nil
}
