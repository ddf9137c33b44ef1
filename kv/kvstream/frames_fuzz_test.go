package kvstream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"
)

// splitFrames cuts fuzz input into frames: each frame is a length byte
// followed by that many bytes (the last frame takes what is left).
func splitFrames(b []byte) [][]byte {
	var frames [][]byte
	for len(b) > 0 && len(frames) < 8 {
		n := min(int(b[0]), len(b)-1)
		frames = append(frames, b[1:1+n])
		b = b[1+n:]
	}
	return frames
}

// FuzzParseFrames feeds arbitrary frame lists to the three message
// parsers of the event and replay sockets (peer-controlled bytes). None
// may panic; an accepted message must say exactly what its frames say;
// a rejection must be errMalformed.
func FuzzParseFrames(f *testing.F) {
	seq := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	join := func(frames ...[]byte) []byte {
		var out []byte
		for _, fr := range frames {
			out = append(out, byte(len(fr)))
			out = append(out, fr...)
		}
		return out
	}
	f.Add(join([]byte(""), seq(0), []byte{0x93, 0xcb}), "", 16)
	f.Add(join([]byte("kv"), seq(7), []byte("payload")), "kv", 4)
	f.Add(join([]byte(""), seq(^uint64(0)), nil), "", 16)
	f.Add(join([]byte("id"), nil, seq(3)), "", 16)
	f.Add([]byte{3, 1, 2, 3}, "x", 0)
	f.Fuzz(func(t *testing.T, raw []byte, topic string, maxPayload int) {
		frames := splitFrames(raw)
		maxPayload = max(maxPayload, 0)
		if m, err := parseLive(frames, topic, maxPayload); err == nil {
			if len(frames) != 3 || !bytes.HasPrefix(frames[0], []byte(topic)) || m.seq != binary.BigEndian.Uint64(frames[1]) ||
				m.seq == endOfReplaySeq || !bytes.Equal(m.payload, frames[2]) || len(m.payload) > maxPayload {
				t.Fatalf("parseLive accepted %q as seq %d payload %q", frames, m.seq, m.payload)
			}
		} else if !errors.Is(err, errMalformed) {
			t.Fatalf("parseLive error %v is not errMalformed", err)
		}
		if r, err := parseReplayReply(frames, topic, maxPayload); err == nil {
			rest := frames[1:]
			if len(frames) == 4 {
				if !bytes.HasPrefix(frames[1], []byte(topic)) && !r.end {
					t.Fatalf("parseReplayReply accepted foreign topic %q", frames)
				}
				rest = frames[2:]
			}
			if (len(frames) != 3 && len(frames) != 4) || len(frames[0]) != 0 || len(rest[0]) != 8 {
				t.Fatalf("parseReplayReply accepted %q", frames)
			}
			s := binary.BigEndian.Uint64(rest[0])
			if r.end != (s == endOfReplaySeq) || (!r.end && (r.seq != s || !bytes.Equal(r.payload, rest[1]) || len(r.payload) > maxPayload)) {
				t.Fatalf("parseReplayReply read %q as %+v", frames, r)
			}
		} else if !errors.Is(err, errMalformed) {
			t.Fatalf("parseReplayReply error %v is not errMalformed", err)
		}
		if id, start, err := parseReplayRequest(frames); err == nil {
			if len(frames) != 3 || len(frames[1]) != 0 || !bytes.Equal(id, frames[0]) || start != binary.BigEndian.Uint64(frames[2]) {
				t.Fatalf("parseReplayRequest read %q as id %q start %d", frames, id, start)
			}
		} else if !errors.Is(err, errMalformed) {
			t.Fatalf("parseReplayRequest error %v is not errMalformed", err)
		}
	})
}

// scanState is the parser state of a frameLimitConn that tests compare.
type scanState struct {
	greetingLeft, headerHave, headerNeed, framesInMsg int
	bodyLeft                                          uint64
	inFrame, handshakeDone                            bool
}

func stateOf(c *frameLimitConn) scanState {
	return scanState{c.greetingLeft, c.headerHave, c.headerNeed, c.framesInMsg, c.bodyLeft, c.inFrame, c.handshakeDone}
}

// FuzzFrameLimitScan feeds an arbitrary ZMTP byte stream (a peer's) to the
// guard that parses it ahead of zmq4, once whole and once cut into chunks
// of chunk bytes, as TCP may deliver it. It must not panic, and the
// verdict and parser state must not depend on how the bytes were cut.
func FuzzFrameLimitScan(f *testing.F) {
	greeting := make([]byte, zmtpGreetingSize)
	ready := append(append([]byte{}, greeting...), zmtpFlagCommand, 5, 'R', 'E', 'A', 'D', 'Y')
	msg := append(append([]byte{}, ready...), zmtpFlagMore, 0, zmtpFlagMore, 8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 3, 1, 2, 3)
	long := append(append([]byte{}, ready...), zmtpFlagLong, 0, 0, 0, 0, 0, 0, 0x10, 0)
	f.Add(msg, uint8(1), uint16(1024))
	f.Add(msg, uint8(7), uint16(2))
	f.Add(long, uint8(3), uint16(1024))
	f.Add(append(append([]byte{}, ready...), 0xF8, 0), uint8(64), uint16(10))
	f.Add(append(append([]byte{}, ready...), zmtpFlagCommand|zmtpFlagMore, 0), uint8(2), uint16(10))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8, maxFrame uint16) {
		if chunk == 0 {
			chunk = 1
		}
		run := func(step int) (scanState, error) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			c := newFrameLimitConn(a, guardLimits{maxFrameBytes: uint64(maxFrame), maxFramesPerMsg: 4})
			for rest := stream; len(rest) > 0; {
				k := min(step, len(rest))
				if err := c.scan(rest[:k]); err != nil {
					return stateOf(c), err
				}
				rest = rest[k:]
			}
			return stateOf(c), nil
		}
		whole, errWhole := run(len(stream) + 1)
		cut, errCut := run(int(chunk))
		if (errWhole == nil) != (errCut == nil) {
			t.Fatalf("verdict depends on chunking: whole %v, in %d-byte chunks %v", errWhole, chunk, errCut)
		}
		if errWhole != nil {
			if !errors.Is(errWhole, errFrameLimit) {
				t.Fatalf("error %v is not errFrameLimit", errWhole)
			}
			return
		}
		if whole != cut {
			t.Fatalf("state depends on chunking: whole %+v, in %d-byte chunks %+v", whole, chunk, cut)
		}
	})
}
