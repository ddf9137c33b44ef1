// Package kvevents decodes and encodes the KV-event batches that vLLM and
// SGLang publish over ZMQ (the msgpack payload, third frame of each
// message).
//
// Sources: vllm-project/vllm vllm/distributed/kv_events.py (EventBatch,
// BlockStored, BlockRemoved, AllBlocksCleared, encoded by msgspec with
// omit_defaults and tag=True, array_like in older releases) and
// shared/notes/wire-formats.md §2. Every historical shape is accepted:
//
//   - a batch is an array [ts, events, dp_rank] (trailing fields may be
//     missing) or a map {"ts", "events", "data_parallel_rank"};
//   - an event is a tagged array ["BlockStored", block_hashes, ...] whose
//     trailing defaulted fields may be missing (older vLLM and SGLang stop
//     at lora_id or medium), or a map with "type" and named keys;
//   - unknown map keys and unknown trailing array fields are skipped after
//     checking that they are well-formed msgpack.
//
// Block hashes are opaque engine ids. They arrive as signed or unsigned
// 64-bit integers or as bytes/str; integers keep their 64-bit two's
// complement pattern and bytes become the big-endian value of their last 8
// bytes (left-padded with zeros when shorter), so that a 32-byte SHA-256
// block hash maps to a stable uint64.
package kvevents

import "strconv"

// Kind is the type of a KV-cache event.
type Kind uint8

const (
	BlockStored      Kind = iota + 1 // blocks entered the cache
	BlockRemoved                     // blocks left the cache
	AllBlocksCleared                 // the engine dropped its whole cache
)

// String returns the event's wire tag.
func (k Kind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Batch is one published EventBatch.
type Batch struct {
	TS        float64 // publisher wall clock, seconds since the epoch
	Events    []Event
	DPRank    int  // data-parallel rank of the publishing engine
	HasDPRank bool // false when the producer left data_parallel_rank out or nil
}

// Event is one KV-cache event. Fields that do not belong to Kind are zero.
// Empty lists decode to nil slices.
type Event struct {
	Kind        Kind
	BlockHashes []uint64 // engine block ids (BlockStored, BlockRemoved)
	ParentHash  uint64   // engine id of the block before BlockHashes[0]
	HasParent   bool     // false: the stored blocks start a sequence
	TokenIDs    []uint32 // BlockStored: tokens of all stored blocks, in order
	BlockSize   int      // BlockStored: tokens per block
	LoRAID      int      // deprecated by vLLM in favour of LoRAName
	HasLoRAID   bool
	LoRAName    string // "" = base model
	Medium      string // "" = absent/nil (the engine's default, GPU)
	GroupIdx    int    // KV-cache group (hybrid models); nil decodes to 0
}
