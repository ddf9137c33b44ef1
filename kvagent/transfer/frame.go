package transfer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
)

// The TCP backend's wire format. Every message is one frame:
//
//	length  u32  bytes after this field: 30 + len(payload)
//	sum     u32  checksum of length, the fields below and the payload:
//	             CRC-32C in protocol version 2, chunked XXH3 in version 3
//	             (0 inside TLS; frame_sum.go); hello frames always
//	             version 2's
//	type    u8   frameType
//	flags   u8   flagError on WRITE_ACK / NOTIF_ACK, else 0
//	xfer    u64  wire transfer id (one per post), 0 for connection frames
//	desc    u32  descriptor index in the request
//	region  u32  region handle on the target agent
//	offset  u64  byte offset inside that region
//	payload      at most the receiver's MaxMessageBytes
//
// Big-endian throughout. A receiver checks the length against its bound
// before it reads (or allocates) anything, and the checksum before it acts on a
// frame; a frame that fails either ends the connection. The checksum sits in
// the header, not after the payload, because the sender has the whole
// payload in memory anyway: the receiver then needs no extra read for a
// trailer, one system call less per frame.
const (
	frameHeadLen  = 4 + 4 + 26 // length, checksum, fixed fields
	frameFixedLen = 4 + 26     // what length counts besides the payload
	// bigPayload: payloads this large skip the bufio copy and go out with
	// one writev (header, payload) straight from the region's memory.
	bigPayload = 32 << 10
	// readBufferBytes: the receive buffer is small on purpose. The header
	// read fills it with the start of the payload, which then costs an
	// extra copy; the rest of a payload is read straight into the region.
	readBufferBytes = 4 << 10
)

type frameType uint8

const (
	frameHello     frameType = 1  // client → server: hello payload
	frameHelloAck  frameType = 2  // server → client: hello payload
	frameReadReq   frameType = 3  // client → server: payload = length u64 of [region, offset), grant [16]byte
	frameData      frameType = 4  // server → client: bytes of a read, in order
	frameReadErr   frameType = 5  // server → client: the read request failed; payload = reason
	frameWriteData frameType = 6  // client → server: bytes to store at [region, offset)
	frameFlush     frameType = 7  // client → server: end of one write item
	frameWriteAck  frameType = 8  // server → client: write item applied (flagError: payload = reason)
	frameNotif     frameType = 9  // client → server: notification; payload = message
	frameNotifAck  frameType = 10 // server → client: notification queued (flagError: payload = reason)
	frameError     frameType = 11 // either way: fatal connection error; payload = reason
)

const flagError uint8 = 1

// protocolVersion is the newest version this agent speaks; it speaks
// every version from minProtocolVersion. The initiator's HELLO offers its
// newest, the target's HELLO_ACK names the one both speak (the lower of
// the two), and the connection's frames after the hellos use it. A target
// that speaks neither refuses with an ERROR frame; an initiator whose
// offer a version-2 target refused that way dials again offering 2
// (version-2 agents accept exactly 2). Version 2 added the grant to
// READ_REQ (version 1 peers read without one, which a target with
// ReadAccess cannot allow, so they are refused at the hello rather than
// on every read); version 3 changed the frame checksum (frame_sum.go).
const (
	protocolVersion    = 3
	minProtocolVersion = 2
)

// readRequest is the payload of READ_REQ.
type readRequest struct {
	n     uint64
	grant Grant
}

const readRequestLen = 8 + len(Grant{})

func (r readRequest) encode() []byte {
	p := make([]byte, 8, readRequestLen)
	binary.BigEndian.PutUint64(p, r.n)
	return append(p, r.grant[:]...)
}

func decodeReadRequest(p []byte) (readRequest, error) {
	if len(p) != readRequestLen {
		return readRequest{}, withReason(reasonProtocol, fmt.Errorf("READ_REQ payload of %d bytes, want %d", len(p), readRequestLen))
	}
	r := readRequest{n: binary.BigEndian.Uint64(p)}
	copy(r.grant[:], p[8:])
	return r, nil
}

