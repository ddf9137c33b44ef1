package main

import (
	"container/list"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvstream"
)

// demoEngine is the smallest stand-in for a vLLM worker that the demo needs:
// a prefix cache of fixed-size blocks with LRU eviction that publishes its
// changes as vLLM KV events on a real ZMQ PUB socket (with a replay
// endpoint). The full engine simulator comes with `kvgate-lab enginesim`.
type demoEngine struct {
	name      string
	pub       *kvstream.Publisher
	blockSize int
	capacity  int
	encoding  kvevents.Encoding
	lru       *list.List               // front = most recent; values are engine block hashes
	blocks    map[uint64]*list.Element // engine block hash → its LRU element
	requests  int
	published uint64 // batches sent, live or only to the replay buffer
	hitBlocks int
	allBlocks int
	// skipNext makes the next batch reach only the replay buffer, as if the
	// network had dropped it: the indexer must notice the gap and repair it.
	skipNext bool
}

func newDemoEngine(name string, blockSize, capacity int, enc kvevents.Encoding) (*demoEngine, error) {
	pub, err := kvstream.NewPublisher(kvstream.PublisherConfig{
		Endpoint:       "tcp://127.0.0.1:0",
		ReplayEndpoint: "tcp://127.0.0.1:0",
	})
	if err != nil {
		return nil, fmt.Errorf("engine %s: %w", name, err)
	}
	return &demoEngine{
		name: name, pub: pub, blockSize: blockSize, capacity: capacity, encoding: enc,
		lru: list.New(), blocks: map[uint64]*list.Element{},
	}, nil
}

// engineBlockHash is the engine's own (opaque) block id. vLLM uses a
// different hash from the router's; so does the demo, to show that the
// indexer only uses engine ids for linkage.
func engineBlockHash(parent uint64, tokens []uint32) uint64 {
	buf := make([]byte, 8+4*len(tokens))
	binary.BigEndian.PutUint64(buf, parent)
	for i, t := range tokens {
		binary.BigEndian.PutUint32(buf[8+4*i:], t)
	}
	return xxh3.HashSeed(buf, 42)
}

// serve runs one request's prefill through the cache: leading blocks
// already cached are hits, the rest are computed and stored, evicting the
// least recently used blocks beyond capacity. It publishes what changed.
func (e *demoEngine) serve(tokens []uint32) (hit, total int, err error) {
	e.requests++
	n := len(tokens) / e.blockSize
	var parent uint64
	var events []kvevents.Event
	cur := -1 // index in events of the run of newly computed blocks being recorded
	missed := false
	for b := 0; b < n; b++ {
		blk := tokens[b*e.blockSize : (b+1)*e.blockSize]
		h := engineBlockHash(parent, blk)
		if el, ok := e.blocks[h]; ok {
			// Prefix caching stops at the first miss: a cached block after
			// it is recomputed but needs no new event.
			e.lru.MoveToFront(el)
			if !missed {
				hit++
			}
			cur = -1
		} else {
			missed = true
			if cur < 0 {
				events = append(events, kvevents.Event{Kind: kvevents.BlockStored, BlockSize: e.blockSize, ParentHash: parent, HasParent: b > 0})
				cur = len(events) - 1
			}
			events[cur].BlockHashes = append(events[cur].BlockHashes, h)
			events[cur].TokenIDs = append(events[cur].TokenIDs, blk...)
			e.blocks[h] = e.lru.PushFront(h)
		}
		parent = h
	}
	var removed []uint64
	for e.lru.Len() > e.capacity {
		old := e.lru.Remove(e.lru.Back()).(uint64)
		delete(e.blocks, old)
		removed = append(removed, old)
	}
	e.hitBlocks += hit
	e.allBlocks += n
	if len(removed) > 0 {
		events = append(events, kvevents.Event{Kind: kvevents.BlockRemoved, BlockHashes: removed})
	}
	if len(events) == 0 {
		return hit, n, nil
	}
	payload, err := kvevents.Encode(kvevents.Batch{TS: nowSeconds(), Events: events}, e.encoding)
	if err != nil {
		return hit, n, err
	}
	e.published++
	if e.skipNext {
		e.skipNext = false
		_, err = e.pub.PublishSkippingLive(payload)
	} else {
		_, err = e.pub.Publish(payload)
	}
	return hit, n, err
}

// cachedDepth is how many leading blocks of tokens the engine holds: the
// ground truth the index must agree with.
func (e *demoEngine) cachedDepth(tokens []uint32) int {
	var parent uint64
	for b := 0; b < len(tokens)/e.blockSize; b++ {
		h := engineBlockHash(parent, tokens[b*e.blockSize:(b+1)*e.blockSize])
		if _, ok := e.blocks[h]; !ok {
			return b
		}
		parent = h
	}
	return len(tokens) / e.blockSize
}

func nowSeconds() float64 { return float64(time.Now().UnixNano()) / 1e9 }
