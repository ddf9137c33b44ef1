package replay

import (
	"context"
	"math"
	"testing"
)

func TestReplayOnTestdataSlice(t *testing.T) {
	reqs, err := LoadTrace("testdata/conversation_head300.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), "slice", reqs, Options{Workers: 4, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Policies) != len(AllPolicies) || res.Requests != 300 || res.Workers != 4 {
		t.Fatalf("result covers %d policies, %d requests, %d workers", len(res.Policies), res.Requests, res.Workers)
	}
	if res.IdealHitRatio <= 0 || res.IdealHitRatio >= 1 {
		t.Fatalf("ideal hit ratio %v", res.IdealHitRatio)
	}
	for name, r := range res.Policies {
		if r.HitRatio < 0 || r.HitRatio > res.IdealHitRatio+1e-12 {
			t.Errorf("%s: hit ratio %v outside [0, ideal %v]", name, r.HitRatio, res.IdealHitRatio)
		}
		if !(r.TTFTP50Ms > 0 && r.TTFTP50Ms <= r.TTFTP90Ms && r.TTFTP90Ms <= r.TTFTP99Ms) {
			t.Errorf("%s: TTFT percentiles %v %v %v", name, r.TTFTP50Ms, r.TTFTP90Ms, r.TTFTP99Ms)
		}
		// The fastest possible first token is one prefill step of one token.
		if r.TTFTP50Ms < 16.5 || r.ITLP50Ms < 1 || r.E2EP90Ms < r.TTFTP50Ms {
			t.Errorf("%s: implausible latencies %+v", name, r)
		}
		if r.ThroughputRPS <= 0 || r.LoadImbalance < 1 || math.IsNaN(r.LoadImbalance) {
			t.Errorf("%s: throughput %v, imbalance %v", name, r.ThroughputRPS, r.LoadImbalance)
		}
		if len(r.TTFTsMs) != 300 {
			t.Errorf("%s: %d TTFTs recorded", name, len(r.TTFTsMs))
		}
	}
	if rr := res.Policies[PolicyRoundRobin]; rr.LoadImbalance != 1 {
		t.Errorf("round-robin over 300 requests and 4 workers: imbalance %v, want 1", rr.LoadImbalance)
	}
	for _, kv := range []string{PolicyDynamo, PolicyKvgate} {
		if res.Policies[kv].HitRatio < res.Policies[PolicyRoundRobin].HitRatio {
			t.Errorf("%s hit ratio %v below round-robin's %v", kv, res.Policies[kv].HitRatio, res.Policies[PolicyRoundRobin].HitRatio)
		}
	}
}

func TestReplayIsDeterministic(t *testing.T) {
	reqs, err := LoadTrace("testdata/conversation_head300.jsonl", 80)
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{Workers: 4, Policies: []string{PolicyRandom, PolicyKvgate}, Seed: 9}
	a, err := Run(context.Background(), "a", reqs, opt)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), "a", reqs, opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range opt.Policies {
		x, y := *a.Policies[p], *b.Policies[p]
		x.Elapsed, y.Elapsed = 0, 0
		if x.HitRatio != y.HitRatio || x.TTFTP99Ms != y.TTFTP99Ms || x.LoadImbalance != y.LoadImbalance {
			t.Errorf("%s: two runs differ: %+v vs %+v", p, x, y)
		}
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []Options{
		{Workers: -1},
		{Workers: MaxWorkers + 1},
		{Policies: []string{"nope"}},
		{Policies: []string{PolicyRandom, PolicyRandom}},
		{RateScale: math.NaN()},
		{BlockSize: -4},
		{GPUBlocks: -1},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	reqs := []TraceRequest{{InputLength: 5000, OutputLength: 10, HashIDs: make([]uint64, 10), Line: 1}}
	if _, err := Run(context.Background(), "x", reqs, Options{GPUBlocks: 4}); err == nil {
		t.Error("a request larger than an engine's cache was accepted")
	}
}
