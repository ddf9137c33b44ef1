// Package blockhash computes KV block identities exactly as NVIDIA Dynamo's
// KV router does, so that kvgate's index and Dynamo-compatible engines agree
// on which prefix a block stands for.
//
// Source: ai-dynamo/dynamo at commit 038eab23a6b6e9b6391de6640f4f69d4c2726681:
// lib/kv-router/src/protocols.rs (compute_block_hash_for_seq hashes each
// block under block_hash_seed = dynamo_kv_hashing::compute_salt_hash(
// cache_namespace, lora_name); compute_seq_hash_for_block chains with
// compute_next_seq_hash, which delegates to
// dynamo_tokens::compute_next_sequence_hash and takes no seed), and
// lib/kv-hashing/src/salt.rs (compute_salt_hash: CHAIN_XXH3_SEED 1337,
// wrapping_add XXH3(lora, 0), then XXH3(salt, 1)). The chain step hashes
// le64(parent) ‖ le64(block) at the fixed CHAIN_XXH3_SEED (1337,
// lib/tokens/src/lib.rs): a salt changes the first block's hash and so,
// through the parent, every sequence hash after it, but never the chain
// seed.
package blockhash

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// nativeLittleEndian: a []uint32 in memory is its u32 little-endian bytes.
var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// BaseSeed is Dynamo's XXH3 seed for block hashing.
const BaseSeed uint64 = 1337

// Seed returns the XXH3 seed for a LoRA adapter and a cache namespace.
// Empty strings leave the seed unchanged; additions wrap as in Rust's
// wrapping_add.
func Seed(lora, namespace string) uint64 {
	return BaseSeed + LoRASalt(lora) + NamespaceSalt(namespace)
}

// LoRASalt is the LoRA adapter's share of the seed (0 for none).
func LoRASalt(lora string) uint64 {
	if lora == "" {
		return 0
	}
	return xxh3.HashStringSeed(lora, 0)
}

// NamespaceSalt is the cache namespace's share of the seed (0 for none):
// Seed(lora, ns) == BaseSeed + LoRASalt(lora) + NamespaceSalt(ns).
func NamespaceSalt(namespace string) uint64 {
	if namespace == "" {
		return 0
	}
	return xxh3.HashStringSeed(namespace, 1)
}

// RequestNamespace is the namespace a request's blocks are hashed under:
// its cache_salt when it sends one, as Dynamo maps a request's cache_salt to
// cache_namespace (the engine salts those blocks with it and announces it
// in its events), else the model's configured namespace.
func RequestNamespace(cacheSalt, configured string) string {
	if cacheSalt != "" {
		return cacheSalt
	}
	return configured
}

// LocalHashes hashes each complete block of tokens (u32 little-endian,
// concatenated) with XXH3-64 under seed. A trailing partial block is
// dropped: its KV is never shareable.
func LocalHashes(tokens []uint32, blockSize int, seed uint64) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	n := len(tokens) / blockSize
	out := make([]uint64, n)
	if nativeLittleEndian && n > 0 {
		// The tokens' memory already is their u32 little-endian encoding:
		// hash it in place instead of copying every token.
		raw := unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), 4*n*blockSize)
		for b := 0; b < n; b++ {
			out[b] = xxh3.HashSeed(raw[4*b*blockSize:4*(b+1)*blockSize], seed)
		}
		return out
	}
	buf := make([]byte, 4*blockSize)
	for b := 0; b < n; b++ {
		block := tokens[b*blockSize : (b+1)*blockSize]
		for i, t := range block {
			binary.LittleEndian.PutUint32(buf[4*i:], t)
		}
		out[b] = xxh3.HashSeed(buf, seed)
	}
	return out
}

// Chain returns the hash of the sequence ending in a block whose local hash
// is local, given the sequence hash of its parent. The seed is always
// BaseSeed, whatever salted the local hashes: Dynamo's
// compute_next_seq_hash(parent, block) has no seed parameter. (Earlier kvgate
// releases chained under the salted seed; see README "Upgrading".)
func Chain(parent, local uint64) uint64 {
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[0:8], parent)
	binary.LittleEndian.PutUint64(buf[8:16], local)
	return xxh3.HashSeed(buf[:], BaseSeed)
}

// SequenceHashes chains local hashes into prefix identities: seq[0] =
// local[0] and seq[i] = XXH3(le64(seq[i-1]) ‖ le64(local[i]), BaseSeed).
func SequenceHashes(local []uint64) []uint64 {
	return ContinueSequence(nil, local)
}

// ContinueSequence chains local hashes onto an existing parent sequence
// hash (nil = the chain starts here). It is how an engine event that names
// a parent block extends a known prefix.
func ContinueSequence(parent *uint64, local []uint64) []uint64 {
	out := make([]uint64, len(local))
	for i, l := range local {
		switch {
		case i > 0:
			out[i] = Chain(out[i-1], l)
		case parent != nil:
			out[i] = Chain(*parent, l)
		default:
			out[i] = l
		}
	}
	return out
}

// Request bundles the inputs of `kvgate hash`.
type Request struct {
	Tokens    []uint32 `json:"tokens"`
	BlockSize int      `json:"block_size"`
	LoRA      string   `json:"lora,omitempty"`
	Namespace string   `json:"namespace,omitempty"`
}

// Result is the output of `kvgate hash`.
type Result struct {
	Local    []uint64 `json:"local"`
	Sequence []uint64 `json:"sequence"`
}

// MaxBlockSize bounds block_size so that a hostile input cannot make the
// hasher allocate unbounded scratch space.
const MaxBlockSize = 1 << 16

// Compute validates r and returns its local and sequence hashes.
func Compute(r Request) (Result, error) {
	if r.BlockSize <= 0 || r.BlockSize > MaxBlockSize {
		return Result{}, fmt.Errorf("block_size must be in 1..%d, got %d", MaxBlockSize, r.BlockSize)
	}
	local := LocalHashes(r.Tokens, r.BlockSize, Seed(r.LoRA, r.Namespace))
	return Result{Local: local, Sequence: SequenceHashes(local)}, nil
}
