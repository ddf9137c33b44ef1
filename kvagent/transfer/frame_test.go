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

// Queued frames go out in order with written ones, each once, their
// callbacks after they were handed to the connection; a queue dropped
// unsent still runs its callbacks.
func TestFrameWriterQueue(t *testing.T) {
	var w bytes.Buffer
	fw := newFrameWriter(&w)
	fw.useVersion(3, false)
	sent := 0
	var order []frameHeader
	big := pattern(4, 100<<10)
	for i := range 3 {
		h := frameHeader{typ: frameData, xfer: 1, desc: uint32(i), region: 1, offset: uint64(i)}
		order = append(order, h)
		if err := fw.queue(h, big[i*1000:i*1000+5000], func() { sent++ }); err != nil {
			t.Fatal(err)
		}
	}
	if w.Len() != 0 || sent != 0 || fw.buffered() != 3*(frameHeadLen+5000) {
		t.Fatalf("queued frames: %d bytes written, %d callbacks, %d buffered; want nothing sent yet", w.Len(), sent, fw.buffered())
	}
	ack := frameHeader{typ: frameWriteAck, xfer: 2}
	order = append(order, ack)
	if err := fw.write(ack, nil); err != nil { // sends the queue first
		t.Fatal(err)
	}
	if sent != 3 {
		t.Fatalf("%d callbacks after the queue went out, want 3", sent)
	}
	h := frameHeader{typ: frameData, xfer: 3, region: 1}
	order = append(order, h)
	if err := fw.queue(h, big, nil); err != nil {
		t.Fatal(err)
	}
	if err := fw.flush(); err != nil {
		t.Fatal(err)
	}
	fr := newFrameReader(bytes.NewReader(w.Bytes()), 1<<20)
	fr.useVersion(3, false)
	for i, want := range order {
		f, err := readFrameFrom(fr)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.typ != want.typ || f.xfer != want.xfer || f.desc != want.desc || f.offset != want.offset {
			t.Fatalf("frame %d is %+v, want %+v", i, f.frameHeader, want)
		}
	}
	if _, err := readFrameFrom(fr); !errors.Is(err, io.EOF) {
		t.Fatalf("after the frames: %v, want EOF", err)
	}
	dropped := false
	fw.queue(frameHeader{typ: frameData, xfer: 4, region: 1}, big, func() { dropped = true })
	fw.dropQueued()
	if !dropped || fw.buffered() != 0 {
		t.Fatalf("dropQueued: callback run %v, %d bytes still buffered", dropped, fw.buffered())
	}
}

// Enough queued bytes go out without waiting for a flush.
func TestFrameWriterQueueSendsWhenFull(t *testing.T) {
	var w bytes.Buffer
	fw := newFrameWriter(&w)
	p := pattern(5, 64<<10)
	for i := 0; i*len(p) < maxQueuedBytes; i++ {
		if err := fw.queue(frameHeader{typ: frameData, xfer: 1, desc: uint32(i), region: 1}, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if w.Len() < maxQueuedBytes || fw.buffered() != 0 {
		t.Fatalf("after %d bytes queued: %d written, %d buffered", maxQueuedBytes, w.Len(), fw.buffered())
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// Frames queued on a connection that fails still run their callbacks
// (they hold ReadAccess pins), once.
func TestFrameWriterQueueFailureRunsCallbacks(t *testing.T) {
	fw := newFrameWriter(failingWriter{})
	runs := 0
	for i := range 3 {
		if err := fw.queue(frameHeader{typ: frameData, xfer: 1, desc: uint32(i), region: 1}, pattern(9, 1000), func() { runs++ }); err != nil {
			t.Fatal(err)
		}
	}
	if err := fw.flush(); err == nil {
		t.Fatal("flush to a failing connection: no error")
	}
	fw.dropQueued()
	if runs != 3 || fw.buffered() != 0 {
		t.Fatalf("%d callbacks after the failed send (want 3), %d bytes still buffered", runs, fw.buffered())
	}
}

// readFrame reads one whole frame whose payload is at most maxPayload,
// through the frameReader the connections use.
func readFrame(r io.Reader, maxPayload int) (frame, error) {
	fr := newFrameReader(r, maxPayload)
	h, err := fr.next()
	if err != nil {
		return frame{}, err
	}
	p, err := fr.payload(h)
	if err != nil {
		return frame{}, err
	}
	return frame{h, p}, nil
}
