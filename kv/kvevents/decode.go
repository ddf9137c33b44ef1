package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Decoder decodes batches. It reuses its buffers between calls, so one
// Decoder serves one goroutine (one subscriber); create one per stream.
type Decoder struct {
	lim   Limits
	r     bytes.Reader
	d     *msgpack.Decoder
	total int
	// payload is the input behind r, read directly by the token fast path.
	payload []byte
	str     []byte // scratch for tags, keys, mediums and byte hashes
	es      eventScratch
	format  Format // FormatVLLM unless made by NewFormatDecoder
}

// NewDecoder returns a Decoder enforcing lim (zero fields take defaults).
func NewDecoder(lim Limits) *Decoder {
	dec := &Decoder{lim: lim.withDefaults()}
	// bytes.Reader is an io.ByteScanner, so msgpack reads it directly
	// without a bufio layer: r.Len() is then exactly the undecoded input,
	// which is what every length prefix is checked against.
	dec.d = msgpack.NewDecoder(&dec.r)
	return dec
}

var errTruncated = errors.New("input ends in the middle of a value")

// Decode decodes one batch payload; the result does not alias payload.
// The error of a malformed payload names the byte offset and the path to
// the bad value.
func (dec *Decoder) Decode(payload []byte) (Batch, error) {
	if len(payload) > dec.lim.MaxPayloadBytes {
		return Batch{}, fmt.Errorf("kvevents: payload of %d bytes exceeds the limit of %d", len(payload), dec.lim.MaxPayloadBytes)
	}
	dec.r.Reset(payload)
	dec.payload = payload
	dec.total = len(payload)
	var b Batch
	var err error
	if dec.format == FormatTRTLLM {
		b, err = dec.trtllmBatch()
	} else {
		b, err = dec.batch()
	}
	if err == nil && dec.r.Len() > 0 {
		err = fmt.Errorf("%d trailing bytes after the batch", dec.r.Len())
	}
	if err != nil {
		return Batch{}, fmt.Errorf("kvevents: byte %d of %d: %w", dec.offset(), dec.total, err)
	}
	return b, nil
}

func (dec *Decoder) offset() int { return dec.total - dec.r.Len() }

// ioErr converts the library's read errors: running out of input is the
// payload's fault and must say so.
func ioErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errTruncated
	}
	return err
}

func (dec *Decoder) peek() (byte, error) {
	c, err := dec.d.PeekCode()
	if err != nil {
		return 0, ioErr(err)
	}
	return c, nil
}

