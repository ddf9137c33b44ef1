package kvindex

// SegmentBlocks is how many consecutive blocks of a chain make one
// segment: the blocks at positions [k*SegmentBlocks, (k+1)*SegmentBlocks).
// A backend may keep a segment together (the Redis index keeps it in one
// key under one Cluster hash tag), so that a Match reads one key per
// segment instead of one per block. 64 blocks is 1,024 tokens at vLLM's
// default block size of 16: an 8k-token prompt spans 8 segments. It is
// part of the Redis key schema (redisSchema): changing it changes where
// every block lives.
const SegmentBlocks = 64

// Block is a block's identity and its place in its chain.
type Block struct {
	// Hash is the block's sequence hash (kv/blockhash): it names the block
	// and, through the chain, every block before it.
	Hash uint64
	// Seg is the Hash of the first block of the block's segment: the block
	// at position p - p%SegmentBlocks, p being this block's position in its
	// chain (the block itself when p%SegmentBlocks == 0). Ingest knows p
	// from the parent links of the engine's events; Match computes the same
	// value from the queried chain. Backends that do not group blocks
	// ignore it.
	Seg uint64
}

// ChainBlocks places a chain's hashes, positions counted from 0: the form
// Store takes for a prefix of a chain (a slice [a:b] of a chain's blocks is
// ChainBlocks(chain[:b])[a:]).
func ChainBlocks(chain []uint64) []Block {
	out := make([]Block, len(chain))
	for i, h := range chain {
		out[i] = Block{Hash: h, Seg: chain[i-i%SegmentBlocks]}
	}
	return out
}
