package transfer

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func encodeFrame(t testing.TB, h frameHeader, p []byte) []byte {
	var buf bytes.Buffer
	fw := newFrameWriter(&buf)
	if err := fw.write(h, p); err != nil {
		t.Fatal(err)
	}
	if err := fw.flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestFrameRoundTrip(t *testing.T) {
	for _, c := range []struct {
		h frameHeader
		p []byte
	}{
		{frameHeader{typ: frameHello}, hello{version: 1, maxPayload: 1 << 20, name: "node-7"}.encode()},
		{frameHeader{typ: frameReadReq, xfer: 1<<64 - 1, desc: 1<<32 - 1, region: 5, offset: 1 << 40}, readRequest{n: 4096, grant: Grant{1, 2, 3}}.encode()},
		{frameHeader{typ: frameData, xfer: 3, desc: 2, region: 1, offset: 77}, pattern(1, 100<<10)}, // through the vectored path
		{frameHeader{typ: frameWriteAck, flags: flagError, xfer: 9}, []byte("disk full")},
		{frameHeader{typ: frameFlush, xfer: 9, desc: 4}, nil},
	} {
		b := encodeFrame(t, c.h, c.p)
		if len(b) != frameHeadLen+len(c.p) {
			t.Fatalf("%s: %d bytes on the wire, want %d", c.h.typ, len(b), frameHeadLen+len(c.p))
		}
		f, err := readFrame(bytes.NewReader(b), 1<<20)
		if err != nil {
			t.Fatalf("%s: %v", c.h.typ, err)
		}
		want := c.h
		want.n = len(c.p)
		if f.frameHeader != want || !bytes.Equal(f.payload, c.p) {
			t.Fatalf("%s: read back %+v, want %+v", c.h.typ, f.frameHeader, want)
		}
	}
}

func TestFrameReaderRejects(t *testing.T) {
	good := encodeFrame(t, frameHeader{typ: frameData, xfer: 1, region: 1}, pattern(2, 1000))
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 0x10; return b }
	for _, c := range []struct {
		name string
		b    []byte
		max  int
		want string
	}{
		{"payload bit flipped", flip(100), 1 << 20, "checksum"},
		{"header bit flipped", flip(14), 1 << 20, "checksum"},
		{"crc bit flipped", flip(5), 1 << 20, "checksum"},
		{"length's top bit flipped", flip(0), 1 << 20, "length"},
		{"payload over the bound", good, 999, "length"},
		{"length below the fixed part", append([]byte{0, 0, 0, 5}, make([]byte, frameHeadLen)...), 1 << 20, "length"},
		{"length of 4 GiB", append([]byte{0xff, 0xff, 0xff, 0xff}, good[4:]...), 16 << 20, "length"},
		{"unknown type", func() []byte { b := bytes.Clone(good); b[8] = 99; return b }(), 1 << 20, "type"},
		{"flags on DATA", func() []byte { b := bytes.Clone(good); b[9] = 1; return b }(), 1 << 20, "flags"},
	} {
		_, err := readFrame(bytes.NewReader(c.b), c.max)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
	for cut := 1; cut < len(good); cut += 97 {
		if _, err := readFrame(bytes.NewReader(good[:cut]), 1<<20); !errors.Is(err, io.ErrUnexpectedEOF) && !(cut < frameHeadLen && errors.Is(err, io.EOF)) {
			t.Fatalf("frame cut at %d: %v, want an unexpected EOF", cut, err)
		}
	}
}

// FuzzReadFrame: any input is a frame or an error, never a panic, a
// hang or an allocation beyond the bound; a frame that decodes encodes
// back to the same bytes.
func FuzzReadFrame(f *testing.F) {
	f.Add(encodeFrame(f, frameHeader{typ: frameHello}, hello{version: 1, maxPayload: 4096, name: "a"}.encode()))
	f.Add(encodeFrame(f, frameHeader{typ: frameReadReq, xfer: 1, desc: 2, region: 3, offset: 4}, readReq(5)))
	f.Add(encodeFrame(f, frameHeader{typ: frameData, xfer: 1, region: 3}, []byte("some bytes")))
	f.Add(encodeFrame(f, frameHeader{typ: frameNotifAck, flags: flagError, xfer: 1}, []byte("queue full")))
	f.Add([]byte{0, 0, 0, 30, 0, 0, 0, 0, 1})
	f.Add([]byte{})
	const bound = 64 << 10
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := readFrame(bytes.NewReader(b), bound)
		if err != nil {
			return
		}
		if fr.n > bound || len(fr.payload) != fr.n {
			t.Fatalf("payload of %d bytes (header says %d) past the %d bound", len(fr.payload), fr.n, bound)
		}
		again := encodeFrame(t, fr.frameHeader, fr.payload)
		if !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("re-encoded frame differs from the input")
		}
		if fr.typ == frameHello || fr.typ == frameHelloAck {
			decodeHello(fr.payload, minProtocolVersion, protocolVersion) // must not panic
		}
	})
}
