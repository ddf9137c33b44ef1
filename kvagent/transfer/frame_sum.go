package transfer

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/zeebo/xxh3"
)

// The frame checksum, by protocol version (the header's 32-bit checksum
// field either way; hello frames, sent before a version is agreed, always
// use version 2's):
//
//	v2  CRC-32C of length, the fixed fields and the payload.
//	v3  the low 32 bits of XXH3-64 over a list of little-endian XXH3-64
//	    sums: the first of length and the fixed fields (30 bytes), then
//	    one per sumChunk bytes of the payload, in order. Over TLS, 0 and
//	    nothing computed: TLS's AEAD (crypto/tls: AES-GCM or
//	    ChaCha20-Poly1305) already authenticates every byte of every
//	    record, header and payload, over the same span the checksum
//	    covers (the sender's memory to the receiver's), and a record that
//	    fails ends the connection as a bad checksum does.
//
// Why v3: both ends pass over every payload byte to checksum it, and on
// the loopback benchmark CRC-32C (hash/crc32's SSE4.2 path) took about a
// third of the transfer's CPU time (BENCHMARKS.md, kvagent peer
// transfer). zeebo/xxh3's one-shot Hash of a whole chunk takes its
// AVX2/AVX-512 path, measured 1.7× as fast as CRC-32C on the bench
// machine (256 KiB from cache, 10.8 against 6.2 GB/s under load); fixed
// chunks let the receiver hash each one as soon as
// it has arrived, from cache, whatever sizes the socket reads return.
const sumChunk = 32 << 10

// frameSum is the running checksum of one frame being read or written.
type frameSum struct {
	v3   bool
	none bool   // v3 over TLS: no checksum (the field is 0)
	crc  uint32 // v2
	sums []byte // v3: chunk sums so far (header first)
}

// use sets the checksum for protocol version v on a connection that is
// (overTLS) or is not encrypted.
func (s *frameSum) use(v uint8, overTLS bool) {
	s.v3 = v >= 3
	s.none = s.v3 && overTLS
}

// start begins a frame's checksum with its header b (frameHeadLen bytes;
// the checksum field b[4:8] is not covered).
func (s *frameSum) start(b []byte) {
	if s.none {
		return
	}
	if !s.v3 {
		s.crc = crc32.Update(crc32.Update(0, castagnoli, b[:4]), castagnoli, b[8:frameHeadLen])
		return
	}
	var fixed [frameHeadLen - 4]byte
	copy(fixed[:4], b[:4])
	copy(fixed[4:], b[8:frameHeadLen])
	s.sums = binary.LittleEndian.AppendUint64(s.sums[:0], xxh3.Hash(fixed[:]))
}

// add takes the payload bytes p[from:to] of a buffer p whose first byte
// is at a sumChunk boundary of the payload, and returns how far it has
// consumed: v2 takes everything; v3 hashes whole chunks and, when final
// (to is the payload's end), the short last one, and leaves a partial
// chunk for a later call with more bytes.
func (s *frameSum) add(p []byte, from, to int, final bool) int {
	if s.none {
		return to
	}
	if !s.v3 {
		s.crc = crc32.Update(s.crc, castagnoli, p[from:to])
		return to
	}
	for to-from >= sumChunk || (final && from < to) {
		end := min(from+sumChunk, to)
		s.sums = binary.LittleEndian.AppendUint64(s.sums, xxh3.Hash(p[from:end]))
		from = end
	}
	return from
}

// sum is the frame's checksum once every payload byte was added.
func (s *frameSum) sum() uint32 {
	if s.none {
		return 0
	}
	if !s.v3 {
		return s.crc
	}
	return uint32(xxh3.Hash(s.sums))
}
