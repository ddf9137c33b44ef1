package picker

import (
	"math"
	"testing"
)

// Crafted overload cases for term (d). The request is 40 blocks of 16
// tokens; worker 0 (the holder) caches 38 of them; worker 1 caches nothing.
// Decode footprints are equal, so only prefill and the recompute penalty
// differ.
func affinityConfig(rw, wait float64) Config {
	return kvgateConfig(func(k *KvgateConfig) {
		allTermsOff(k)
		k.RecomputeWeight, k.HolderMaxWaitSeconds = rw, wait
	})
}

func holderAndIdle(holderQueue int64) []Candidate {
	return []Candidate{
		cand(0, depth(38), Load{PrefillTokens: holderQueue, DecodeBlocks: 500, InflightRequests: 6}),
		cand(1, depth(0), Load{DecodeBlocks: 500, InflightRequests: 6}),
	}
}

func TestHolderBusyRecomputeCostlierStays(t *testing.T) {
	// The holder has 50 blocks queued: its prefill is 50 + 40 − 38 = 52
	// blocks against 40 on the idle worker. Dynamo moves the request and
	// recomputes 38 blocks; kvgate charges the idle worker 8 × 38 for that
	// recompute and waits for the holder.
	cands := holderAndIdle(50 * 16)
	d, err := Pick(req16(40), cands, DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Primary != 1 {
		t.Fatalf("dynamo chose %d (terms %+v); the case assumes it moves", d.Primary, d.Terms)
	}
	k, err := Pick(req16(40), cands, affinityConfig(8, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if k.Primary != 0 {
		t.Fatalf("kvgate chose %d, want the holder 0 (terms %+v)", k.Primary, k.Terms)
	}
	if got, want := k.Terms[1].Parts[TermRecompute], 8.0*38; got != want || k.Terms[0].Parts[TermRecompute] != 0 {
		t.Errorf("recompute penalties %v and %v, want 0 and %v", k.Terms[0].Parts[TermRecompute], got, want)
	}
}

func TestHolderQueueBeyondRecomputeCostMoves(t *testing.T) {
	// 400 queued blocks on the holder: waiting costs more than the 38
	// blocks recomputed with an 8× margin (304), so the request moves.
	k, err := Pick(req16(40), holderAndIdle(400*16), affinityConfig(8, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if k.Primary != 1 {
		t.Fatalf("kvgate chose %d, want the idle worker 1 (terms %+v)", k.Primary, k.Terms)
	}
	// Just under the margin it stays: 341 queued blocks → 343 vs 40 + 304.
	k, _ = Pick(req16(40), holderAndIdle(341*16), affinityConfig(8, 0), nil)
	if k.Primary != 0 {
		t.Fatalf("at 341 queued blocks kvgate chose %d, want the holder", k.Primary)
	}
}

func TestHolderWaitIsBounded(t *testing.T) {
	// The holder's predicted TTFT is (50 + 40 − 38) blocks × 16 tokens at
	// the default 20,000 tokens/s ≈ 42 ms. A 10 ms bound drops the term and
	// the request moves as under Dynamo; a 1 s bound keeps it.
	if k, _ := Pick(req16(40), holderAndIdle(50*16), affinityConfig(8, 0.01), nil); k.Primary != 1 {
		t.Errorf("10 ms bound: chose %d, want 1", k.Primary)
	}
	if k, _ := Pick(req16(40), holderAndIdle(50*16), affinityConfig(8, 1), nil); k.Primary != 0 {
		t.Errorf("1 s bound: chose %d, want 0", k.Primary)
	}
}

func TestHotPrefixHeldByManySpreadsByLoad(t *testing.T) {
	// Two workers hold the whole prefix: neither pays a penalty, and the
	// less loaded one wins; the worker without it pays for the recompute.
	cands := []Candidate{
		cand(0, depth(38), Load{PrefillTokens: 50 * 16, DecodeBlocks: 500}),
		cand(1, depth(38), Load{DecodeBlocks: 500}),
		cand(2, depth(0), Load{DecodeBlocks: 400}),
	}
	k, err := Pick(req16(40), cands, affinityConfig(8, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if k.Primary != 1 || k.Terms[0].Parts[TermRecompute] != 0 || k.Terms[1].Parts[TermRecompute] != 0 || k.Terms[2].Parts[TermRecompute] != 8*38 {
		t.Errorf("chose %d with terms %+v", k.Primary, k.Terms)
	}
}

func TestRecomputePenaltyIgnoresDecodeStage(t *testing.T) {
	r := req16(40)
	r.Stage = StageDecode
	k, err := Pick(r, holderAndIdle(50*16), affinityConfig(8, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, tm := range k.Terms {
		if tm.Parts[TermRecompute] != 0 {
			t.Errorf("decode stage: candidate %d penalty %v", i, tm.Parts[TermRecompute])
		}
	}
}

func TestUnmeasuredWorkerTakesTheFleetMedianRate(t *testing.T) {
	// Fresh start: worker 0 served the first request of a shared prefix,
	// so it caches 30 of 40 blocks and has a measured rate, which TTFB
	// makes look slow (2,000 tokens/s). Worker 1 has no measurement. With
	// the 20,000 default standing in for it, throughput-aware prefill
	// costs worker 0's 10 uncached blocks 10 × 11,000/2,000 = 55 and
	// worker 1's 40 only 40 × 11,000/20,000 = 22: the second request left
	// the holder. Judged at the fleet's median rate, both run at 2,000 and
	// the holder wins.
	cands := []Candidate{
		cand(0, depth(30), Load{PrefillTokensPerSec: 2000}),
		cand(1, depth(0), Load{}),
	}
	cfg := kvgateConfig(func(k *KvgateConfig) { allTermsOff(k); k.ThroughputAware = true })
	d, err := Pick(req16(40), cands, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Primary != 0 {
		t.Fatalf("chose %d, want the holder (terms %+v)", d.Primary, d.Terms)
	}
	if got, want := d.Terms[1].TTFTSeconds, 40.0*16/2000; math.Abs(got-want) > 1e-12 {
		t.Errorf("unmeasured worker's predicted TTFT %v, want %v (at the median rate)", got, want)
	}

	// The median of an odd count is the middle rate; of an even count the
	// mean of the middle two; with none measured the default applies.
	for _, c := range []struct {
		rates []float64
		want  float64
	}{{[]float64{50000, 1000, 3000}, 3000}, {[]float64{1000, 3000}, 2000}, {nil, 20000}} {
		var cs []Candidate
		for i, r := range c.rates {
			cs = append(cs, cand(i, depth(0), Load{PrefillTokensPerSec: r}))
		}
		cs = append(cs, cand(len(cs), depth(0), Load{}))
		d, err := Pick(req16(40), cs, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Terms[len(cs)-1].TTFTSeconds; math.Abs(got-40*16/c.want) > 1e-12 {
			t.Errorf("measured %v: unmeasured TTFT %v, want at %v tokens/s", c.rates, got, c.want)
		}
	}
}

func TestRecomputeConfigValidation(t *testing.T) {
	for _, mut := range []func(*KvgateConfig){
		func(k *KvgateConfig) { k.RecomputeWeight = -1 },
		func(k *KvgateConfig) { k.RecomputeWeight = math.NaN() },
		func(k *KvgateConfig) { k.HolderMaxWaitSeconds = -0.5 },
	} {
		if err := kvgateConfig(mut).Validate(); err == nil {
			t.Error("bad recompute knobs accepted")
		}
	}
}