func (t frameType) String() string {
	names := [...]string{"", "HELLO", "HELLO_ACK", "READ_REQ", "DATA", "READ_ERR", "WRITE_DATA", "FLUSH", "WRITE_ACK", "NOTIF", "NOTIF_ACK", "ERROR"}
	if int(t) < len(names) && t != 0 {
		return names[t]
	}
	return fmt.Sprintf("frame(%d)", uint8(t))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type frameHeader struct {
	typ    frameType
	flags  uint8
	xfer   uint64
	desc   uint32
	region uint32
	offset uint64
	n      int // payload length
}

var errChecksum = errors.New("frame checksum mismatch")

// frameReader reads frames from a connection: next reads and checks the
// header, then exactly one of payloadInto, payload or discard consumes the
// payload and verifies the checksum.
type frameReader struct {
	r          io.Reader
	maxPayload int
	hdr        [frameHeadLen]byte
	sum        frameSum // computed so far
	want       uint32   // from the header
	scratch    []byte
	version    uint8 // agreed at the hellos (0 before)
}

// useVersion sets the checksum of the frames after the hellos, for
// protocol version v on a connection that is (overTLS) or is not
// encrypted.
func (fr *frameReader) useVersion(v uint8, overTLS bool) { fr.version = v; fr.sum.use(v, overTLS) }

func newFrameReader(r io.Reader, maxPayload int) *frameReader {
	return &frameReader{r: r, maxPayload: maxPayload}
}

func (fr *frameReader) next() (frameHeader, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return frameHeader{}, err
	}
	wireAcquire()
	b := fr.hdr[:]
	length := binary.BigEndian.Uint32(b[0:])
	if length < frameFixedLen || int64(length)-frameFixedLen > int64(fr.maxPayload) {
		return frameHeader{}, withReason(reasonProtocol, fmt.Errorf("frame length %d outside [%d, %d]", length, frameFixedLen, frameFixedLen+fr.maxPayload))
	}
	h := frameHeader{
		typ:    frameType(b[8]),
		flags:  b[9],
		xfer:   binary.BigEndian.Uint64(b[10:]),
		desc:   binary.BigEndian.Uint32(b[18:]),
		region: binary.BigEndian.Uint32(b[22:]),
		offset: binary.BigEndian.Uint64(b[26:]),
		n:      int(length) - frameFixedLen,
	}
	if h.typ < frameHello || h.typ > frameError {
		return frameHeader{}, withReason(reasonProtocol, fmt.Errorf("unknown frame type %d", b[8]))
	}
	if h.flags&^flagError != 0 || (h.flags != 0 && h.typ != frameWriteAck && h.typ != frameNotifAck) {
		return frameHeader{}, withReason(reasonProtocol, fmt.Errorf("%s frame with flags %#x", h.typ, h.flags))
	}
	fr.want = binary.BigEndian.Uint32(b[4:])
	fr.sum.start(b)
	return h, nil
}

// payloadInto reads the payload into dst (len(dst) == h.n) and checks the
// checksum. On a checksum error dst holds the bytes received.
func (fr *frameReader) payloadInto(dst []byte) error {
	// The checksum follows the reads, over bytes the kernel just copied
	// and that are still in cache, instead of a second pass over the
	// payload.
	summed := 0
	for got := 0; got < len(dst); {
		n, err := fr.r.Read(dst[got:])
		got += n
		summed = fr.sum.add(dst, summed, got, got == len(dst))
		if err != nil && got < len(dst) {
			return unexpectedEOF(err)
		}
	}
	wireAcquire()
	return fr.check()
}

// payload reads the payload into a new slice.
func (fr *frameReader) payload(h frameHeader) ([]byte, error) {
	p := make([]byte, h.n)
	return p, fr.payloadInto(p)
}

