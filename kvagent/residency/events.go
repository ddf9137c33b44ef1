package residency

import (
	"errors"
	"fmt"
	"slices"

	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kvagent/store"
)

// Events converts store changes, in order, into KV events.
//
// vLLM's BlockStored says "these blocks follow each other, the first one
// after parent_block_hash", and carries one block size and one LoRA. A
// store change is a set of blocks that need not be one chain (a Commit of
// several sequences, blocks recovered from disk), so each run of
// consecutive BlockStored changes of one tier is split into chains: parents
// first (a subscriber resolves a parent only if it has seen it), then one
// event per chain segment. Reordering stores of distinct keys among
// themselves does not change the resulting state; removals and clears are
// never reordered.
func Events(cs []store.Change) ([]kvevents.Event, error) {
	var out []kvevents.Event
	var errs []error
	for i := 0; i < len(cs); {
		c := cs[i]
		switch c.Kind {
		case kvevents.BlockStored:
			j := i + 1
			for j < len(cs) && cs[j].Kind == kvevents.BlockStored && cs[j].Tier == c.Tier {
				j++
			}
			evs, err := storedEvents(cs[i:j])
			out = append(out, evs...)
			if err != nil {
				errs = append(errs, err)
			}
			i = j
			continue
		case kvevents.BlockRemoved:
			medium, err := MediumOf(c.Tier)
			if err != nil {
				errs = append(errs, err)
				break
			}
			if len(c.Hashes) > 0 {
				out = append(out, kvevents.Event{Kind: kvevents.BlockRemoved, BlockHashes: slices.Clone(c.Hashes), Medium: medium})
			}
		case kvevents.AllBlocksCleared:
			// vLLM's AllBlocksCleared names no medium: the indexer drops
			// every tier this stream announced (host and disk), which
			// over-clears but is never stale.
			out = append(out, kvevents.Event{Kind: kvevents.AllBlocksCleared})
		default:
			errs = append(errs, fmt.Errorf("residency: change kind %v", c.Kind))
		}
		i++
	}
	return out, errors.Join(errs...)
}

type storedBlock struct {
	hash uint64
	meta store.Meta
}

func storedEvents(cs []store.Change) ([]kvevents.Event, error) {
	medium, err := MediumOf(cs[0].Tier)
	if err != nil {
		return nil, err
	}
	var blocks []storedBlock
	seen := map[uint64]bool{}
	for _, c := range cs {
		if len(c.Metas) != len(c.Hashes) {
			return nil, fmt.Errorf("residency: BlockStored change with %d hashes and %d metas", len(c.Hashes), len(c.Metas))
		}
		for i, h := range c.Hashes {
			if seen[h] {
				continue // announced twice in the run: once is enough
			}
			seen[h] = true
			blocks = append(blocks, storedBlock{hash: h, meta: c.Metas[i]})
		}
	}
	blocks = parentsFirst(blocks)
	var out []kvevents.Event
	for i := 0; i < len(blocks); {
		b := blocks[i]
		ev := kvevents.Event{
			Kind:        kvevents.BlockStored,
			BlockHashes: []uint64{b.hash},
			ParentHash:  b.meta.Parent,
			HasParent:   b.meta.HasParent,
			TokenIDs:    slices.Clone(b.meta.TokenIDs),
			BlockSize:   len(b.meta.TokenIDs),
			LoRAName:    b.meta.LoRAName,
			Medium:      medium,
		}
		j := i + 1
		for ; j < len(blocks); j++ {
			n := blocks[j]
			if !n.meta.HasParent || n.meta.Parent != blocks[j-1].hash || n.meta.LoRAName != b.meta.LoRAName || len(n.meta.TokenIDs) != ev.BlockSize {
				break
			}
			ev.BlockHashes = append(ev.BlockHashes, n.hash)
			ev.TokenIDs = append(ev.TokenIDs, n.meta.TokenIDs...)
		}
		out = append(out, ev)
		i = j
	}
	return out, nil
}

// parentsFirst orders blocks so that a block whose parent is among them
// comes after the parent (depth-first from each root, so chains stay
// contiguous), keeping the original order otherwise. Cycles (impossible
// with real hashes) are broken at the first block met.
func parentsFirst(blocks []storedBlock) []storedBlock {
	idx := make(map[uint64]int, len(blocks))
	for i, b := range blocks {
		idx[b.hash] = i
	}
	children := make(map[int][]int)
	var roots []int
	for i, b := range blocks {
		if p, ok := idx[b.meta.Parent]; ok && b.meta.HasParent && p != i {
			children[p] = append(children[p], i)
		} else {
			roots = append(roots, i)
		}
	}
	out := make([]storedBlock, 0, len(blocks))
	done := make([]bool, len(blocks))
	var stack []int
	visit := func(r int) {
		stack = append(stack[:0], r)
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if done[n] {
				continue
			}
			done[n] = true
			out = append(out, blocks[n])
			ch := children[n]
			for k := len(ch) - 1; k >= 0; k-- { // first child on top
				stack = append(stack, ch[k])
			}
		}
	}
	for _, r := range roots {
		visit(r)
	}
	for i := range blocks { // only blocks on a parent cycle remain
		if !done[i] {
			visit(i)
		}
	}
	return out
}
