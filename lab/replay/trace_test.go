package replay

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
)

func TestParseTraceGoodLines(t *testing.T) {
	in := `{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}

{"timestamp": 12, "input_length": 512, "output_length": 0, "hash_ids": [0], "extra": "ignored"}
`
	reqs, err := ParseTrace(strings.NewReader(in), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[1].Timestamp != 12 || reqs[1].Line != 3 || !slices.Equal(reqs[0].HashIDs, []uint64{0, 1}) || reqs[0].InputLength != 1000 {
		t.Fatalf("parsed %+v", reqs)
	}
	if reqs, err := ParseTrace(strings.NewReader(in), 1); err != nil || len(reqs) != 1 {
		t.Fatalf("limit 1: %d requests, %v", len(reqs), err)
	}
}

func TestParseTraceMalformedLinesNameTheLine(t *testing.T) {
	good := `{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [1]}` + "\n"
	for _, c := range []struct{ line, want string }{
		{`{"timestamp": 1, "input_length": 10, "output_length": 1}`, "missing hash_ids"},
		{`{"input_length": 10, "output_length": 1, "hash_ids": [1]}`, "missing timestamp"},
		{`{"timestamp": 6, "input_length": 0, "output_length": 1, "hash_ids": []}`, "input_length 0"},
		{`{"timestamp": 6, "input_length": 10, "output_length": -1, "hash_ids": [1]}`, "output_length -1"},
		{`{"timestamp": 6, "input_length": 1000, "output_length": 1, "hash_ids": [1]}`, "1 hash_ids for input_length 1000, want 2"},
		{`{"timestamp": 6, "input_length": 10, "output_length": 1, "hash_ids": [4294967296]}`, "above 2^32-1"},
		{`{"timestamp": 4, "input_length": 10, "output_length": 1, "hash_ids": [1]}`, "before the previous"},
		{`{"timestamp": 6, "input_length": "x", "output_length": 1, "hash_ids": [1]}`, "not a JSON object"},
		{`not json`, "not a JSON object"},
		{`{"timestamp": 6, "input_length": 10, "output_length": 1, "hash_ids": [1]} {}`, "trailing data"},
		{`{"timestamp": 6, "input_length": 10, "output_length": 1, "hash_ids": [1], "pad": "` + strings.Repeat("x", MaxTraceLineBytes) + `"}`, "longer than"},
	} {
		_, err := ParseTrace(strings.NewReader(good+"\n"+c.line+"\n"+good), 0)
		if err == nil || !strings.Contains(err.Error(), "trace line 3") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("line %.60q: error %v, want line 3 and %q", c.line, err, c.want)
		}
	}
	if _, err := ParseTrace(strings.NewReader("\n\n"), 0); err == nil {
		t.Error("empty trace accepted")
	}
}

func TestTokensAreDeterministicPerHashID(t *testing.T) {
	r := TraceRequest{InputLength: 1100, HashIDs: []uint64{7, 9, 7}}
	a := Tokens(nil, r)
	b := Tokens(make([]uint32, 5000), r)
	if !slices.Equal(a, b) || len(a) != 1100 {
		t.Fatalf("synthesis differs between calls or has length %d", len(a))
	}
	for i, tok := range a {
		want := []uint32{7, 9, 7}[i/TraceBlockSize]
		if tok != want {
			t.Fatalf("token %d = %d, want %d (512 copies per hash id)", i, tok, want)
		}
	}
}

// idealByHand is an independent reading of the ideal hit ratio: a request's
// prompt is a string of tokens; its cached part is the longest multiple of
// blockSize (below its length) whose prefix string appeared as a
// block-aligned prefix of an earlier prompt.
func idealByHand(reqs []TraceRequest, blockSize int) float64 {
	seen := map[string]bool{}
	cached, total := 0, 0
	for _, r := range reqs {
		toks := Tokens(nil, r)
		raw := make([]byte, 0, 4*len(toks))
		for _, tok := range toks {
			raw = binary.LittleEndian.AppendUint32(raw, tok)
		}
		key := func(n int) string { return string(raw[:4*n]) }
		hit := 0
		for n := blockSize; n < len(toks); n += blockSize {
			if !seen[key(n)] {
				break
			}
			hit = n
		}
		for n := blockSize; n <= len(toks); n += blockSize {
			seen[key(n)] = true
		}
		cached += hit
		total += len(toks)
	}
	return float64(cached) / float64(total)
}

func TestIdealHitRatioOnHandCheckableTrace(t *testing.T) {
	reqs := []TraceRequest{
		{InputLength: 1024, HashIDs: []uint64{1, 2}},    // cold
		{InputLength: 1500, HashIDs: []uint64{1, 2, 3}}, // hits 1024
		{InputLength: 1024, HashIDs: []uint64{1, 2}},    // full repeat: hits 512 (last token computed)
		{InputLength: 600, HashIDs: []uint64{2, 1}},     // other order: nothing
	}
	// By hand: (0 + 1024 + 512 + 0) / (1024 + 1500 + 1024 + 600).
	const want = 1536.0 / 4148.0
	if got := IdealHitRatio(reqs, 512); got != want {
		t.Errorf("ideal at block 512 = %v, want %v", got, want)
	}
	for _, bs := range []int{64, 100, 512} {
		if got, ind := IdealHitRatio(reqs, bs), idealByHand(reqs, bs); got != ind {
			t.Errorf("block %d: ideal %v, independent %v", bs, got, ind)
		}
	}
	slice, err := LoadTrace("testdata/conversation_head300.jsonl", 120)
	if err != nil {
		t.Fatal(err)
	}
	if got, ind := IdealHitRatio(slice, 512), idealByHand(slice, 512); got != ind || got <= 0 {
		t.Errorf("testdata slice: ideal %v, independent %v", got, ind)
	}
}
