package kvevents

import (
	"reflect"
	"testing"
)

// FuzzDecode: no input panics, and whatever decodes survives Encode and
// Decode again unchanged, in both encodings.
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
		for _, enc := range []Encoding{EncodingArray, EncodingMap} {
			out, err := Encode(b, enc)
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
