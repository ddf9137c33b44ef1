package kvevents

import (
	"errors"
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
