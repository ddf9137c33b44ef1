package picker

import (
	"math"
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

func kvgateConfig(mut func(*KvgateConfig)) Config {
	cfg := DefaultConfig()
	cfg.Policy = PolicyKvgate
	if mut != nil {
		mut(&cfg.Kvgate)
	}
	return cfg
}

func allTermsOff(k *KvgateConfig) {
	k.ThroughputAware, k.AnticipateDecode, k.HerdWeight, k.RecomputeWeight = false, false, 0, 0
}

// With its three terms off, or with uniform measured rates and the other two
// off, the kvgate policy must compute Dynamo's costs bit for bit (so that
// the replay benchmark compares like with like).
func TestKvgateReducesToDynamo(t *testing.T) {
	rnd := seeded(21)
	for trial := range 300 {
		blocks := rnd.IntN(64)
		req := Request{PromptTokens: blocks*16 + rnd.IntN(16), BlockSize: 16, Blocks: blocks,
			ExpectedOutputTokens: rnd.IntN(2000), Stage: Stage(rnd.IntN(3))}
		uniform := rnd.Float64() * 50000
		var cands []Candidate
		for i := range 1 + rnd.IntN(12) {
			var d kvfleet.Depths
			v := 0
			for t := range kvfleet.NumTiers {
				v += rnd.IntN(blocks/2 + 1)
				d[t] = v
			}
			cands = append(cands, cand(i, d, Load{
				InflightRequests: rnd.IntN(20), PrefillTokens: rnd.Int64N(10000), DecodeBlocks: rnd.Int64N(5000),
				PrefillTokensPerSec: uniform, KVCapacityBlocks: rnd.Int64N(3) * 2000,
				HaveEngine: true, Waiting: rnd.IntN(9), Running: rnd.IntN(9), KVUsage: rnd.Float64(),
			}))
		}
		dyn := DefaultConfig()
		dyn.ActiveRequestWeight = float64(rnd.IntN(3)) / 2
		want, err := Pick(req, cands, dyn, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, mut := range []func(*KvgateConfig){
			allTermsOff,
			func(k *KvgateConfig) { allTermsOff(k); k.ThroughputAware = true },
		} {
			kv := kvgateConfig(mut)
			kv.ActiveRequestWeight = dyn.ActiveRequestWeight
			got, err := Pick(req, cands, kv, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range cands {
				if got.Terms[i].Cost != want.Terms[i].Cost {
					t.Fatalf("trial %d candidate %d: kvgate cost %v, dynamo %v", trial, i, got.Terms[i].Cost, want.Terms[i].Cost)
				}
			}
		}
	}
}

func TestKvgateThroughputAware(t *testing.T) {
	// Both workers have 640 queued tokens and nothing cached; B prefills at a
	// quarter of A's rate. Dynamo sees a tie; kvgate prefers A.
	cands := []Candidate{
		cand(0, depth(0), Load{PrefillTokens: 640, PrefillTokensPerSec: 10000}),
		cand(1, depth(0), Load{PrefillTokens: 640, PrefillTokensPerSec: 40000}),
	}
	cfg := kvgateConfig(func(k *KvgateConfig) { k.AnticipateDecode, k.HerdWeight, k.ThroughputAware = false, 0, true })
	d, err := Pick(req16(40), cands, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Primary != 1 {
		t.Fatalf("primary %d, want the faster worker 1; terms %+v", d.Primary, d.Terms)
	}
	// TTFT = (640 + 640) tokens / rate.
	for i, rate := range []float64{10000, 40000} {
		if want := 1280 / rate; math.Abs(d.Terms[i].TTFTSeconds-want) > 1e-12 {
			t.Errorf("candidate %d TTFT %v, want %v", i, d.Terms[i].TTFTSeconds, want)
		}
	}
	// Prefill cost at the mean rate 25000: 80 blocks × 25000/rate, + 40 decode.
	if want := 80*2.5 + 40; math.Abs(d.Terms[0].Cost-want) > 1e-9 {
		t.Errorf("slow worker cost %v, want %v", d.Terms[0].Cost, want)
	}
	if want := 80*0.625 + 40; math.Abs(d.Terms[1].Cost-want) > 1e-9 {
		t.Errorf("fast worker cost %v, want %v", d.Terms[1].Cost, want)
	}
	// Dynamo: exact tie.
	dd, _ := Pick(req16(40), cands, DefaultConfig(), nil)
	if dd.Terms[0].Cost != dd.Terms[1].Cost {
		t.Errorf("dynamo costs %v and %v, want a tie", dd.Terms[0].Cost, dd.Terms[1].Cost)
	}
}

func TestKvgateDecodeFootprint(t *testing.T) {
	noOther := func(k *KvgateConfig) { k.ThroughputAware, k.HerdWeight = true, 0 }
	cases := []struct {
		name       string
		req        Request
		cand       Candidate
		wantDecode float64
	}{
		{
			// 10 routed + (8 − 3 on device) + ceil(100/16)=7
			name: "output blocks and device dedup", req: Request{PromptTokens: 128, BlockSize: 16, Blocks: 8, ExpectedOutputTokens: 100},
			cand: cand(0, kvfleet.Depths{3, 5, 5, 5}, Load{DecodeBlocks: 10}), wantDecode: 22,
		},
		{
			// engine reports 0.5 × 1000 = 500 used > 10 routed; 500 + 8 + 0, under 900
			name: "engine usage when larger", req: req16(8),
			cand: cand(0, depth(0), Load{DecodeBlocks: 10, HaveEngine: true, KVUsage: 0.5, KVCapacityBlocks: 1000}), wantDecode: 508,
		},
		{
			// 895 + 8 + 7 = 910, 10 over 0.9×1000 → + 2×10
			name: "overflow beyond headroom", req: Request{PromptTokens: 128, BlockSize: 16, Blocks: 8, ExpectedOutputTokens: 112},
			cand: cand(0, depth(0), Load{DecodeBlocks: 895, KVCapacityBlocks: 1000}), wantDecode: 930,
		},
		{
			name: "engine usage ignored without capacity", req: req16(8),
			cand: cand(0, depth(0), Load{DecodeBlocks: 10, HaveEngine: true, KVUsage: 0.9}), wantDecode: 18,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Pick(tc.req, []Candidate{tc.cand}, kvgateConfig(noOther), nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.Terms[0].Parts[TermDecode] != tc.wantDecode {
				t.Errorf("decode term %v, want %v", d.Terms[0].Parts[TermDecode], tc.wantDecode)
			}
		})
	}

	// A worker near its KV capacity loses to one with room, though Dynamo
	// (which sees kvgate's smaller routed count) prefers it.
	cands := []Candidate{
		cand(0, depth(0), Load{DecodeBlocks: 100, HaveEngine: true, KVUsage: 0.97, KVCapacityBlocks: 1000}),
		cand(1, depth(0), Load{DecodeBlocks: 300, HaveEngine: true, KVUsage: 0.30, KVCapacityBlocks: 1000}),
	}
	if d, _ := Pick(req16(8), cands, DefaultConfig(), nil); d.Primary != 0 {
		t.Fatalf("dynamo primary %d, want 0 (fewer routed blocks)", d.Primary)
	}
	if d, _ := Pick(req16(8), cands, kvgateConfig(noOther), nil); d.Primary != 1 {
		t.Fatalf("kvgate primary %d, want 1 (room in KV); terms %+v", d.Primary, d.Terms)
	}
}

func TestKvgateAntiHerding(t *testing.T) {
	only := func(k *KvgateConfig) { k.ThroughputAware, k.AnticipateDecode = false, false }
	// Three workers tie on credit (4 blocks) and on kvgate's own load; the
	// engine says worker 0 is running 12 requests from other routers.
	cands := []Candidate{
		cand(0, depth(4), Load{HaveEngine: true, Running: 12}),
		cand(1, depth(4), Load{HaveEngine: true}),
		cand(2, depth(4), Load{HaveEngine: true}),
		cand(3, depth(0), Load{HaveEngine: true, Running: 30}), // not tied: less credit
	}
	d, err := Pick(req16(10), cands, kvgateConfig(only), nil)
	if err != nil {
		t.Fatal(err)
	}
	// mean in-flight of the tied three = 4; worker 0 is 2 over the mean:
	// 0.1 × 10 blocks × 2 = 2.
	want := []float64{2, 0, 0, 0}
	for i := range want {
		if d.Terms[i].Parts[TermHerd] != want[i] {
			t.Errorf("candidate %d herd penalty %v, want %v", i, d.Terms[i].Parts[TermHerd], want[i])
		}
	}
	if d.Primary == 0 {
		t.Error("herded worker 0 still chosen")
	}

	// Below HerdMinTied, or with the weight 0, no penalty.
	cfg := kvgateConfig(func(k *KvgateConfig) { only(k); k.HerdMinTied = 4 })
	if d, _ := Pick(req16(10), cands, cfg, nil); d.Terms[0].Parts[TermHerd] != 0 {
		t.Errorf("penalty %v with only 3 tied of min 4", d.Terms[0].Parts[TermHerd])
	}
	cfg = kvgateConfig(func(k *KvgateConfig) { only(k); k.HerdWeight = 0 })
	if d, _ := Pick(req16(10), cands, cfg, nil); d.Terms[0].Parts[TermHerd] != 0 {
		t.Errorf("penalty %v with weight 0", d.Terms[0].Parts[TermHerd])
	}
}
