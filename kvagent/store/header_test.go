package store

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	cases := []blockHeader{
		{Gen: 1, Key: Key{Namespace: "m", Hash: 42}, DataLen: 8192, DataSum: 0xdeadbeef_01234567},
		{Gen: 1 << 60, Key: Key{Namespace: "llama/lora-a", Hash: ^uint64(0)},
			Meta: Meta{Parent: 7, HasParent: true, TokenIDs: []uint32{1, 2, 3, 1 << 31}, LoRAName: "lora-a"}, DataLen: 1, DataSum: 1},
		{Gen: 9, Key: Key{Namespace: strings.Repeat("n", MaxNamespaceBytes), Hash: 3},
			Meta: Meta{TokenIDs: make([]uint32, MaxBlockTokens), LoRAName: strings.Repeat("l", MaxLoRABytes)}, DataLen: 2 << 20},
	}
	for i, h := range cases {
		buf := make([]byte, headerRegion)
		n, err := encodeHeader(buf, &h)
		if err != nil {
			t.Fatalf("case %d: encode: %v", i, err)
		}
		if n > headerRegion {
			t.Fatalf("case %d: header of %d bytes exceeds its region", i, n)
		}
		got, err := decodeHeader(buf)
		if err != nil {
			t.Fatalf("case %d: decode: %v", i, err)
		}
		if len(h.Meta.TokenIDs) == 0 {
			h.Meta.TokenIDs = nil
		}
		if !reflect.DeepEqual(got, h) {
			t.Fatalf("case %d: round trip\n got %+v\nwant %+v", i, got, h)
		}
	}
}

func TestHeaderRejects(t *testing.T) {
	valid := make([]byte, headerRegion)
	if _, err := encodeHeader(valid, &blockHeader{Gen: 3, Key: Key{Namespace: "m", Hash: 5}, Meta: Meta{TokenIDs: []uint32{9}}, DataLen: 64}); err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(b []byte)) []byte {
		b := append([]byte(nil), valid...)
		f(b)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"short", valid[:20], "need at least"},
		{"zero magic is an empty slot", make([]byte, headerRegion), "empty slot"},
		{"bad magic", mutate(func(b []byte) { b[0] ^= 0xff }), "bad magic"},
		{"bad version", mutate(func(b []byte) { b[4] = 9 }), "unsupported version"},
		{"length past buffer", mutate(func(b []byte) { b[6], b[7] = 0xff, 0xff }), "out of range"},
		{"flipped hash bit", mutate(func(b []byte) { b[16] ^= 1 }), "checksum"},
		{"flipped token bit", mutate(func(b []byte) { b[headerFixed+1] ^= 1 }), "checksum"},
	}
	for _, c := range cases {
		_, err := decodeHeader(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to mention %q", c.name, err, c.want)
		}
	}
	if _, err := decodeHeader(make([]byte, headerRegion)); !errors.Is(err, errEmptySlot) {
		t.Errorf("zero header: %v, want errEmptySlot", err)
	}
	if _, err := encodeHeader(make([]byte, headerRegion), &blockHeader{Meta: Meta{TokenIDs: make([]uint32, MaxBlockTokens+1)}}); err == nil {
		t.Error("encode accepted more tokens than fit a header")
	}
}

// FuzzDecodeHeader: any bytes decode to a header or an error, never a
// panic, and whatever decodes re-encodes to the same bytes.
func FuzzDecodeHeader(f *testing.F) {
	seed := func(h blockHeader) []byte {
		b := make([]byte, headerRegion)
		n, err := encodeHeader(b, &h)
		if err != nil {
			f.Fatal(err)
		}
		return b[:n]
	}
	f.Add(seed(blockHeader{Gen: 1, Key: Key{Namespace: "m", Hash: 1}, DataLen: 4096}))
	f.Add(seed(blockHeader{Gen: 2, Key: Key{Namespace: "qwen/lora", Hash: 99}, Meta: Meta{Parent: 1, HasParent: true, TokenIDs: []uint32{1, 2, 3, 4}, LoRAName: "x"}, DataLen: 65536, DataSum: 7}))
	f.Add(make([]byte, 64))
	f.Add([]byte("KVGB"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil {
			return
		}
		out := make([]byte, headerRegion)
		n, err := encodeHeader(out, &h)
		if err != nil {
			t.Fatalf("decoded header does not re-encode: %v", err)
		}
		if string(out[:n]) != string(b[:n]) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", out[:n], b[:n])
		}
	})
}
