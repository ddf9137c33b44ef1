package replay

import (
	"bytes"
	"testing"
)

// FuzzParseTrace: any input either fails with an error naming a line or
// yields requests that satisfy every bound Run relies on.
func FuzzParseTrace(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}`))
	f.Add([]byte("{\"timestamp\": 1.5, \"input_length\": 1, \"output_length\": 0, \"hash_ids\": [4294967295]}\n\n{}"))
	f.Add([]byte(`{"timestamp": -1, "input_length": 10, "output_length": 1, "hash_ids": [1]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		reqs, err := ParseTrace(bytes.NewReader(data), 0)
		if err != nil {
			return
		}
		last := int64(-1)
		for _, r := range reqs {
			if r.InputLength < 1 || r.InputLength > MaxInputLength || r.OutputLength < 0 || r.Timestamp < last ||
				len(r.HashIDs) != (r.InputLength+TraceBlockSize-1)/TraceBlockSize {
				t.Fatalf("accepted out-of-bounds request %+v", r)
			}
			last = r.Timestamp
			if toks := Tokens(nil, r); len(toks) != r.InputLength {
				t.Fatalf("%d tokens for input_length %d", len(toks), r.InputLength)
			}
		}
	})
}