// discard reads and checks a payload nobody wants.
func (fr *frameReader) discard(h frameHeader) error {
	n := h.n
	for n > 0 {
		if fr.scratch == nil {
			fr.scratch = make([]byte, 64<<10)
		}
		c := min(n, len(fr.scratch))
		if _, err := io.ReadFull(fr.r, fr.scratch[:c]); err != nil {
			return unexpectedEOF(err)
		}
		// The scratch buffer holds whole chunks (64 KiB) but for the last.
		fr.sum.add(fr.scratch, 0, c, true)
		n -= c
	}
	return fr.check()
}

func (fr *frameReader) check() error {
	if got := fr.sum.sum(); fr.want != got {
		return withReason(reasonChecksum, fmt.Errorf("%w: frame says %08x, computed %08x", errChecksum, fr.want, got))
	}
	return nil
}

// A frame cut short is a dead peer, not a clean end of stream.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// frame is a whole frame: small control frames kept whole (tcp_stream.go),
// tests and fuzzing.
type frame struct {
	frameHeader
	payload []byte
}

// frameWriter writes frames to a connection: small frames through a
// buffer (flushed by the caller when it has nothing more to send), big
// payloads with one vectored write and no copy; queue holds frames whose
// payloads stay put until they are sent, so that several go out in one
// vectored write.
type frameWriter struct {
	conn io.Writer
	bw   *bufio.Writer
	hdr  [frameHeadLen]byte
	vec  [2][]byte
	sum  frameSum
	// Queued frames, sent by one writev: header, payload, header, ...
	// Their headers live in heads (capacity for maxQueuedFrames, so
	// appending never moves them). bw is empty while frames are queued.
	queued  net.Buffers
	heads   []byte
	queuedN int
	sent    []func() // called once the queued frames left (or failed)
}

// A queue of frames goes out once it holds this many bytes or frames.
// One writev per DATA frame made the 64 KiB rows the slowest (50 % of a
// raw copy before issue 19, BENCHMARKS.md, kvagent peer transfer); a
// megabyte per call makes the system calls' fixed cost small next to the
// copy, and is small enough that the receiver never waits long for the
// first bytes.
const (
	maxQueuedBytes  = 1 << 20
	maxQueuedFrames = 64
)

func newFrameWriter(conn io.Writer) *frameWriter {
	return &frameWriter{conn: conn, bw: bufio.NewWriterSize(conn, 64<<10)}
}

// useVersion sets the checksum of the frames after the hellos (as
// frameReader's).
func (fw *frameWriter) useVersion(v uint8, overTLS bool) { fw.sum.use(v, overTLS) }

// header encodes h for payload into fw.hdr, checksum included.
func (fw *frameWriter) header(h frameHeader, payload []byte) []byte {
	b := fw.hdr[:]
	binary.BigEndian.PutUint32(b[0:], uint32(frameFixedLen+len(payload)))
	b[8] = byte(h.typ)
	b[9] = h.flags
	binary.BigEndian.PutUint64(b[10:], h.xfer)
	binary.BigEndian.PutUint32(b[18:], h.desc)
	binary.BigEndian.PutUint32(b[22:], h.region)
	binary.BigEndian.PutUint64(b[26:], h.offset)
	fw.sum.start(b)
	fw.sum.add(payload, 0, len(payload), true)
	binary.BigEndian.PutUint32(b[4:], fw.sum.sum())
	return b
}

// write sends a frame after those queued, or buffers a small one.
func (fw *frameWriter) write(h frameHeader, payload []byte) error {
	payload = wireCopy(payload)
	wireRelease()
	if err := fw.sendQueued(); err != nil {
		return err
	}
	b := fw.header(h, payload)
	if len(payload) < bigPayload {
		fw.bw.Write(b)
		_, err := fw.bw.Write(payload)
		return err
	}
	if err := fw.bw.Flush(); err != nil {
		return err
	}
	fw.vec = [2][]byte{b, payload}
	bufs := net.Buffers(fw.vec[:])
	_, err := bufs.WriteTo(fw.conn)
	fw.vec = [2][]byte{}
	return err
}

