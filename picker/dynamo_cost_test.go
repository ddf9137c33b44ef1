package picker

import (
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// Expected values are worked by hand from Dynamo's formula (dynamo_cost.go)
// with default weights device 1, host 0.75, disk 0.25, external 0.
func TestDynamoTerms(t *testing.T) {
	cases := []struct {
		name   string
		req    Request
		depths kvfleet.Depths
		load   Load
		cfg    func(*Config)
		want   Terms
	}{
		{
			name:   "device and host overlap",
			req:    req16(10),
			depths: kvfleet.Depths{4, 6, 6, 6},
			load:   Load{PrefillTokens: 32, DecodeBlocks: 20},
			// credit 4 + 0.75×2 = 5.5; raw (32+160)/16 = 12; 1×(12−5.5) + (20+10)
			want: Terms{Credit: 5.5, PrefillBlocks: 12, Parts: [NumTerms]float64{TermPrefill: 6.5, TermDecode: 30}, Cost: 36.5},
		},
		{
			name:   "disk and external overlap",
			req:    req16(10),
			depths: kvfleet.Depths{0, 0, 8, 10},
			load:   Load{DecodeBlocks: 5},
			// credit 0.25×8 + 0×2 = 2; raw 10; (10−2) + (5+10)
			want: Terms{Credit: 2, PrefillBlocks: 10, Parts: [NumTerms]float64{TermPrefill: 8, TermDecode: 15}, Cost: 23},
		},
		{
			name:   "depths beyond the prompt are clamped",
			req:    req16(10),
			depths: depth(50),
			want:   Terms{Credit: 10, PrefillBlocks: 10, Parts: [NumTerms]float64{TermDecode: 10}, Cost: 10},
		},
		{
			name:   "decreasing depths credit only the fastest tier",
			req:    req16(10),
			depths: kvfleet.Depths{8, 2, 2, 2},
			want:   Terms{Credit: 8, PrefillBlocks: 10, Parts: [NumTerms]float64{TermPrefill: 2, TermDecode: 10}, Cost: 12},
		},
		{
			name:   "partial trailing block is prefill work but not a block",
			req:    Request{PromptTokens: 40, BlockSize: 16, Blocks: 2},
			depths: depth(2),
			// raw 40/16 = 2.5; credit 2; 0.5 + 2
			want: Terms{Credit: 2, PrefillBlocks: 2.5, Parts: [NumTerms]float64{TermPrefill: 0.5, TermDecode: 2}, Cost: 2.5},
		},
		{
			name:   "prefill load scale and active request weight",
			req:    req16(4),
			depths: depth(1),
			load:   Load{InflightRequests: 3, PrefillTokens: 64, DecodeBlocks: 1},
			cfg:    func(c *Config) { c.PrefillLoadScale = 2; c.ActiveRequestWeight = 0.5 },
			// raw (64+64)/16 = 8; credit 1; 2×7 + (1+4) + 0.5×3
			want: Terms{Credit: 1, PrefillBlocks: 8, Parts: [NumTerms]float64{TermPrefill: 14, TermDecode: 5, TermRequests: 1.5}, Cost: 20.5},
		},
		{
			name:   "decode stage charges no prefill",
			req:    Request{Stage: StageDecode, PromptTokens: 160, BlockSize: 16, Blocks: 10},
			depths: depth(3),
			load:   Load{PrefillTokens: 999, DecodeBlocks: 7},
			want:   Terms{Credit: 3, Parts: [NumTerms]float64{TermDecode: 17}, Cost: 17},
		},
		{
			name: "negative load reads as zero",
			req:  req16(2),
			load: Load{PrefillTokens: -100, DecodeBlocks: -5, InflightRequests: -1},
			cfg:  func(c *Config) { c.ActiveRequestWeight = 1 },
			want: Terms{PrefillBlocks: 2, Parts: [NumTerms]float64{TermPrefill: 2, TermDecode: 2}, Cost: 4},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			d, err := Pick(tc.req, []Candidate{cand(1, tc.depths, tc.load)}, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			want.Eligible = true
			if d.Terms[0] != want {
				t.Errorf("terms\n got %+v\nwant %+v", d.Terms[0], want)
			}
		})
	}
}
