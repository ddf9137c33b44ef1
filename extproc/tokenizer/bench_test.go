package tokenizer

import (
	"context"
	"runtime"
	"testing"
)

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

// BenchmarkEncodeBounded is BenchmarkEncode's warm pass through
// EncodeBounded with the shipped request-path limits, against EncodeAppend
// in the same run: the cost of the limit and context checks.
func BenchmarkEncodeBounded(b *testing.B) {
	tok := loadModel(b, "qwen3")
	cases := readCases(b, "golden_qwen3.jsonl")
	bytes := 0
	for _, c := range cases {
		bytes += len(c.Text)
	}
	lim := Limits{MaxTokens: 1 << 20, MaxWordBytes: 256 << 10}
	ctx, cancel := context.WithCancel(context.Background()) // a cancellable context, as a request's
	defer cancel()
	dst := make([]uint32, 0, 1<<16)
	for _, bounded := range []bool{false, true} {
		name := "unbounded"
		if bounded {
			name = "bounded"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(bytes))
			for b.Loop() {
				for _, c := range cases {
					if bounded {
						dst, _ = tok.EncodeBounded(ctx, dst[:0], c.Text, EncodeOptions{Limits: lim})
					} else {
						dst = tok.EncodeAppend(dst[:0], c.Text)
					}
				}
			}
		})
	}
}

// BenchmarkGCWithTokenizer times a full collection while a loaded Qwen3
// tokenizer (its warm word cache included) is live: what every GC cycle of
// the extproc pays to mark the tokenizer's tables.
func BenchmarkGCWithTokenizer(b *testing.B) {
	tok := loadModel(b, "qwen3")
	for _, c := range readCases(b, "golden_qwen3.jsonl") {
		tok.Encode(c.Text)
	}
	runtime.GC()
	for b.Loop() {
		runtime.GC()
	}
	runtime.KeepAlive(tok)
}
