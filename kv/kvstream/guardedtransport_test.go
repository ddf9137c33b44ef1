package kvstream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// zmtpStream builds a peer's byte stream by hand from RFC 23 (ZMTP 3.0):
// a 64-byte greeting, then frames [flags][size][body].
type zmtpStream struct{ bytes.Buffer }

func newZMTPStream() *zmtpStream {
	s := &zmtpStream{}
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 0
	copy(g[12:], "NULL")
	s.Write(g)
	return s
}

func (s *zmtpStream) frame(flags byte, body []byte) *zmtpStream {
	if len(body) > 255 {
		flags |= zmtpFlagLong
	}
	s.WriteByte(flags)
	if flags&zmtpFlagLong != 0 {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(body)))
		s.Write(n[:])
	} else {
		s.WriteByte(byte(len(body)))
	}
	s.Write(body)
	return s
}

// readThroughGuard feeds stream to a frameLimitConn in chunks of chunk
// bytes and returns what came out and the first error other than EOF.
func readThroughGuard(t *testing.T, stream []byte, chunk int, limits guardLimits) ([]byte, int, error) {
	t.Helper()
	client, server := net.Pipe()
	defer client.Close()
	go func() {
		defer server.Close()
		for len(stream) > 0 {
			n := min(chunk, len(stream))
			if _, err := server.Write(stream[:n]); err != nil {
				return
			}
			stream = stream[n:]
		}
	}()
	violations := 0
	limits.onViolation = func(error) { violations++ }
	g := newFrameLimitConn(client, limits)
	var out bytes.Buffer
	buf := make([]byte, 7)
	for {
		n, err := g.Read(buf)
		out.Write(buf[:n])
		if errors.Is(err, io.EOF) {
			return out.Bytes(), violations, nil
		}
		if err != nil {
			return out.Bytes(), violations, err
		}
	}
}

func TestFrameLimitConnPassesValidStream(t *testing.T) {
	s := newZMTPStream().
		frame(zmtpFlagCommand, append([]byte("\x05READY"), bytes.Repeat([]byte("m"), 40)...)).
		frame(zmtpFlagMore, []byte("topic")).
		frame(zmtpFlagMore, be8(1)).
		frame(0, bytes.Repeat([]byte("p"), 1000)). // long frame
		frame(0, nil).                             // empty single-frame message
		frame(zmtpFlagCommand, []byte("\x04PING"))
	want := append([]byte(nil), s.Bytes()...)
	for _, chunk := range []int{1, 3, 64, 4096} {
		got, v, err := readThroughGuard(t, want, chunk, guardLimits{maxFrameBytes: 1000, handshakeTimeout: time.Minute})
		if err != nil || v != 0 {
			t.Fatalf("chunk %d: err %v, violations %d", chunk, err, v)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("chunk %d: stream altered (%d bytes in, %d out)", chunk, len(want), len(got))
		}
	}
}

func TestFrameLimitConnCutsHostileStreams(t *testing.T) {
	huge := newZMTPStream()
	huge.WriteByte(zmtpFlagLong)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], 1<<50) // zmq4 would make([]byte, 1<<50)
	huge.Write(n[:])

	tooManyFrames := newZMTPStream()
	for range maxGuardFramesPerMessage + 1 {
		tooManyFrames.frame(zmtpFlagMore, []byte("f"))
	}

	cases := map[string][]byte{
		"frame over limit":          newZMTPStream().frame(0, make([]byte, 1001)).Bytes(),
		"2^50-byte frame header":    huge.Bytes(),
		"too many frames":           tooManyFrames.Bytes(),
		"reserved flag bits":        newZMTPStream().frame(0x10, []byte("x")).Bytes(),
		"command with MORE":         newZMTPStream().frame(zmtpFlagCommand|zmtpFlagMore, []byte("\x04PING")).Bytes(),
		"over limit after good one": newZMTPStream().frame(0, []byte("ok")).frame(0, make([]byte, 5000)).Bytes(),
	}
	for name, stream := range cases {
		t.Run(name, func(t *testing.T) {
			_, v, err := readThroughGuard(t, stream, 5, guardLimits{maxFrameBytes: 1000, handshakeTimeout: time.Minute})
			if !errors.Is(err, errFrameLimit) || v != 1 {
				t.Fatalf("err %v, violations %d; want errFrameLimit once", err, v)
			}
		})
	}
}
