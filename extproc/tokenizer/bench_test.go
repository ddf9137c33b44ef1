package tokenizer

import "testing"

// BenchmarkEncode encodes the golden corpus per iteration and reports
// tokens/s: warm (word cache filled by earlier iterations) and cold (cache
// emptied before each pass). Run with -cpu 1 for the one-core figure.
func BenchmarkEncode(b *testing.B) {
	for _, m := range goldenModels {
		tok := loadModel(b, m)
		cases := readCases(b, "golden_"+m+".jsonl")
		tokens, bytes := 0, 0
		for _, c := range cases {
			tokens += len(c.IDs)
			bytes += len(c.Text)
		}
		for _, cold := range []bool{false, true} {
			name := m + "/warm"
			if cold {
				name = m + "/cold"
			}
			b.Run(name, func(b *testing.B) {
				b.SetBytes(int64(bytes))
				dst := make([]uint32, 0, 1<<16)
				b.ResetTimer()
				for b.Loop() {
					if cold {
						b.StopTimer()
						tok.ResetWordCache()
						b.StartTimer()
					}
					for _, c := range cases {
						dst = tok.EncodeAppend(dst[:0], c.Text)
					}
				}
				b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}
