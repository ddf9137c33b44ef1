package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// On-disk slot layout: a header region of headerRegion bytes, then the
// block's data (BlockBytes), padded to ioAlign. The header region is a full
// aligned page so that the data starts aligned too and O_DIRECT can read it
// straight into a page-aligned arena slot.
//
// Header (little endian):
//
//	0  magic    uint32 "KVGB"
//	4  version  uint16
//	6  length   uint16  bytes of header including the trailing checksum
//	8  gen      uint64  write generation (newest wins on recovery)
//	16 hash     uint64
//	24 parent   uint64
//	32 flags    uint8   bit 0: has parent
//	33 reserved [3]byte
//	36 dataLen  uint32
//	40 dataSum  uint64  blockSum of the data (chunked XXH3-64)
//	48 nsLen    uint16
//	50 loraLen  uint16
//	52 tokens   uint32  number of token ids
//	56 namespace, LoRA name, token ids (uint32 each)
//	.. crc      uint32  CRC-32C of every header byte before it
const (
	headerMagic   = 0x4247564b // "KVGB" little endian
	headerVersion = 1
	headerFixed   = 56
	headerRegion  = ioAlign

	// Bounds that keep a header inside its region (and bound what a
	// client can make the store persist).
	MaxNamespaceBytes = 512
	MaxLoRABytes      = 256
	MaxBlockTokens    = (headerRegion - headerFixed - MaxNamespaceBytes - MaxLoRABytes - 4) / 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errEmptySlot marks a slot that was never written (all-zero magic): not
// corruption, just free space.
var errEmptySlot = errors.New("empty slot")

type blockHeader struct {
	Gen     uint64
	Key     Key
	Meta    Meta
	DataLen uint32
	DataSum uint64
}

// checkMeta rejects a key or meta that would not fit a disk header.
func checkMeta(k Key, m Meta) error {
	if len(k.Namespace) > MaxNamespaceBytes {
		return fmt.Errorf("namespace is %d bytes, limit %d", len(k.Namespace), MaxNamespaceBytes)
	}
	if len(m.LoRAName) > MaxLoRABytes {
		return fmt.Errorf("lora name is %d bytes, limit %d", len(m.LoRAName), MaxLoRABytes)
	}
	if len(m.TokenIDs) > MaxBlockTokens {
		return fmt.Errorf("block has %d token ids, limit %d", len(m.TokenIDs), MaxBlockTokens)
	}
	return nil
}

// encodeHeader writes h at the start of dst (len(dst) >= headerRegion) and
// returns the bytes used.
func encodeHeader(dst []byte, h *blockHeader) (int, error) {
	if err := checkMeta(h.Key, h.Meta); err != nil {
		return 0, err
	}
	n := headerFixed + len(h.Key.Namespace) + len(h.Meta.LoRAName) + 4*len(h.Meta.TokenIDs) + 4
	if len(dst) < n {
		return 0, fmt.Errorf("header needs %d bytes, buffer has %d", n, len(dst))
	}
	le := binary.LittleEndian
	le.PutUint32(dst[0:], headerMagic)
	le.PutUint16(dst[4:], headerVersion)
	le.PutUint16(dst[6:], uint16(n))
	le.PutUint64(dst[8:], h.Gen)
	le.PutUint64(dst[16:], h.Key.Hash)
	le.PutUint64(dst[24:], h.Meta.Parent)
	var flags byte
	if h.Meta.HasParent {
		flags |= 1
	}
	dst[32], dst[33], dst[34], dst[35] = flags, 0, 0, 0
	le.PutUint32(dst[36:], h.DataLen)
	le.PutUint64(dst[40:], h.DataSum)
	le.PutUint16(dst[48:], uint16(len(h.Key.Namespace)))
	le.PutUint16(dst[50:], uint16(len(h.Meta.LoRAName)))
	le.PutUint32(dst[52:], uint32(len(h.Meta.TokenIDs)))
	p := headerFixed
	p += copy(dst[p:], h.Key.Namespace)
	p += copy(dst[p:], h.Meta.LoRAName)
	for _, t := range h.Meta.TokenIDs {
		le.PutUint32(dst[p:], t)
		p += 4
	}
	le.PutUint32(dst[p:], crc32.Checksum(dst[:p], castagnoli))
	return n, nil
}

// decodeHeader parses a slot header. It never trusts a length before
// checking it against the buffer and the format's bounds.
func decodeHeader(b []byte) (blockHeader, error) {
	var h blockHeader
	if len(b) < headerFixed+4 {
		return h, fmt.Errorf("header: %d bytes, need at least %d", len(b), headerFixed+4)
	}
	le := binary.LittleEndian
	magic := le.Uint32(b[0:])
	if magic == 0 {
		return h, errEmptySlot
	}
	if magic != headerMagic {
		return h, fmt.Errorf("header: bad magic %#08x", magic)
	}
	if v := le.Uint16(b[4:]); v != headerVersion {
		return h, fmt.Errorf("header: unsupported version %d", v)
	}
	n := int(le.Uint16(b[6:]))
	if n < headerFixed+4 || n > len(b) || n > headerRegion {
		return h, fmt.Errorf("header: length %d out of range [%d, %d]", n, headerFixed+4, min(len(b), headerRegion))
	}
	if got, want := crc32.Checksum(b[:n-4], castagnoli), le.Uint32(b[n-4:]); got != want {
		return h, fmt.Errorf("header: checksum %#08x, stored %#08x", got, want)
	}
	nsLen, loraLen, tokens := int(le.Uint16(b[48:])), int(le.Uint16(b[50:])), int(le.Uint32(b[52:]))
	if nsLen > MaxNamespaceBytes || loraLen > MaxLoRABytes || tokens > MaxBlockTokens {
		return h, fmt.Errorf("header: namespace %d, lora %d, tokens %d exceed limits", nsLen, loraLen, tokens)
	}
	if headerFixed+nsLen+loraLen+4*tokens+4 != n {
		return h, fmt.Errorf("header: length %d does not match its fields (namespace %d, lora %d, tokens %d)", n, nsLen, loraLen, tokens)
	}
	if b[32]&^1 != 0 || b[33]|b[34]|b[35] != 0 {
		return h, fmt.Errorf("header: unknown flags %#02x %#02x%02x%02x", b[32], b[33], b[34], b[35])
	}
	h.Gen = le.Uint64(b[8:])
	h.Key.Hash = le.Uint64(b[16:])
	h.Meta.Parent = le.Uint64(b[24:])
	h.Meta.HasParent = b[32]&1 != 0
	h.DataLen = le.Uint32(b[36:])
	h.DataSum = le.Uint64(b[40:])
	p := headerFixed
	h.Key.Namespace = string(b[p : p+nsLen])
	p += nsLen
	h.Meta.LoRAName = string(b[p : p+loraLen])
	p += loraLen
	if tokens > 0 {
		h.Meta.TokenIDs = make([]uint32, tokens)
		for i := range h.Meta.TokenIDs {
			h.Meta.TokenIDs[i] = le.Uint32(b[p:])
			p += 4
		}
	}
	return h, nil
}
