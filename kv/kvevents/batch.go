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

import (
	"errors"
	"strconv"
)

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
//
// An event that is well-formed msgpack but not one kvgate can use (an
// unknown type, a field of the wrong type, a list over the limits) decodes
// with Err set and the rest of its batch intact: the engines' own consumers
// (Dynamo's zmq_wire RawKvEvent::Ignored, llm-d's adapters) drop such
// events one at a time, and so does ingest.
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
	HasGroupIdx bool   // group_idx was present and not nil
	// SpecKind is kv_cache_spec_kind ("full_attention", "sliding_window",
	// "mamba", …; vLLM PR #40984); "" when absent.
	SpecKind string
	// CacheSalt is the cache namespace the engine hashed the blocks under:
	// SGLang's cache_salt (a map key, or the metadata map at position 7 of
	// a positional event, sglang#30827), or vLLM's cache_salt found in
	// extra_keys of the first block. "" = unsalted.
	CacheSalt string
	// Locality is "LOCAL", "REMOTE" or another value a newer engine sends;
	// "" when absent (vLLM: "None means unspecified").
	Locality string
	// Err is set when the event could not be used (see above); the other
	// fields are then partial and must be ignored.
	Err error
}

// ErrUnknownEventType marks an event whose type tag kvgate does not know.
var ErrUnknownEventType = errors.New("unknown event type")
