package kvevents

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// pack encodes a literal msgpack value for malformed-input cases. Maps are
// written with sorted keys so that "type" position is deterministic where
// it matters; cases needing an exact layout use raw bytes instead.
func pack(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	e.SetSortMapKeys(true)
	if err := e.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func stored(fields ...any) []any { return append([]any{"BlockStored"}, fields...) }

func tokens16(start int) []any {
	out := make([]any, 16)
	for i := range out {
		out[i] = start + i
	}
	return out
}

func deepValue(n int) any {
	v := any(nil)
	for i := 0; i < n; i++ {
		v = []any{v}
	}
	return v
}

// clearedTail follows a bad event in the per-event cases: it must survive.
var clearedTail = []any{"AllBlocksCleared"}

// Events that are well-formed msgpack but unusable are dropped one at a
// time, with a reason that says where: the rest of their batch decodes
// (Dynamo zmq_wire RawKvEvent::Ignored; llm-d's adapters likewise).
func TestDecodeDropsUnusableEventsOneAtATime(t *testing.T) {
	badTokens := tokens16(0)
	badTokens[2] = -5
	bigToken := tokens16(0)
	bigToken[15] = uint64(1) << 32
	cases := []struct {
		name string
		bad  any
		lim  Limits
		want string
	}{
		{"negative token", stored([]any{1}, nil, badTokens, 16), Limits{},
			"event 0 (BlockStored): field token_ids: element 2: negative token id -5"},
		{"token over 32 bits", stored([]any{1}, nil, bigToken, 16), Limits{},
			"event 0 (BlockStored): field token_ids: element 15: token id 4294967296 does not fit in 32 bits"},
		{"token not an integer", stored([]any{1}, nil, []any{1, "x"}, 16), Limits{},
			"field token_ids: element 1: want an integer, got string"},
		{"nil hashes", stored(nil, nil, tokens16(0), 16), Limits{},
			"event 0 (BlockStored): field block_hashes: want an array, got nil"},
		{"hash is a float", []any{"BlockRemoved", []any{1, 2.5}}, Limits{},
			"event 0 (BlockRemoved): field block_hashes: element 1: want a block hash (integer or bytes), got float"},
		{"hash bytes too long", []any{"BlockRemoved", []any{make([]byte, 65)}}, Limits{},
			"element 0: bytes of 65 bytes exceeds the limit of 64"},
		{"negative block size", stored([]any{1}, nil, tokens16(0), -1), Limits{},
			"field block_size: -1 is out of range [0, 65536]"},
		{"missing token_ids", stored([]any{1}, nil), Limits{},
			"event 0 (BlockStored): missing field token_ids"},
		{"map event missing field", map[string]any{"type": "BlockStored", "block_hashes": []any{1}, "block_size": 16}, Limits{},
			"missing field token_ids"},
		{"map event without type", map[string]any{"block_hashes": []any{1}}, Limits{},
			"event 0: event map lacks \"type\""},
		{"unknown event type", []any{"BlockMoved", []any{1}}, Limits{},
			"event 0: unknown event type \"BlockMoved\""},
		{"empty event", []any{}, Limits{},
			"event 0: empty event array"},
		{"event is a number", 1, Limits{},
			"event 0: event must be an array or a map, got integer"},
		{"negative group_idx", []any{"BlockRemoved", []any{1}, "GPU", -2}, Limits{},
			"field group_idx: -2 is out of range"},
		{"medium is bytes", []any{"BlockRemoved", []any{1}, []byte("GPU")}, Limits{},
			"field medium: want a string, got bytes"},
		{"lora_name is a number", stored([]any{1}, nil, tokens16(0), 16, nil, "GPU", 7), Limits{},
			"field lora_name: want a string, got integer"},
		{"extra_keys is a string", stored([]any{1}, nil, tokens16(0), 16, nil, "GPU", nil, "salt"), Limits{},
			"field extra_keys: want an array, got string"},
		{"too many tokens", stored([]any{1}, nil, tokens16(0), 16), Limits{MaxTokensPerEvent: 8},
			"field token_ids: 16 tokens exceed the limit of 8"},
		{"too many hashes", []any{"BlockRemoved", []any{1, 2, 3}}, Limits{MaxHashesPerEvent: 2},
			"field block_hashes: 3 hashes exceed the limit of 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewDecoder(tc.lim).Decode(pack(t, []any{1.0, []any{tc.bad, clearedTail}}))
			if err != nil {
				t.Fatalf("the batch failed (%v); want only event 0 dropped", err)
			}
			if len(b.Events) != 2 || b.Events[0].Err == nil {
				t.Fatalf("decoded %+v, want event 0 with an error containing %q", b, tc.want)
			}
			if e := b.Events[0].Err.Error(); !strings.Contains(e, tc.want) || !strings.HasPrefix(e, "byte 11: ") {
				t.Fatalf("event error %q, want it to start with its byte offset and contain %q", e, tc.want)
			}
			if b.Events[1].Err != nil || b.Events[1].Kind != AllBlocksCleared {
				t.Fatalf("the event after the bad one is %+v, want AllBlocksCleared", b.Events[1])
			}
		})
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	cases := []struct {
		name    string
		payload []byte
		lim     Limits
		want    string
	}{
		{"batch is a string", pack(t, "hello"), Limits{},
			"batch must be an array or a map, got string"},
		{"batch too short", pack(t, []any{1.0}), Limits{},
			"batch array has 1 fields, want at least 2"},
		{"ts is a string", pack(t, []any{"now", []any{}}), Limits{},
			"batch field ts: want a number, got string"},
		{"ts is NaN", pack(t, []any{math.NaN(), []any{}}), Limits{},
			"timestamp NaN is not finite"},
		{"negative dp rank", pack(t, []any{1.0, []any{}, -1}), Limits{},
			"batch field data_parallel_rank: -1 is out of range"},
		{"map batch without events", pack(t, map[string]any{"ts": 1.0}), Limits{},
			"batch map lacks ts or events"},
		{"duplicate key", append([]byte{0x83}, append(pack(t, "ts"), append(pack(t, 1.0), append(pack(t, "ts"), pack(t, 2.0)...)...)...)...), Limits{},
			"batch field ts: duplicate key \"ts\""},
		{"too many events", pack(t, []any{1.0, []any{[]any{"AllBlocksCleared"}, []any{"AllBlocksCleared"}, []any{"AllBlocksCleared"}}}), Limits{MaxEvents: 2},
			"3 events exceed the limit of 2"},
		{"payload too big", pack(t, []any{1.0, []any{}}), Limits{MaxPayloadBytes: 4},
			"payload of 11 bytes exceeds the limit of 4"},
		{"trailing bytes", append(pack(t, []any{1.0, []any{}}), 0x00), Limits{},
			"1 trailing bytes after the batch"},
		// An array32 header claiming 4 billion events, then nothing: the
		// length is checked against the input before anything is allocated.
		{"huge events length", append(pack(t, 1.0)[:0], 0x92, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff), Limits{},
			"array of 4294967295 elements is longer than the 0 bytes left"},
		// A bad event that is not even msgpack cannot be stepped over.
		{"huge token length", append(pack(t, []any{1.0, []any{stored([]any{1}, nil)}})[:0],
			append([]byte{0x92, 0x01, 0x91, 0x95}, append(pack(t, "BlockStored"), 0x91, 0x01, 0xc0, 0xdd, 0x7f, 0xff, 0xff, 0xff)...)...), Limits{},
			"field token_ids: array of 2147483647 elements is longer than the 0 bytes left"},
		{"reserved code inside an event", append([]byte{0x92, 0x01, 0x91, 0x92}, append(pack(t, "BlockRemoved"), 0xc1)...), Limits{},
			"event 0 (BlockRemoved): field block_hashes"},
		{"huge skipped string", append([]byte{0x93, 0x01, 0x90, 0xdb, 0x7f, 0xff, 0xff, 0xff}, 'x'), Limits{},
			"batch field data_parallel_rank: want an integer, got string"},
		{"huge unknown trailing string", append([]byte{0x94, 0x01, 0x90, 0xc0, 0xdb, 0x7f, 0xff, 0xff, 0xff}, 'x'), Limits{},
			"batch field 3: input ends in the middle of a value"},
		// Nesting past MaxSkipDepth is a resource bound, not a shape: the
		// event cannot be stepped over either.
		{"too deep extra_keys", pack(t, []any{1.0, []any{stored([]any{1}, nil, tokens16(0), 16, nil, "GPU", nil, []any{[]any{deepValue(40)}})}}), Limits{},
			"field extra_keys: block 0: key 0: skipped value nests deeper than 32"},
		{"reserved code", []byte{0x93, 0x01, 0x90, 0xc1}, Limits{},
			"batch field data_parallel_rank: want an integer, got code 0xc1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewDecoder(tc.lim).Decode(tc.payload)
			if err == nil {
				t.Fatalf("decoded %+v, want error containing %q", b, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "kvevents: byte ") && !strings.Contains(err.Error(), "exceeds the limit of 4") {
				t.Fatalf("error %q does not say where", err)
			}
		})
	}
}

// Every strict prefix of a valid payload is an error, never a panic or a
// partial batch.
func TestDecodeTruncatedFixtures(t *testing.T) {
	for _, fx := range loadFixtures(t) {
		for n := 0; n < len(fx.payload); n++ {
			if b, err := decodeFresh(fx.payload[:n]); err == nil {
				t.Fatalf("%s: prefix of %d/%d bytes decoded to %+v", fx.name, n, len(fx.payload), b)
			}
		}
	}
}

func TestDecodeHashForms(t *testing.T) {
	sha := make([]byte, 32)
	for i := range sha {
		sha[i] = byte(i + 1)
	}
	cases := []struct {
		name string
		wire any
		want uint64
	}{
		{"negative int64", int64(-1), math.MaxUint64},
		{"min int64", int64(math.MinInt64), 1 << 63},
		{"max uint64", uint64(math.MaxUint64), math.MaxUint64},
		{"small positive", 7, 7},
		{"32 bytes uses the last 8", sha, 0x191a1b1c1d1e1f20},
		{"3 bytes are left-padded", []byte{0xaa, 0xbb, 0xcc}, 0xaabbcc},
		{"empty bytes", []byte{}, 0},
		{"str bytes", "\x01\x02", 0x0102},
	}
	for _, tc := range cases {
		b, err := decodeFresh(pack(t, []any{0, []any{[]any{"BlockRemoved", []any{tc.wire}}}}))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := b.Events[0].BlockHashes[0]; got != tc.want {
			t.Errorf("%s: hash %#x, want %#x", tc.name, got, tc.want)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	b := Batch{TS: 12.5, DPRank: 4, HasDPRank: true, Events: []Event{
		{Kind: BlockStored, BlockHashes: []uint64{math.MaxUint64, 3}, ParentHash: 1 << 63, HasParent: true,
			TokenIDs: []uint32{0, 1, math.MaxUint32, 7}, BlockSize: 2, LoRAID: -3, HasLoRAID: true,
			LoRAName: "adapter", Medium: "CPU_TIER2", GroupIdx: 3, HasGroupIdx: true, SpecKind: "sliding_window"},
		{Kind: BlockStored, BlockHashes: []uint64{9}, TokenIDs: []uint32{5, 6}, BlockSize: 2, CacheSalt: "tenant-a",
			GroupIdx: 0, HasGroupIdx: true, SpecKind: "full_attention", Locality: "LOCAL"},
		{Kind: BlockStored, BlockHashes: []uint64{10}, ParentHash: 9, HasParent: true, TokenIDs: []uint32{7, 8}, BlockSize: 2, CacheSalt: "tenant-a"},
		{Kind: BlockStored, BlockHashes: []uint64{11, 12}, TokenIDs: []uint32{7, 8, 9, 10}, BlockSize: 2, LoRAName: "adapter", CacheSalt: "adapter"},
		{Kind: BlockStored, BlockHashes: []uint64{13}, TokenIDs: []uint32{}, BlockSize: 0, Medium: "CPU"},
		{Kind: BlockRemoved, BlockHashes: []uint64{9, 3}, Medium: "GPU", GroupIdx: 1, HasGroupIdx: true},
		{Kind: BlockRemoved, BlockHashes: []uint64{9}, Medium: "CPU", Locality: "REMOTE"},
		{Kind: BlockRemoved},
		{Kind: AllBlocksCleared},
	}}
	b.Events[4].TokenIDs = nil // empty lists decode to nil
	for _, enc := range []Encoding{EncodingArray, EncodingMap, EncodingMapBatch} {
		payload, err := Encode(b, enc)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeFresh(payload)
		if err != nil {
			t.Fatalf("encoding %d: %v", enc, err)
		}
		if !reflect.DeepEqual(got, b) {
			t.Fatalf("encoding %d: round trip\n got %+v\nwant %+v", enc, got, b)
		}
	}
	if _, err := Encode(Batch{Events: []Event{{Kind: 9}}}, EncodingArray); err == nil {
		t.Fatal("Encode accepted an unknown kind")
	}
}

// A reused Decoder must not leak state (scratch buffers, flags) from one
// payload into the next.
func TestDecoderReuse(t *testing.T) {
	fxs := loadFixtures(t)
	dec := NewDecoder(Limits{})
	for round := 0; round < 2; round++ {
		for _, fx := range fxs {
			if _, err := dec.Decode([]byte{0xc1}); err == nil {
				t.Fatal("0xc1 decoded")
			}
			got, err := dec.Decode(fx.payload)
			if err != nil {
				t.Fatalf("%s: %v", fx.name, err)
			}
			if !reflect.DeepEqual(got, fx.want) {
				t.Fatalf("%s: reused decoder gave %+v", fx.name, got)
			}
		}
	}
}

// decodeFresh decodes one payload with DefaultLimits, on a fresh Decoder.
func decodeFresh(payload []byte) (Batch, error) {
	return NewDecoder(Limits{}).Decode(payload)
}
