package transfer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The TCP backend's metadata blob (LocalMetadata / LoadRemoteMetadata),
// big-endian:
//
//	magic "KVGT", version u8 (1)
//	name len u8, name; address len u8, address ("host:port")
//	maxPayload u32: the largest frame payload the agent accepts
//	region count u32, then per region: handle u32, kind u8, length u64
//	crc32c u32 of everything before it
//
// Region addresses are not in it: a remote descriptor names a handle and
// an offset, and the owner resolves it, so a peer never learns (or needs)
// where the bytes live.
const (
	metadataMagic   = "KVGT"
	metadataVersion = 1
	maxNameLen      = 255
	maxRegions      = 1 << 16
	regionEntryLen  = 4 + 1 + 8
)

type remoteRegion struct {
	handle uint32
	kind   MemKind
	length int64
}

type metadata struct {
	name       string
	addr       string
	maxPayload uint32
	regions    []remoteRegion
}

func (m metadata) encode() []byte {
	b := make([]byte, 0, 4+1+2+len(m.name)+len(m.addr)+8+len(m.regions)*regionEntryLen+4)
	b = append(b, metadataMagic...)
	b = append(b, metadataVersion, byte(len(m.name)))
	b = append(b, m.name...)
	b = append(b, byte(len(m.addr)))
	b = append(b, m.addr...)
	b = binary.BigEndian.AppendUint32(b, m.maxPayload)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.regions)))
	for _, r := range m.regions {
		b = binary.BigEndian.AppendUint32(b, r.handle)
		b = append(b, byte(r.kind))
		b = binary.BigEndian.AppendUint64(b, uint64(r.length))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var errMetadata = errors.New("kvagent/transfer: bad metadata")

func metadataErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errMetadata}, args...)...)
}

// decodeMetadata parses a metadata blob, checking every length against
// what is left, so a truncated or hostile blob is an error, never a panic
// or a large allocation.
func decodeMetadata(b []byte) (metadata, error) {
	const minLen = 4 + 1 + 1 + 1 + 1 + 1 + 4 + 4 + 4
	if len(b) < minLen {
		return metadata{}, metadataErr("%d bytes, want at least %d", len(b), minLen)
	}
	if string(b[:4]) != metadataMagic {
		return metadata{}, metadataErr("magic %q, want %q (metadata of another backend?)", b[:4], metadataMagic)
	}
	if b[4] != metadataVersion {
		return metadata{}, metadataErr("version %d, want %d", b[4], metadataVersion)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return metadata{}, metadataErr("checksum %08x, computed %08x", sum, got)
	}
	p := body[5:]
	var m metadata
	var err error
	if m.name, p, err = lenString(p, "name"); err != nil {
		return metadata{}, err
	}
	if m.name == "" {
		return metadata{}, metadataErr("empty agent name")
	}
	if m.addr, p, err = lenString(p, "address"); err != nil {
		return metadata{}, err
	}
	if m.addr == "" {
		return metadata{}, metadataErr("agent %q: empty address", m.name)
	}
	if len(p) < 8 {
		return metadata{}, metadataErr("agent %q: truncated before the region list", m.name)
	}
	m.maxPayload = binary.BigEndian.Uint32(p)
	if m.maxPayload < minMessageBytes || m.maxPayload > maxMessageBytes {
		return metadata{}, metadataErr("agent %q: max message %d bytes outside [%d, %d]", m.name, m.maxPayload, minMessageBytes, maxMessageBytes)
	}
	n := binary.BigEndian.Uint32(p[4:])
	p = p[8:]
	if n > maxRegions || int(n)*regionEntryLen != len(p) {
		return metadata{}, metadataErr("agent %q: %d regions in %d bytes (max %d regions of %d bytes)", m.name, n, len(p), maxRegions, regionEntryLen)
	}
	m.regions = make([]remoteRegion, n)
	seen := make(map[uint32]bool, n)
	for i := range m.regions {
		e := p[i*regionEntryLen:]
		r := remoteRegion{handle: binary.BigEndian.Uint32(e), kind: MemKind(e[4]), length: int64(binary.BigEndian.Uint64(e[5:]))}
		switch {
		case r.handle == 0 || seen[r.handle]:
			return metadata{}, metadataErr("agent %q: region %d: handle %d zero or repeated", m.name, i, r.handle)
		case r.kind != DRAM && r.kind != FILE && r.kind != VRAM:
			return metadata{}, metadataErr("agent %q: region %d: unknown kind %d", m.name, r.handle, e[4])
		case r.length <= 0:
			return metadata{}, metadataErr("agent %q: region %d: length %d", m.name, r.handle, r.length)
		}
		seen[r.handle] = true
		m.regions[i] = r
	}
	return m, nil
}

func lenString(p []byte, what string) (string, []byte, error) {
	if len(p) < 1 || int(p[0]) > len(p)-1 {
		return "", nil, metadataErr("truncated %s", what)
	}
	return string(p[1 : 1+p[0]]), p[1+p[0]:], nil
}
