package kvstream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// be8 is the vLLM encoding seq.to_bytes(8, "big"), written out
// independently of encodeSeq.
func be8(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

func TestEncodeSeqIsBigEndian(t *testing.T) {
	// (258).to_bytes(8, "big") == b"\x00\x00\x00\x00\x00\x00\x01\x02"
	if got, want := encodeSeq(258), []byte{0, 0, 0, 0, 0, 0, 1, 2}; !bytes.Equal(got, want) {
		t.Fatalf("encodeSeq(258) = %v, want %v", got, want)
	}
	// (-1).to_bytes(8, "big", signed=True) == b"\xff" * 8
	if got := encodeSeq(endOfReplaySeq); !bytes.Equal(got, bytes.Repeat([]byte{0xff}, 8)) {
		t.Fatalf("end marker encodes as %v", got)
	}
}

func TestParseLive(t *testing.T) {
	ok := []struct {
		topic  string
		frames [][]byte
		seq    uint64
	}{
		{"", [][]byte{{}, be8(0), []byte("p")}, 0},
		{"", [][]byte{[]byte("kv-events"), be8(1 << 40), []byte("p")}, 1 << 40},
		{"kv", [][]byte{[]byte("kv-events"), be8(7), []byte{}}, 7},
		{"", [][]byte{{}, be8(3), make([]byte, 16)}, 3},
	}
	for _, c := range ok {
		m, err := parseLive(c.frames, c.topic, 16)
		if err != nil {
			t.Errorf("parseLive(%q, topic %q): %v", c.frames, c.topic, err)
			continue
		}
		if m.seq != c.seq || !bytes.Equal(m.payload, c.frames[2]) {
			t.Errorf("parseLive(%q) = seq %d payload %q", c.frames, m.seq, m.payload)
		}
	}
	bad := []struct {
		topic  string
		frames [][]byte
	}{
		{"", nil},
		{"", [][]byte{{}}},
		{"", [][]byte{{}, be8(1)}},
		{"", [][]byte{{}, be8(1), {}, {}}},
		{"", [][]byte{{}, be8(1)[:7], {}}},
		{"", [][]byte{{}, append(be8(1), 0), {}}},
		{"", [][]byte{{}, be8(endOfReplaySeq), {}}},
		{"", [][]byte{{}, be8(1), make([]byte, 17)}},
		{"kv", [][]byte{[]byte("other"), be8(1), {}}},
		{"kv", [][]byte{[]byte("k"), be8(1), {}}},
	}
	for _, c := range bad {
		if _, err := parseLive(c.frames, c.topic, 16); !errors.Is(err, errMalformed) {
			t.Errorf("parseLive(%q, topic %q) error %v, want errMalformed", c.frames, c.topic, err)
		}
	}
}

// Both reply layouts: vLLM >= v0.26 (vllm#45177) puts the topic before the
// seq and an empty topic before END_SEQ; older vLLM and SGLang do not.
func TestParseReplayReply(t *testing.T) {
	end := bytes.Repeat([]byte{0xff}, 8)
	for _, c := range []struct {
		name   string
		frames [][]byte
		topic  string
	}{
		{"legacy", [][]byte{{}, be8(42), []byte("payload")}, ""},
		{"v0.26 empty topic", [][]byte{{}, {}, be8(42), []byte("payload")}, ""},
		{"v0.26 topic", [][]byte{{}, []byte("kv@10.0.0.1@qwen3"), be8(42), []byte("payload")}, "kv@"},
	} {
		r, err := parseReplayReply(c.frames, c.topic, 16)
		if err != nil || r.end || r.seq != 42 || string(r.payload) != "payload" {
			t.Fatalf("%s reply: %+v, %v", c.name, r, err)
		}
	}
	for _, frames := range [][][]byte{{{}, end, {}}, {{}, {}, end, {}}} {
		r, err := parseReplayReply(frames, "kv@", 16)
		if err != nil || !r.end {
			t.Fatalf("end marker %q: %+v, %v", frames, r, err)
		}
	}
	for _, frames := range [][][]byte{
		{be8(1), []byte("p")},                          // REQ-style reply without delimiter
		{[]byte("x"), be8(1), []byte("p")},             // non-empty delimiter
		{{}, be8(1)[:4], []byte("p")},                  // short seq
		{{}, be8(1), make([]byte, 17)},                 // over limit
		{{}, []byte("kv@a"), be8(1), make([]byte, 17)}, // over limit, v0.26
		{{}, []byte("other"), be8(1), []byte("p")},     // another publisher's topic
		{{}, []byte("kv@a"), end, {}},                  // end marker with a topic
		{{}, end, []byte("x")},                         // end marker with a payload
		{{}, []byte("kv@a"), be8(1), []byte("p"), {}},  // extra frame
		{{}, []byte("kv@a"), be8(1)[:7], []byte("p")},  // short seq, v0.26
		{{}, be8(1), []byte("p"), []byte("q")},         // seq where the topic goes
	} {
		if _, err := parseReplayReply(frames, "kv@", 16); !errors.Is(err, errMalformed) {
			t.Errorf("parseReplayReply(%q) error %v, want errMalformed", frames, err)
		}
	}
}

func TestParseReplayRequest(t *testing.T) {
	id, start, err := parseReplayRequest([][]byte{[]byte("client"), {}, be8(9)})
	if err != nil || string(id) != "client" || start != 9 {
		t.Fatalf("request: id %q start %d err %v", id, start, err)
	}
	for _, frames := range [][][]byte{
		{[]byte("client"), be8(9)},
		{[]byte("client"), []byte("x"), be8(9)},
		{[]byte("client"), {}, be8(9)[:3]},
		{[]byte("client"), {}, be8(9), {}},
	} {
		if _, _, err := parseReplayRequest(frames); !errors.Is(err, errMalformed) {
			t.Errorf("parseReplayRequest(%q) error %v, want errMalformed", frames, err)
		}
	}
}
