package kvevents

import (
	"testing"
)

// benchBatch is a realistic scheduler step: 64 single-block stores of 16
// tokens chained onto a parent, on GPU, the shape vLLM publishes most.
func benchBatch() Batch {
	b := Batch{TS: 1733011200.5, DPRank: 0, HasDPRank: true}
	for i := 0; i < 64; i++ {
		toks := make([]uint32, 16)
		for j := range toks {
			toks[j] = uint32(100000 + 16*i + j)
		}
		b.Events = append(b.Events, Event{Kind: BlockStored, BlockHashes: []uint64{uint64(i+1) * 0x9e3779b97f4a7c15},
			ParentHash: uint64(i) * 0x9e3779b97f4a7c15, HasParent: i > 0, TokenIDs: toks, BlockSize: 16, Medium: "GPU"})
	}
	return b
}

func BenchmarkDecode(b *testing.B) {
	for _, tc := range []struct {
		name string
		enc  Encoding
	}{{"array", EncodingArray}, {"map", EncodingMap}} {
		b.Run(tc.name, func(b *testing.B) {
			batch := benchBatch()
			payload, err := Encode(batch, tc.enc)
			if err != nil {
				b.Fatal(err)
			}
			dec := NewDecoder(Limits{})
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := dec.Decode(payload); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*float64(len(batch.Events))/b.Elapsed().Seconds(), "events/s")
		})
	}
}
