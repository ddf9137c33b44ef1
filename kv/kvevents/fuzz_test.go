package kvevents

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzDecode: no input panics, and whatever decodes survives Encode and
// Decode again unchanged, in every encoding (events dropped as unusable
// are left out, and a field combination no producer's layout expresses is
// skipped for that encoding).
func FuzzDecode(f *testing.F) {
	for _, fx := range loadFixtures(f) {
		f.Add(fx.payload)
	}
	dec := NewDecoder(Limits{})
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := dec.Decode(payload)
		if err != nil {
			return
		}
		usable := b.Events[:0:0]
		for _, ev := range b.Events {
			if ev.Err == nil {
				usable = append(usable, ev)
			}
		}
		b.Events = usable
		if len(b.Events) == 0 {
			b.Events = nil
		}
		for _, enc := range []Encoding{EncodingArray, EncodingMap, EncodingMapBatch} {
			out, err := Encode(b, enc)
			if errors.Is(err, ErrNotEncodable) {
				continue
			}
			if err != nil {
				t.Fatalf("encoding %d: re-encode of a decoded batch failed: %v", enc, err)
			}
			again, err := dec.Decode(out)
			if err != nil {
				t.Fatalf("encoding %d: re-decode failed: %v", enc, err)
			}
			if !reflect.DeepEqual(again, b) {
				t.Fatalf("encoding %d: round trip changed the batch\nfirst  %+v\nsecond %+v", enc, b, again)
			}
		}
	})
}

// FuzzDecodeTRTLLM: no TensorRT-LLM list panics the decoder, and whatever
// decodes usably survives EncodeTRTLLM and Decode again unchanged.
func FuzzDecodeTRTLLM(f *testing.F) {
	for _, name := range []string{"trtllm_chain.msgpack", "trtllm_attention_dp.msgpack", "trtllm_unusable.msgpack"} {
		payload, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(payload)
	}
	dec := NewFormatDecoder(FormatTRTLLM, Limits{})
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := dec.Decode(payload)
		if err != nil {
			return
		}
		usable := []Event{}
		for _, ev := range b.Events {
			if ev.Err == nil {
				usable = append(usable, ev)
			}
		}
		b.Events = usable
		out, err := EncodeTRTLLM(b, 0)
		if errors.Is(err, ErrNotEncodable) {
			return
		}
		if err != nil {
			t.Fatalf("re-encode failed: %v", err)
		}
		again, err := dec.Decode(out)
		if err != nil {
			t.Fatalf("re-decode failed: %v", err)
		}
		if len(again.Events) == 0 {
			again.Events = []Event{}
		}
		if !reflect.DeepEqual(again, b) {
			t.Fatalf("round trip changed the batch\nfirst  %+v\nsecond %+v", b, again)
		}
	})
}