func isArray(c byte) bool {
	return (c >= msgpcode.FixedArrayLow && c <= msgpcode.FixedArrayHigh) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMap(c byte) bool {
	return (c >= msgpcode.FixedMapLow && c <= msgpcode.FixedMapHigh) || c == msgpcode.Map16 || c == msgpcode.Map32
}

func isStr(c byte) bool {
	return msgpcode.IsFixedString(c) || c == msgpcode.Str8 || c == msgpcode.Str16 || c == msgpcode.Str32
}

func isBin(c byte) bool {
	return c == msgpcode.Bin8 || c == msgpcode.Bin16 || c == msgpcode.Bin32
}

func isInt(c byte) bool {
	if msgpcode.IsFixedNum(c) {
		return true
	}
	switch c {
	case msgpcode.Uint8, msgpcode.Uint16, msgpcode.Uint32, msgpcode.Uint64,
		msgpcode.Int8, msgpcode.Int16, msgpcode.Int32, msgpcode.Int64:
		return true
	}
	return false
}

// typeName names a msgpack type for error messages.
func typeName(c byte) string {
	switch {
	case c == msgpcode.Nil:
		return "nil"
	case c == msgpcode.True || c == msgpcode.False:
		return "bool"
	case isInt(c):
		return "integer"
	case c == msgpcode.Float || c == msgpcode.Double:
		return "float"
	case isStr(c):
		return "string"
	case isBin(c):
		return "bytes"
	case isArray(c):
		return "array"
	case isMap(c):
		return "map"
	}
	return fmt.Sprintf("code 0x%02x", c)
}

// containerLen reads an array or map header and checks that the input can
// hold perElem bytes per element before anyone allocates for it.
func (dec *Decoder) containerLen(c byte, perElem int) (int, error) {
	var n int
	var err error
	if isMap(c) {
		n, err = dec.d.DecodeMapLen()
	} else {
		n, err = dec.d.DecodeArrayLen()
	}
	if err != nil {
		return 0, ioErr(err)
	}
	if n > dec.r.Len()/perElem {
		return 0, fmt.Errorf("%s of %d elements is longer than the %d bytes left: %w", typeName(c), n, dec.r.Len(), errTruncated)
	}
	return n, nil
}

// readInt reads any msgpack integer as its 64-bit pattern; neg reports a
// negative signed value.
func (dec *Decoder) readInt() (v uint64, neg bool, err error) {
	c, err := dec.peek()
	if err != nil {
		return 0, false, err
	}
	if c == msgpcode.Uint64 {
		u, err := dec.d.DecodeUint64()
		return u, false, ioErr(err)
	}
	if !isInt(c) {
		return 0, false, fmt.Errorf("want an integer, got %s", typeName(c))
	}
	s, err := dec.d.DecodeInt64()
	return uint64(s), s < 0, ioErr(err)
}

// readSmallInt reads an integer that must fit in int and lie in [lo, hi].
func (dec *Decoder) readSmallInt(lo, hi int64) (int, error) {
	v, neg, err := dec.readInt()
	if err != nil {
		return 0, err
	}
	s := int64(v)
	if (!neg && v > math.MaxInt64) || s < lo || s > hi || int64(int(s)) != s {
		if neg {
			return 0, fmt.Errorf("%d is out of range [%d, %d]", s, lo, hi)
		}
		return 0, fmt.Errorf("%d is out of range [%d, %d]", v, lo, hi)
	}
	return int(s), nil
}

// isNil consumes a nil if one is next.
func (dec *Decoder) isNil() (bool, error) {
	c, err := dec.peek()
	if err != nil {
		return false, err
	}
	if c != msgpcode.Nil {
		return false, nil
	}
	return true, ioErr(dec.d.DecodeNil())
}

// readStrBytes reads a str (or, if allowBin, a bin) of at most max bytes
// into the scratch buffer, valid until the next call.
func (dec *Decoder) readStrBytes(max int, allowBin bool) ([]byte, error) {
	c, err := dec.peek()
	if err != nil {
		return nil, err
	}
	if !isStr(c) && !(allowBin && isBin(c)) {
		return nil, fmt.Errorf("want a string, got %s", typeName(c))
	}
	n, err := dec.d.DecodeBytesLen()
	if err != nil {
		return nil, ioErr(err)
	}
	if n > max {
		return nil, fmt.Errorf("%s of %d bytes exceeds the limit of %d", typeName(c), n, max)
	}
	if n > dec.r.Len() {
		return nil, errTruncated
	}
	if cap(dec.str) < n {
		dec.str = make([]byte, n)
	}
	b := dec.str[:n]
	if err := dec.d.ReadFull(b); err != nil {
		return nil, ioErr(err)
	}
	return b, nil
}

// optString reads a str or nil (""). Common media are interned so that the
// hot path does not allocate for them.
func (dec *Decoder) optString() (string, error) {
	if null, err := dec.isNil(); err != nil || null {
		return "", err
	}
	b, err := dec.readStrBytes(dec.lim.MaxStringBytes, false)
	if err != nil {
		return "", err
	}
	switch string(b) {
	case "GPU":
		return "GPU", nil
	case "CPU":
		return "CPU", nil
	case "DISK":
		return "DISK", nil
	}
	return string(b), nil
}

// hash reads a block hash: an integer (kept as its 64-bit pattern) or
// bytes/str (last 8 bytes, big-endian, left-padded with zeros).
func (dec *Decoder) hash() (uint64, error) {
	c, err := dec.peek()
	if err != nil {
		return 0, err
	}
	if isStr(c) || isBin(c) {
		b, err := dec.readStrBytes(dec.lim.MaxHashBytes, true)
		if err != nil {
			return 0, err
		}
		if len(b) > 8 {
			b = b[len(b)-8:]
		}
		var buf [8]byte
		copy(buf[8-len(b):], b)
		return binary.BigEndian.Uint64(buf[:]), nil
	}
	if !isInt(c) {
		return 0, fmt.Errorf("want a block hash (integer or bytes), got %s", typeName(c))
	}
	v, _, err := dec.readInt()
	return v, err
}

func (dec *Decoder) hashes() ([]uint64, error) {
	c, err := dec.peek()
	if err != nil {
		return nil, err
	}
	if !isArray(c) {
		return nil, fmt.Errorf("want an array, got %s", typeName(c))
	}
	n, err := dec.containerLen(c, 1)
	if err != nil {
		return nil, err
	}
	if n > dec.lim.MaxHashesPerEvent {
		return nil, fmt.Errorf("%d hashes exceed the limit of %d", n, dec.lim.MaxHashesPerEvent)
	}
	if n == 0 {
		return nil, nil
	}
	out := make([]uint64, n)
	for i := range out {
		if out[i], err = dec.hash(); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return out, nil
}

func (dec *Decoder) tokens() ([]uint32, error) {
	c, err := dec.peek()
	if err != nil {
		return nil, err
	}
	if !isArray(c) {
		return nil, fmt.Errorf("want an array, got %s", typeName(c))
	}
	n, err := dec.containerLen(c, 1)
	if err != nil {
		return nil, err
	}
	if n > dec.lim.MaxTokensPerEvent {
		return nil, fmt.Errorf("%d tokens exceed the limit of %d", n, dec.lim.MaxTokensPerEvent)
	}
	if n == 0 {
		return nil, nil
	}
	out := make([]uint32, n)
	for i := dec.fastTokens(out); i < n; i++ {
		v, neg, err := dec.readInt()
		switch {
		case err != nil:
			return nil, fmt.Errorf("element %d: %w", i, err)
		case neg:
			return nil, fmt.Errorf("element %d: negative token id %d", i, int64(v))
		case v > math.MaxUint32:
			return nil, fmt.Errorf("element %d: token id %d does not fit in 32 bits", i, v)
		}
		out[i] = uint32(v)
	}
	return out, nil
}

// skip consumes one value of any type after checking that it is
// well-formed, no deeper than MaxSkipDepth and no larger than MaxSkipBytes.
// The library's own Skip has no depth bound, so containers are walked here.
func (dec *Decoder) skip() error {
	return dec.skipAt(0, dec.offset())
}

func (dec *Decoder) skipAt(depth, start int) error {
	if depth > dec.lim.MaxSkipDepth {
		return fmt.Errorf("skipped value nests deeper than %d", dec.lim.MaxSkipDepth)
	}
	if dec.offset()-start > dec.lim.MaxSkipBytes {
		return fmt.Errorf("skipped value exceeds %d bytes", dec.lim.MaxSkipBytes)
	}
	c, err := dec.peek()
	if err != nil {
		return err
	}
	switch {
	case isArray(c) || isMap(c):
		per := 1
		if isMap(c) {
			per = 2
		}
		n, err := dec.containerLen(c, per)
		if err != nil {
			return err
		}
		for i := 0; i < n*per; i++ {
			if err := dec.skipAt(depth+1, start); err != nil {
				return err
			}
		}
		return nil
	case isStr(c) || isBin(c):
		n, err := dec.d.DecodeBytesLen()
		if err != nil {
			return ioErr(err)
		}
		return dec.discard(n, start)
	case c >= msgpcode.FixExt1 && c <= msgpcode.FixExt16 || c >= msgpcode.Ext8 && c <= msgpcode.Ext32:
		_, n, err := dec.d.DecodeExtHeader()
		if err != nil {
			return ioErr(err)
		}
		return dec.discard(n, start)
	}
	// Scalars: fixed size, and Skip rejects the one unused code (0xc1).
	return ioErr(dec.d.Skip())
}

// discard drops n payload bytes of a str/bin/ext straight from the reader
// (the Decoder does not buffer, see NewDecoder).
func (dec *Decoder) discard(n, start int) error {
	if n > dec.r.Len() {
		return errTruncated
	}
	if dec.offset()+n-start > dec.lim.MaxSkipBytes {
		return fmt.Errorf("skipped value exceeds %d bytes", dec.lim.MaxSkipBytes)
	}
	_, err := dec.r.Seek(int64(n), io.SeekCurrent)
	return err
}

func (dec *Decoder) batch() (Batch, error) {
	var b Batch
	c, err := dec.peek()
	if err != nil {
		return b, err
	}
	switch {
	case isArray(c):
		n, err := dec.containerLen(c, 1)
		if err != nil {
			return b, err
		}
		if n < 2 {
			return b, fmt.Errorf("batch array has %d fields, want at least 2 (ts, events)", n)
		}
		if b.TS, err = dec.ts(); err != nil {
			return b, fmt.Errorf("batch field ts: %w", err)
		}
		if b.Events, err = dec.events(); err != nil {
			return b, err
		}
		if n >= 3 {
			if b.DPRank, b.HasDPRank, err = dec.dpRank(); err != nil {
				return b, fmt.Errorf("batch field data_parallel_rank: %w", err)
			}
		}
		for i := 3; i < n; i++ {
			if err := dec.skip(); err != nil {
				return b, fmt.Errorf("batch field %d: %w", i, err)
			}
		}
		return b, nil
	case isMap(c):
		n, err := dec.containerLen(c, 2)
		if err != nil {
			return b, err
		}
		var haveTS, haveEvents, haveDP bool
		for i := 0; i < n; i++ {
			key, known, err := dec.key()
			if err != nil {
				return b, fmt.Errorf("batch key %d: %w", i, err)
			}
			if !known {
				if err := dec.skip(); err != nil {
					return b, fmt.Errorf("batch key %d: value: %w", i, err)
				}
				continue
			}
			switch key {
			case "ts":
				err = dup(haveTS, key)
				haveTS = true
				if err == nil {
					b.TS, err = dec.ts()
				}
			case "events":
				if haveEvents {
					return b, dup(true, key)
				}
				haveEvents = true
				if b.Events, err = dec.events(); err != nil {
					return b, err
				}
			case "data_parallel_rank":
				err = dup(haveDP, key)
				haveDP = true
				if err == nil {
					b.DPRank, b.HasDPRank, err = dec.dpRank()
				}
			default:
				err = dec.skip()
			}
			if err != nil {
				return b, fmt.Errorf("batch field %s: %w", key, err)
			}
		}
		if !haveTS || !haveEvents {
			return b, errors.New("batch map lacks ts or events")
		}
		return b, nil
	}
	return b, fmt.Errorf("batch must be an array or a map, got %s", typeName(c))
}

func dup(seen bool, key string) error {
	if seen {
		return fmt.Errorf("duplicate key %q", key)
	}
	return nil
}

// key reads a map key. Keys that are not short strings cannot be fields
// kvgate knows; they are skipped (known=false) like any unknown key.
func (dec *Decoder) key() (name string, known bool, err error) {
	c, err := dec.peek()
	if err != nil {
		return "", false, err
	}
	if !isStr(c) {
		return "", false, dec.skip()
	}
	n, err := dec.d.DecodeBytesLen()
	if err != nil {
		return "", false, ioErr(err)
	}
	if n > 64 {
		return "", false, dec.discard(n, dec.offset())
	}
	if n > dec.r.Len() {
		return "", false, errTruncated
	}
	if cap(dec.str) < n {
		dec.str = make([]byte, 64)
	}
	b := dec.str[:n]
	if err := dec.d.ReadFull(b); err != nil {
		return "", false, ioErr(err)
	}
	// Returning constants keeps the common keys allocation-free.
	switch string(b) {
	case "ts":
		return "ts", true, nil
	case "events":
		return "events", true, nil
	case "data_parallel_rank":
		return "data_parallel_rank", true, nil
	case "type":
		return "type", true, nil
	}
	for f := field(0); f < numFields; f++ {
		if fieldNames[f] == string(b) {
			return fieldNames[f], true, nil
		}
	}
	return "", false, nil
}

func (dec *Decoder) ts() (float64, error) {
	c, err := dec.peek()
	if err != nil {
		return 0, err
	}
	if c != msgpcode.Float && c != msgpcode.Double && !isInt(c) {
		return 0, fmt.Errorf("want a number, got %s", typeName(c))
	}
	f, err := dec.d.DecodeFloat64()
	if err != nil {
		return 0, ioErr(err)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("timestamp %v is not finite", f)
	}
	return f, nil
}

func (dec *Decoder) dpRank() (int, bool, error) {
	if null, err := dec.isNil(); err != nil || null {
		return 0, false, err
	}
	r, err := dec.readSmallInt(0, math.MaxInt32)
	return r, err == nil, err
}

func (dec *Decoder) events() ([]Event, error) {
	c, err := dec.peek()
	if err != nil {
		return nil, err
	}
	if !isArray(c) {
		return nil, fmt.Errorf("batch field events: want an array, got %s", typeName(c))
	}
	n, err := dec.containerLen(c, 1)
	if err != nil {
		return nil, fmt.Errorf("batch field events: %w", err)
	}
	if n > dec.lim.MaxEvents {
		return nil, fmt.Errorf("batch field events: %d events exceed the limit of %d", n, dec.lim.MaxEvents)
	}
	if n == 0 {
		return nil, nil
	}
	// A valid event takes at least 13 bytes (["BlockStored", ...]), so
	// capacity from the bytes left keeps preallocation proportional to the
	// input even when the count is a lie.
	out := make([]Event, 0, min(n, dec.r.Len()/13+1))
	for i := 0; i < n; i++ {
		out = append(out, Event{})
		start := dec.offset()
		err := dec.event(&out[i])
		if err == nil {
			continue
		}
		if out[i].Kind != 0 {
			err = fmt.Errorf("event %d (%s): %w", i, out[i].Kind, err)
		} else {
			err = fmt.Errorf("event %d: %w", i, err)
		}
		// A well-formed event kvgate cannot use costs only itself: rewind
		// and step over it whole. Input that is not msgpack at all (or
		// truncated) leaves no way to find the next event: the batch fails.
		if _, serr := dec.r.Seek(int64(start), io.SeekStart); serr != nil {
			return nil, err
		}
		if serr := dec.skipEvent(); serr != nil {
			return nil, err
		}
		out[i] = Event{Kind: out[i].Kind, Err: fmt.Errorf("byte %d: %w", start, err)}
	}
	return out, nil
}

// skipEvent steps over one whole event after checking it is well-formed
// msgpack. Its size is bounded by the payload (MaxPayloadBytes), not by
// MaxSkipBytes: an event over the token limit is still skipped whole.
func (dec *Decoder) skipEvent() error {
	saved := dec.lim.MaxSkipBytes
	dec.lim.MaxSkipBytes = dec.lim.MaxPayloadBytes
	defer func() { dec.lim.MaxSkipBytes = saved }()
	return dec.skip()
}

// fastTokens decodes the leading token ids that use the unsigned formats
// (positive fixint, uint8/16/32; what msgspec and msgpack emit for ids
// below 2^32) straight from the payload and returns how many it decoded;
// the caller decodes the rest, and reports errors, through the library.
// Token ids are most of a BlockStored event, and going through the
// library's per-byte io.ByteScanner calls measured about 3x slower.
func (dec *Decoder) fastTokens(out []uint32) int {
	p := dec.payload[dec.offset():]
	pos, i := 0, 0
loop:
	for ; i < len(out); i++ {
		if pos >= len(p) {
			break
		}
		switch c := p[pos]; {
		case c <= msgpcode.PosFixedNumHigh:
			out[i] = uint32(c)
			pos++
		case c == msgpcode.Uint8 && pos+2 <= len(p):
			out[i] = uint32(p[pos+1])
			pos += 2
		case c == msgpcode.Uint16 && pos+3 <= len(p):
			out[i] = uint32(binary.BigEndian.Uint16(p[pos+1:]))
			pos += 3
		case c == msgpcode.Uint32 && pos+5 <= len(p):
			out[i] = binary.BigEndian.Uint32(p[pos+1:])
			pos += 5
		default:
			break loop
		}
	}
	if pos > 0 {
		// Safe because msgpack reads r directly (see NewDecoder).
		_, _ = dec.r.Seek(int64(pos), io.SeekCurrent)
	}
	return i
}
