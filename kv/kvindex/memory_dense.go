package kvindex

import (
	"math/bits"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// The dense walk: Match's cost when a chain's first block is held by a
// large share of the fleet (a shared system prompt on every worker).
//
// The merge walk in memory.go visits every still-matching worker at every
// block: chain × holders (BenchmarkMemoryMatch: 32-block chains 1.8 µs at
// 8 workers, 73 µs at 512; 256-block chains 304 µs at 512). Here the
// still-matching workers are bitsets over worker slots, one per tier t
// (bit w set while w has held every block so far on t or faster), and a
// block's holders are bitsets of the same shape, cached on the block
// (holderBits) while its holders do not change: advancing one block is
// NumTiers × slots/64 word operations, and a worker costs work only at the
// block where it drops out of a tier. A walk is chain × slots/64 + holders
// instead of chain × holders. Once few workers still match (denseToMerge),
// the rest of the chain goes to the merge walk, whose cost per block is
// then the smaller one.
//
// It is used only when the first block's holders fill at least
// 1/denseMinDensity of the worker slots: with a few holders among many
// slots, the merge walk's per-holder cost is the smaller one.

const (
	// denseMinHolders: below this many holders of the first block the
	// merge walk is as cheap as any (and a bitset cache not worth it).
	denseMinHolders = 64
	// denseMinDensity bounds the word operations per holder: the walk
	// runs only when slots <= denseMinDensity × holders.
	denseMinDensity = 16
	// holderBitsMin: blocks with fewer holders are turned into bitsets on
	// the fly (one pass over the holders) rather than cached.
	holderBitsMin = 32
)

// denseWalk reports whether a chain whose first block has holders holders,
// in a registry of slots worker slots, takes the dense walk.
func denseWalk(holders, slots int) bool {
	return holders >= denseMinHolders && slots <= denseMinDensity*holders
}

// holderBits is a block's holders as bitsets: bit w of tier(t) is set
// when worker slot w holds the block on tier t or a faster one. The tiers
// share one array, tier after tier, so a block's bitsets are one
// allocation on adjacent cache lines (one dependent load from the block,
// not one per tier).
type holderBits struct {
	words int
	all   []uint64 // NumTiers × words
}

// tier is tier t's bitset.
func (h *holderBits) tier(t int) []uint64 { return h.all[t*h.words : (t+1)*h.words] }

// fill sets h from holders (sorted by worker), reusing h's array.
func (h *holderBits) fill(holders []holder, words int) {
	h.words = words
	h.all = clearWords(h.all, int(kvfleet.NumTiers)*words)
	for _, x := range holders {
		if int(x.worker()) >= words*64 {
			break // sorted: the rest are beyond the walk's slots too
		}
		k, bit := int(x.worker()/64), uint64(1)<<(x.worker()%64)
		for t := int(x.fastestTier()); t < int(kvfleet.NumTiers); t++ {
			h.all[t*words+k] |= bit
		}
	}
}

func clearWords(b []uint64, n int) []uint64 {
	if cap(b) < n {
		return make([]uint64, n)
	}
	b = b[:n]
	clear(b)
	return b
}

// bitsOf returns b's holders as bitsets covering at least words words:
// the cached ones when b has many holders (building them if a write
// dropped them), else scratch filled on the fly. The caller holds b's
// shard read-locked; concurrent Matches may build the same cache, and
// either copy is right.
func (b *block) bitsOf(words int, scratch *holderBits) *holderBits {
	if len(b.holders) < holderBitsMin {
		scratch.fill(b.holders, words)
		return scratch
	}
	if c := b.bits.Load(); c != nil && c.words >= words {
		return c
	}
	c := new(holderBits)
	last := int(b.holders[len(b.holders)-1].worker())
	c.fill(b.holders, max(words, last/64+1))
	b.bits.Store(c)
	return c
}

// denseScratch is the dense walk's reusable state.
type denseScratch struct {
	alive [kvfleet.NumTiers][]uint64
	// dropped[w][t] is the depth at which slot w stopped matching on
	// tier t; read only for slots whose alive bit is clear, or after
	// settle. One slot's depths share a line: the result pass reads them
	// together.
	dropped [][kvfleet.NumTiers]int32
	first   []uint32 // holders of the first block
	onFly   holderBits
}

// matchDense walks chain from its first block b (read through
// sc.window, which the caller opened on chain) with per-tier bitsets.
// The result is appended to into.
func (m *Memory) matchDense(sc *matchScratch, chain []uint64, b *block, names []workerName, into *Match) {
	d := &sc.dense
	words := (len(names) + 63) / 64
	for t := range d.alive {
		d.alive[t] = clearWords(d.alive[t], words)
	}
	if cap(d.dropped) < words*64 {
		d.dropped = make([][kvfleet.NumTiers]int32, words*64)
	}
	d.dropped = d.dropped[:words*64]
	d.first = d.first[:0]
	for _, h := range b.holders {
		if int(h.worker()) < len(names) {
			d.first = append(d.first, h.worker())
		}
	}
	// Every holder starts alive on every tier; block 0 itself then drops
	// those that hold it only on slower tiers (depth 0 there).
	b0 := b.bitsOf(words, &d.onFly)
	copy(d.alive[kvfleet.NumTiers-1], b0.tier(int(kvfleet.NumTiers)-1))
	for t := range kvfleet.NumTiers - 1 {
		copy(d.alive[t], d.alive[kvfleet.NumTiers-1])
	}
	d.advance(b0, 0)

	end := int32(len(chain))
	switched := false
	for depth := 1; depth < len(chain); depth++ {
		if d.aliveCount() <= denseToMerge {
			// Few still match (the conversations behind a shared prompt
			// diverge): the merge walk's per-live-worker cost is now below
			// the bitsets' per-block cost.
			d.toMerge(sc)
			m.mergeWalk(sc, chain, int32(depth))
			switched = true
			break
		}
		var live bool
		if blk := sc.window.at(depth); blk != nil {
			blk.touch()
			live = d.advance(blk.bitsOf(words, &d.onFly), int32(depth))
		} else {
			live = d.advance(&holderBits{}, int32(depth))
		}
		if !live {
			end = int32(depth)
			break
		}
	}

	if !switched {
		d.settle(end)
	}
	for _, w := range d.first {
		if !names[w].live || switched && d.alive[kvfleet.NumTiers-1][w/64]&(1<<(w%64)) != 0 {
			continue // gone, or still matching when the merge walk took over
		}
		dw := &d.dropped[w]
		if dw[kvfleet.NumTiers-1] > 0 {
			var dep kvfleet.Depths
			for t := range dep {
				dep[t] = int(dw[t])
			}
			into.Add(names[w].id, dep)
		}
	}
	if switched {
		sc.results(names, into)
	}
}

// denseToMerge: once this few workers still match, matchDense hands them
// to the merge walk (toMerge). Advancing the bitsets costs NumTiers ×
// slots/64 words per block, plus a pass over the block's holders when they
// are not cached (holderBits.fill, a quarter of the dense walk's profile
// at 512 workers); the merge walk costs a search per live worker.
const denseToMerge = 32

// settle records end as the depth, on each tier, of every slot still
// alive there when the walk ended (at the chain's end or at a block no
// slot holds), so that every slot's depths are then in dropped.
func (d *denseScratch) settle(end int32) {
	for t := range d.alive {
		for k, a := range d.alive[t] {
			for ; a != 0; a &= a - 1 {
				d.dropped[k*64+bits.TrailingZeros64(a)][t] = end
			}
		}
	}
}

// aliveCount is how many slots still match on some tier.
func (d *denseScratch) aliveCount() int {
	n := 0
	for _, a := range d.alive[kvfleet.NumTiers-1] {
		n += bits.OnesCount64(a)
	}
	return n
}

// toMerge turns the slots still alive into the merge walk's live list and
// states (sorted by worker, as the walk needs): a slot's depths on the
// tiers it dropped out of are final; its slowest tier is the fastest one
// on which it is still alive.
func (d *denseScratch) toMerge(sc *matchScratch) {
	sc.states = sc.states[:0]
	sc.live = sc.live[:0]
	for k, a := range d.alive[kvfleet.NumTiers-1] {
		for ; a != 0; a &= a - 1 {
			w := uint32(k*64 + bits.TrailingZeros64(a))
			bit := uint64(1) << (w % 64)
			st := matchState{worker: w}
			slowest := uint8(kvfleet.NumTiers - 1)
			for t := range kvfleet.NumTiers {
				if d.alive[t][k]&bit != 0 {
					slowest = uint8(t)
					break
				}
				st.depths[t] = d.dropped[w][t]
			}
			sc.live = append(sc.live, matchLive{worker: w, slowest: slowest, state: int32(len(sc.states))})
			sc.states = append(sc.states, st)
		}
	}
}

// advance drops, on each tier, the alive slots that do not hold the block
// at depth on that tier or faster, recording where they stopped. It
// reports whether any slot is still alive on some tier (the slowest tier's
// set holds every other's).
func (d *denseScratch) advance(h *holderBits, depth int32) bool {
	for t := range d.alive {
		alive, held := d.alive[t], h.tier(t)
		for k, a := range alive {
			var hw uint64
			if k < h.words {
				hw = held[k]
			}
			gone := a &^ hw
			if gone == 0 {
				continue
			}
			alive[k] = a & hw
			for gone != 0 {
				d.dropped[k*64+bits.TrailingZeros64(gone)][t] = depth
				gone &= gone - 1
			}
		}
	}
	for _, a := range d.alive[kvfleet.NumTiers-1] {
		if a != 0 {
			return true
		}
	}
	return false
}
