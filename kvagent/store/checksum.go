package store

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// sumChunk is the unit of the block checksum: xxh3's one-shot Hash of a
// chunk takes its AVX2 path, several times faster than its streaming
// Hasher or CRC-32C (measured on the bench machine: ~50 GB/s vs ~7 GB/s on
// cached data), and the chunk sums are combined with one more hash.
const sumChunk = 32 << 10

// blockSum is a block's data checksum: XXH3-64 of each sumChunk bytes,
// then XXH3-64 of those sums (little endian). It is part of the disk
// format (header version 1).
func blockSum(b []byte) uint64 {
	var stack [64 * 8]byte // chunk sums of blocks up to 2 MiB without allocating
	sums := stack[:0]
	for off := 0; off < len(b); off += sumChunk {
		sums = binary.LittleEndian.AppendUint64(sums, xxh3.Hash(b[off:min(off+sumChunk, len(b))]))
	}
	return xxh3.Hash(sums)
}

// parallelSumBytes is the block size from which copySum hashes on a second
// goroutine: Go's memmove copies ≥ 1 MiB with non-temporal stores (no
// read-for-ownership of dst, a third less memory traffic) but prefetches
// src non-temporally too, so src is not in cache afterwards for the hash;
// hashing alongside the copy keeps the copy at full speed when a core is
// free. Below it, chunked copy + hash from L1/L2 is cheapest.
const parallelSumBytes = 1 << 20

// copySum copies src into dst (same length) and returns blockSum of the
// bytes (measured against the alternatives in BenchmarkCopySum).
func copySum(dst, src []byte) uint64 {
	if len(src) < parallelSumBytes {
		return copySumChunked(dst, src)
	}
	return copySumParallel(dst, src)
}

// copySumParallel hashes src on another goroutine while this one copies.
func copySumParallel(dst, src []byte) uint64 {
	sum := make(chan uint64, 1)
	go func() { sum <- blockSum(src) }()
	copy(dst, src)
	return <-sum
}

// copySumChunked copies and hashes one chunk at a time, so the hash reads
// each chunk from L1/L2 right after the copy wrote it.
func copySumChunked(dst, src []byte) uint64 {
	var stack [64 * 8]byte
	sums := stack[:0]
	for off := 0; off < len(src); off += sumChunk {
		end := min(off+sumChunk, len(src))
		copy(dst[off:end], src[off:end])
		sums = binary.LittleEndian.AppendUint64(sums, xxh3.Hash(dst[off:end]))
	}
	return xxh3.Hash(sums)
}

// CopySum copies src into dst (same length) and returns the checksum the
// store keeps for the bytes (blockSum), in about the time of the copy alone for blocks under 1 MiB (each
// chunk is hashed from cache right after it is copied): the way for an
// engine to fill a reserved slot and learn its sum for CommitSummed in
// one pass over the bytes.
func CopySum(dst, src []byte) uint64 { return copySum(dst, src) }
