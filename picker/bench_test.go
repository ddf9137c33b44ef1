package picker

import (
	"fmt"
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

func benchCandidates(n int) []Candidate {
	rnd := seeded(uint64(n))
	cands := make([]Candidate, n)
	for i := range cands {
		d := rnd.IntN(64)
		cands[i] = cand(i, kvfleet.Depths{d, d + rnd.IntN(8), d + 8, d + 8}, Load{
			InflightRequests: rnd.IntN(32), PrefillTokens: rnd.Int64N(20000), DecodeBlocks: rnd.Int64N(4000),
			PrefillTokensPerSec: 20000 + float64(rnd.IntN(20000)), KVCapacityBlocks: 16384,
			HaveEngine: true, Running: rnd.IntN(32), KVUsage: rnd.Float64(),
		})
	}
	return cands
}

func BenchmarkPick(b *testing.B) {
	req := Request{PromptTokens: 4096 + 7, BlockSize: 64, Blocks: 64, ExpectedOutputTokens: 256}
	for _, policy := range []string{PolicyDynamo, PolicyKvgate} {
		for _, temp := range []float64{0, 0.5} {
			for _, n := range []int{8, 64, 512} {
				cands := benchCandidates(n)
				cfg := DefaultConfig()
				cfg.Policy, cfg.Temperature = policy, temp
				b.Run(fmt.Sprintf("%s/T=%g/n=%d/into", policy, temp, n), func(b *testing.B) {
					rnd := seeded(1)
					var d Decision
					b.ReportAllocs()
					for b.Loop() {
						if err := PickInto(&d, req, cands, cfg, rnd); err != nil {
							b.Fatal(err)
						}
					}
				})
				if temp == 0 {
					b.Run(fmt.Sprintf("%s/T=%g/n=%d/fresh", policy, temp, n), func(b *testing.B) {
						rnd := seeded(1)
						b.ReportAllocs()
						for b.Loop() {
							if _, err := Pick(req, cands, cfg, rnd); err != nil {
								b.Fatal(err)
							}
						}
					})
				}
			}
		}
	}
}
