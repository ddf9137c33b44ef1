package lossyproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// publisher accepts one connection and writes what a ZMQ PUB would: a
// greeting, a READY command, then count three-frame messages [topic,
// seq, payload], seq = 0..count-1, the payload large enough for a LONG
// frame every third message.
func publisher(t *testing.T, count int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		go io.Copy(io.Discard, c) // the subscriber's greeting and SUBSCRIBE
		w := bufio.NewWriter(c)
		greeting := make([]byte, greetingSize)
		greeting[0], greeting[9], greeting[10] = 0xff, 0x7f, 3
		w.Write(greeting)
		w.Write([]byte{flagCommand, 6, 5, 'R', 'E', 'A', 'D', 'Y'})
		for seq := range count {
			w.Write([]byte{flagMore, 0}) // empty topic
			w.Write(append([]byte{flagMore, 8}, binary.BigEndian.AppendUint64(nil, uint64(seq))...))
			payload := make([]byte, 10)
			if seq%3 == 0 {
				payload = make([]byte, 300)
			}
			payload[0] = byte(seq)
			if len(payload) > 255 {
				w.Write(append([]byte{flagLong}, binary.BigEndian.AppendUint64(nil, uint64(len(payload)))...))
			} else {
				w.Write([]byte{0, byte(len(payload))})
			}
			w.Write(payload)
		}
		w.Flush()
		time.Sleep(time.Second) // keep the connection open while the test reads
	}()
	return ln.Addr().String()
}

// readSeqs parses the stream the subscriber receives (independently of
// the proxy's parser) and returns the seq of each message, in order.
func readSeqs(t *testing.T, r *bufio.Reader, want int) []uint64 {
	t.Helper()
	if _, err := io.ReadFull(r, make([]byte, greetingSize)); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	var frames [][]byte
	for len(seqs) < want {
		flags, err := r.ReadByte()
		if err != nil {
			t.Fatalf("after %v: %v", seqs, err)
		}
		var size uint64
		if flags&flagLong != 0 {
			var b [8]byte
			io.ReadFull(r, b[:])
			size = binary.BigEndian.Uint64(b[:])
		} else {
			b, _ := r.ReadByte()
			size = uint64(b)
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatal(err)
		}
		if flags&flagCommand != 0 {
			continue
		}
		frames = append(frames, body)
		if flags&flagMore != 0 {
			continue
		}
		if len(frames) != 3 || len(frames[1]) != 8 {
			t.Fatalf("message of %d frames came through: framing broken", len(frames))
		}
		seq := binary.BigEndian.Uint64(frames[1])
		if frames[2][0] != byte(seq) {
			t.Fatalf("seq %d carries the payload of %d", seq, frames[2][0])
		}
		seqs = append(seqs, seq)
		frames = nil
	}
	return seqs
}

func TestDropsAndDelaysWholeMessages(t *testing.T) {
	up := publisher(t, 10)
	p, err := Start("127.0.0.1:0", up, func(n int) Action {
		switch n {
		case 2, 8:
			return Drop
		case 4:
			return Delay
		}
		return Forward
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(make([]byte, greetingSize))
	// 2 and 8 lost; 4 arrives after 5.
	want := []uint64{0, 1, 3, 5, 4, 6, 7, 9}
	if got := readSeqs(t, bufio.NewReader(c), len(want)); !slices.Equal(got, want) {
		t.Fatalf("subscriber received seqs %v, want %v", got, want)
	}
	if p.Dropped.Load() != 2 || p.Delayed.Load() != 1 {
		t.Fatalf("counted %d dropped, %d delayed; want 2 and 1", p.Dropped.Load(), p.Delayed.Load())
	}
}

func TestRejectsReservedFlags(t *testing.T) {
	// A valid short frame, then one with reserved bits.
	r := bufio.NewReader(bytes.NewReader([]byte{0, 1, 'x', 0x80, 0}))
	if _, _, err := readFrame(r); err != nil {
		t.Fatalf("valid frame: %v", err)
	}
	if _, _, err := readFrame(r); err == nil {
		t.Fatal("a frame with reserved flag bits was accepted")
	}
}
