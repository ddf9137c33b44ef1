package enginemetrics

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParseLargePage: a vLLM page with 40 histograms × 2 engines × 30
// buckets around the wanted families, about the size of a real one.
func BenchmarkParseLargePage(b *testing.B) {
	var sb strings.Builder
	for h := range 40 {
		fmt.Fprintf(&sb, "# HELP vllm:hist_%d Some histogram.\n# TYPE vllm:hist_%d histogram\n", h, h)
		for e := range 2 {
			for k := range 30 {
				fmt.Fprintf(&sb, "vllm:hist_%d_bucket{engine=\"%d\",le=\"%d.0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} %d.0\n", h, e, k, k*7)
			}
		}
	}
	body := []byte(sb.String() + vllmDP2Page)
	sel := selector{model: "meta-llama/Llama-3.1-8B-Instruct", rank: 1, byRank: true}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		pg, err := parse(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pg.sample(sel); err != nil {
			b.Fatal(err)
		}
	}
}