// queue adds a frame whose payload the caller leaves unchanged until sent
// (sent, when not nil, is called then, or when sending fails); the queue
// goes out when full, before any write, or at flush.
func (fw *frameWriter) queue(h frameHeader, payload []byte, sent func()) error {
	payload = wireCopy(payload)
	wireRelease()
	if sent != nil {
		fw.sent = append(fw.sent, sent)
	}
	if err := fw.bw.Flush(); err != nil {
		fw.dropQueued()
		return err
	}
	if fw.heads == nil {
		fw.heads = make([]byte, 0, maxQueuedFrames*frameHeadLen)
	}
	fw.heads = append(fw.heads, fw.header(h, payload)...)
	fw.queued = append(fw.queued, fw.heads[len(fw.heads)-frameHeadLen:], payload)
	fw.queuedN += frameHeadLen + len(payload)
	if fw.queuedN >= maxQueuedBytes || len(fw.queued) >= 2*maxQueuedFrames {
		return fw.sendQueued()
	}
	return nil
}

// sendQueued writes the queued frames with one vectored write.
func (fw *frameWriter) sendQueued() error {
	if len(fw.queued) == 0 {
		return nil
	}
	bufs := fw.queued // WriteTo consumes its receiver
	_, err := bufs.WriteTo(fw.conn)
	fw.dropQueued()
	return err
}

// dropQueued forgets the queued frames (sent or not) and runs their
// callbacks; a connection that ends calls it for what it never sent.
func (fw *frameWriter) dropQueued() {
	clear(fw.queued)
	fw.queued, fw.heads, fw.queuedN = fw.queued[:0], fw.heads[:0], 0
	for _, f := range fw.sent {
		f()
	}
	clear(fw.sent)
	fw.sent = fw.sent[:0]
}

func (fw *frameWriter) flush() error {
	if err := fw.sendQueued(); err != nil {
		return err
	}
	return fw.bw.Flush()
}

func (fw *frameWriter) buffered() int { return fw.bw.Buffered() + fw.queuedN }

// hello is the payload of HELLO and HELLO_ACK.
type hello struct {
	version    uint8
	maxPayload uint32
	name       string
}

func (h hello) encode() []byte {
	p := make([]byte, 5, 5+len(h.name))
	p[0] = h.version
	binary.BigEndian.PutUint32(p[1:], h.maxPayload)
	return append(p, h.name...)
}

// versionRange names the versions an agent speaks, for errors.
func versionRange(lo, hi uint8) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d to %d", lo, hi)
}

// decodeHello parses a hello whose version must lie in [minVersion,
// maxVersion].
func decodeHello(p []byte, minVersion, maxVersion uint8) (hello, error) {
	if len(p) < 6 || len(p) > 5+maxNameLen {
		return hello{}, withReason(reasonProtocol, fmt.Errorf("hello payload of %d bytes, want 6..%d", len(p), 5+maxNameLen))
	}
	h := hello{version: p[0], maxPayload: binary.BigEndian.Uint32(p[1:]), name: string(p[5:])}
	if h.version < minVersion || h.version > maxVersion {
		return hello{}, withReason(reasonProtocol, fmt.Errorf("peer speaks protocol version %d, this agent %s", h.version, versionRange(minVersion, maxVersion)))
	}
	if h.maxPayload < minMessageBytes || h.maxPayload > maxMessageBytes {
		return hello{}, withReason(reasonProtocol, fmt.Errorf("peer max message %d bytes outside [%d, %d]", h.maxPayload, minMessageBytes, maxMessageBytes))
	}
	return h, nil
}
