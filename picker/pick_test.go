package picker

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

func TestArgmin(t *testing.T) {
	cases := []struct {
		name  string
		req   Request
		cands []Candidate
		cfg   func(*Config)
		want  int
	}{
		{
			name: "cache wins at equal load",
			req:  req16(10),
			cands: []Candidate{
				cand(0, depth(0), Load{}),
				cand(1, depth(10), Load{}),
				cand(2, depth(5), Load{}),
			},
			want: 1,
		},
		{
			name: "load beats cache",
			req:  req16(10),
			cands: []Candidate{
				cand(0, depth(10), Load{DecodeBlocks: 40}), // 0 + 50
				cand(1, depth(0), Load{DecodeBlocks: 10}),  // 10 + 20
			},
			want: 1,
		},
		{
			name: "queued prefill beats cache",
			req:  req16(10),
			cands: []Candidate{
				cand(0, depth(10), Load{PrefillTokens: 16 * 30}), // 30 + 10
				cand(1, depth(0), Load{}),                        // 10 + 10
			},
			want: 1,
		},
		{
			name: "device beats host beats disk",
			req:  req16(8),
			cands: []Candidate{
				cand(0, kvfleet.Depths{0, 0, 8, 8}, Load{}),
				cand(1, kvfleet.Depths{0, 8, 8, 8}, Load{}),
				cand(2, kvfleet.Depths{8, 8, 8, 8}, Load{}),
			},
			want: 2,
		},
		{
			name: "host beats disk",
			req:  req16(8),
			cands: []Candidate{
				cand(0, kvfleet.Depths{0, 0, 8, 8}, Load{}),
				cand(1, kvfleet.Depths{0, 8, 8, 8}, Load{}),
			},
			want: 1,
		},
		{
			name: "external tier earns nothing by default",
			req:  req16(8),
			cands: []Candidate{
				cand(0, kvfleet.Depths{0, 0, 0, 8}, Load{DecodeBlocks: 1}),
				cand(1, depth(0), Load{}),
			},
			want: 1,
		},
		{
			name: "prefill load scale 0 routes on decode load only",
			req:  req16(8),
			cands: []Candidate{
				cand(0, depth(8), Load{DecodeBlocks: 3}),
				cand(1, depth(8), Load{DecodeBlocks: 2, PrefillTokens: 1 << 20}),
			},
			cfg:  func(c *Config) { c.PrefillLoadScale = 0 },
			want: 1,
		},
		{
			name: "excluded cheapest is skipped",
			req:  req16(8),
			cands: []Candidate{
				func() Candidate { c := cand(0, depth(8), Load{}); c.Worker.Draining = true; return c }(),
				cand(1, depth(0), Load{DecodeBlocks: 50}),
				cand(2, depth(2), Load{DecodeBlocks: 50}),
			},
			want: 2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			// These cases are Dynamo's trade-offs, which the kvgate policy
			// shares except where term (d) deliberately holds affinity
			// ("load beats cache" is what it changes under load);
			// affinity_test.go covers (d).
			cfg.Kvgate.RecomputeWeight = 0
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			for _, policy := range []string{PolicyDynamo, PolicyKvgate} {
				cfg.Policy = policy
				d, err := Pick(tc.req, tc.cands, cfg, seeded(1))
				if err != nil {
					t.Fatal(err)
				}
				if d.Primary != tc.want {
					t.Errorf("%s: primary %d, want %d; terms %+v", policy, d.Primary, tc.want, d.Terms)
				}
			}
		})
	}
}

func TestTieBreakIsSeededAndCoversAllTied(t *testing.T) {
	cands := []Candidate{
		cand(0, depth(4), Load{}),
		cand(1, depth(4), Load{}),
		cand(2, depth(0), Load{}), // worse: less cached
		cand(3, depth(4), Load{}),
		cand(4, depth(4), Load{}),
	}
	cfg := DefaultConfig()
	cfg.Fallbacks = 0
	draw := func(seed uint64) []int {
		rnd := seeded(seed)
		var got []int
		for range 400 {
			d, err := Pick(req16(4), cands, cfg, rnd)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, d.Primary)
		}
		return got
	}
	a := draw(7)
	counts := map[int]int{}
	for _, p := range a {
		counts[p]++
	}
	if counts[2] != 0 {
		t.Errorf("worse candidate picked %d times", counts[2])
	}
	for _, i := range []int{0, 1, 3, 4} {
		// Uniform over 4 ties: expect 100 each; 40 is > 6 standard deviations away.
		if counts[i] < 40 {
			t.Errorf("tied candidate %d picked %d/400 times; counts %v", i, counts[i], counts)
		}
	}
	if b := draw(7); !slices.Equal(a, b) {
		t.Error("same seed gave a different sequence")
	}
	if c := draw(8); slices.Equal(a, c) {
		t.Error("different seeds gave the same 400 picks")
	}
	// Without randomness the first tied candidate wins, every time.
	d, _ := Pick(req16(4), cands, cfg, nil)
	if d.Primary != 0 {
		t.Errorf("nil rnd: primary %d, want 0", d.Primary)
	}
}

func TestEligibility(t *testing.T) {
	mk := func(mut func(*Candidate)) Candidate {
		c := cand(0, depth(0), Load{})
		mut(&c)
		return c
	}
	cases := []struct {
		name   string
		stage  Stage
		c      Candidate
		cfg    func(*Config)
		reason string
	}{
		{"healthy both/aggregated", StageAggregated, mk(func(*Candidate) {}), nil, ""},
		{"draining", StageAggregated, mk(func(c *Candidate) { c.Worker.Draining = true }), nil, ReasonDraining},
		// Alone, an unhealthy worker is 0 % healthy: without the panic
		// threshold it is excluded (TestHealthyPanic has it on).
		{"unhealthy", StageAggregated, mk(func(c *Candidate) { c.Worker.Unhealthy = true }),
			func(c *Config) { c.HealthyPanicThreshold = 0 }, ReasonUnhealthy},
		{"prefill worker cannot serve aggregated", StageAggregated, mk(func(c *Candidate) { c.Worker.Role = RolePrefill }), nil, ReasonRole},
		{"decode worker serves aggregated", StageAggregated, mk(func(c *Candidate) { c.Worker.Role = RoleDecode }), nil, ""},
		{"decode worker cannot prefill", StagePrefill, mk(func(c *Candidate) { c.Worker.Role = RoleDecode }), nil, ReasonRole},
		{"prefill worker prefills", StagePrefill, mk(func(c *Candidate) { c.Worker.Role = RolePrefill }), nil, ""},
		{"both prefills", StagePrefill, mk(func(*Candidate) {}), nil, ""},
		{"prefill worker cannot decode", StageDecode, mk(func(c *Candidate) { c.Worker.Role = RolePrefill }), nil, ReasonRole},
		{"in-flight bound", StageAggregated, mk(func(c *Candidate) { c.Load.InflightRequests = 4 }),
			func(c *Config) { c.MaxInflight = 4 }, ReasonInflightBound},
		{"engine in-flight counts toward the bound", StageAggregated,
			mk(func(c *Candidate) { c.Load.HaveEngine, c.Load.Waiting, c.Load.Running = true, 2, 2 }),
			func(c *Config) { c.MaxInflight = 4 }, ReasonInflightBound},
		{"under in-flight bound", StageAggregated, mk(func(c *Candidate) { c.Load.InflightRequests = 3 }),
			func(c *Config) { c.MaxInflight = 4 }, ""},
		{"queued prefill bound", StagePrefill, mk(func(c *Candidate) { c.Load.PrefillTokens = 100 }),
			func(c *Config) { c.MaxQueuedPrefillTokens = 100 }, ReasonPrefillTokBound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			req := req16(2)
			req.Stage = tc.stage
			d, err := Pick(req, []Candidate{tc.c}, cfg, nil)
			if tc.reason == "" {
				if err != nil || d.Primary != 0 || !d.Terms[0].Eligible {
					t.Fatalf("want eligible, got err %v, decision %+v", err, d)
				}
				return
			}
			if !errors.Is(err, ErrNoEligible) {
				t.Fatalf("err %v, want ErrNoEligible", err)
			}
			if d.Primary != -1 || d.Terms[0].Eligible || d.Terms[0].Reason != tc.reason {
				t.Errorf("decision %+v, want primary -1 and reason %q", d, tc.reason)
			}
		})
	}
}

func TestNoCandidates(t *testing.T) {
	if _, err := Pick(req16(1), nil, DefaultConfig(), nil); !errors.Is(err, ErrNoEligible) {
		t.Fatalf("err %v, want ErrNoEligible", err)
	}
}

func TestFallbacks(t *testing.T) {
	// Decode loads make costs distinct: 4 + load (4-block prompt, no cache).
	loads := []int64{30, 10, 50, 20, 40, 0}
	var cands []Candidate
	for i, l := range loads {
		cands = append(cands, cand(i, depth(0), Load{DecodeBlocks: l}))
	}
	cands[5].Worker.Unhealthy = true // the cheapest, but excluded

	cases := []struct {
		name      string
		fallbacks int
		mut       func([]Candidate)
		primary   int
		want      []int
	}{
		{"two", 2, nil, 1, []int{3, 0}},
		{"all the rest", 16, nil, 1, []int{3, 0, 4, 2}},
		{"none", 0, nil, 1, nil},
		{"same endpoint as primary is skipped", 2,
			func(c []Candidate) { c[3].Worker.Endpoint = c[1].Worker.Endpoint }, 1, []int{0, 4}},
		{"same endpoint as a fallback is skipped", 3,
			func(c []Candidate) { c[4].Worker.Endpoint = c[0].Worker.Endpoint }, 1, []int{3, 0, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := slices.Clone(cands)
			if tc.mut != nil {
				tc.mut(cs)
			}
			cfg := DefaultConfig()
			cfg.Fallbacks = tc.fallbacks
			d, err := Pick(req16(4), cs, cfg, seeded(3))
			if err != nil {
				t.Fatal(err)
			}
			if d.Primary != tc.primary || !slices.Equal(d.Fallbacks, tc.want) {
				t.Errorf("primary %d fallbacks %v, want %d %v", d.Primary, d.Fallbacks, tc.primary, tc.want)
			}
		})
	}
}

func TestFallbacksWithTemperature(t *testing.T) {
	// With sampling the primary varies; the fallbacks are still the cheapest
	// of the rest, in order, and never the primary.
	var cands []Candidate
	for i, l := range []int64{30, 10, 50, 20} {
		cands = append(cands, cand(i, depth(0), Load{DecodeBlocks: l}))
	}
	cfg := DefaultConfig()
	cfg.Temperature = 1
	cfg.Fallbacks = 3
	rnd := seeded(11)
	byCost := []int{1, 3, 0, 2}
	for range 200 {
		d, err := Pick(req16(4), cands, cfg, rnd)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.DeleteFunc(slices.Clone(byCost), func(i int) bool { return i == d.Primary })
		if !slices.Equal(d.Fallbacks, want) {
			t.Fatalf("primary %d fallbacks %v, want %v", d.Primary, d.Fallbacks, want)
		}
	}
}

func TestSoftmaxFavorsLowCost(t *testing.T) {
	// Costs 4+0, 4+10, 4+20, 4+40 (4-block prompt, decode loads).
	loads := []int64{0, 10, 20, 40}
	var cands []Candidate
	for i, l := range loads {
		cands = append(cands, cand(i, depth(0), Load{DecodeBlocks: l}))
	}
	const temp, draws = 0.5, 20000
	cfg := DefaultConfig()
	cfg.Temperature = temp
	rnd := seeded(5)
	counts := make([]int, len(cands))
	for range draws {
		d, err := Pick(req16(4), cands, cfg, rnd)
		if err != nil {
			t.Fatal(err)
		}
		counts[d.Primary]++
	}
	// Independent statement of Dynamo's softmax: weights exp(-(c-min)/((max-min)T)).
	sum, want := 0.0, make([]float64, len(loads))
	for i, l := range loads {
		want[i] = math.Exp(-float64(l) / (40 * temp))
		sum += want[i]
	}
	for i := range want {
		p := want[i] / sum
		got := float64(counts[i]) / draws
		sd := math.Sqrt(p * (1 - p) / draws)
		if math.Abs(got-p) > 5*sd {
			t.Errorf("candidate %d: frequency %.4f, want %.4f ± %.4f", i, got, p, 5*sd)
		}
		if i > 0 && counts[i] >= counts[i-1] {
			t.Errorf("cheaper candidate %d drawn %d times, not more than candidate %d's %d", i-1, counts[i-1], i, counts[i])
		}
	}
}

func TestSoftmaxEqualCostsUniform(t *testing.T) {
	cands := []Candidate{cand(0, depth(0), Load{}), cand(1, depth(0), Load{}), cand(2, depth(0), Load{})}
	cfg := DefaultConfig()
	cfg.Temperature = 2
	rnd := seeded(9)
	counts := make([]int, 3)
	for range 3000 {
		d, err := Pick(req16(4), cands, cfg, rnd)
		if err != nil {
			t.Fatal(err)
		}
		counts[d.Primary]++
	}
	for i, n := range counts {
		if n < 850 || n > 1150 { // 1000 ± 5.8 sd
			t.Errorf("candidate %d drawn %d/3000 times; counts %v", i, n, counts)
		}
	}
}

func TestInvalidInput(t *testing.T) {
	good := []Candidate{cand(0, depth(0), Load{})}
	reqs := []Request{
		{PromptTokens: 16, BlockSize: 0, Blocks: 0},
		{PromptTokens: -1, BlockSize: 16},
		{PromptTokens: 31, BlockSize: 16, Blocks: 2},
		{PromptTokens: 32, BlockSize: 16, Blocks: -1},
		{PromptTokens: 32, BlockSize: 16, Blocks: 2, ExpectedOutputTokens: -5},
		{Stage: 9, PromptTokens: 32, BlockSize: 16, Blocks: 2},
		{PromptTokens: MaxPromptTokens + 1, BlockSize: 16},
	}
	for _, r := range reqs {
		if _, err := Pick(r, good, DefaultConfig(), nil); err == nil || errors.Is(err, ErrNoEligible) {
			t.Errorf("request %+v: err %v, want a validation error", r, err)
		}
	}
	cfgs := []func(*Config){
		func(c *Config) { c.Policy = "random" },
		func(c *Config) { c.TierWeights[kvfleet.TierHost] = 1.5 },
		func(c *Config) { c.TierWeights[kvfleet.TierDisk] = math.NaN() },
		func(c *Config) { c.PrefillLoadScale = -1 },
		func(c *Config) { c.Temperature = math.Inf(1) },
		func(c *Config) { c.Fallbacks = MaxFallbacks + 1 },
		func(c *Config) { c.MaxInflight = -1 },
		func(c *Config) { c.Policy = PolicyKvgate; c.Kvgate.DefaultPrefillTokensPerSec = 0 },
		func(c *Config) { c.Policy = PolicyKvgate; c.Kvgate.HerdMinTied = 1 },
		func(c *Config) { c.Policy = PolicyKvgate; c.Kvgate.KVHeadroom = 0 },
	}
	for i, mut := range cfgs {
		cfg := DefaultConfig()
		mut(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("config %d: Validate accepted %+v", i, cfg)
		}
		if _, err := Pick(req16(1), good, cfg, nil); err == nil {
			t.Errorf("config %d: Pick accepted it", i)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
	kv := DefaultConfig()
	kv.Policy = PolicyKvgate
	if err := kv.Validate(); err != nil {
		t.Errorf("default kvgate config: %v", err)
	}
}

func TestPickIntoReusesDecision(t *testing.T) {
	cands := []Candidate{cand(0, depth(0), Load{DecodeBlocks: 9}), cand(1, depth(2), Load{}), cand(2, depth(0), Load{})}
	var d Decision
	if err := PickInto(&d, req16(2), cands, DefaultConfig(), nil); err != nil {
		t.Fatal(err)
	}
	if d.Primary != 1 || !slices.Equal(d.Fallbacks, []int{2, 0}) {
		t.Fatalf("first pick %+v", d)
	}
	// A second, smaller pick must not leak terms or fallbacks from the first.
	cands2 := []Candidate{cand(5, depth(0), Load{})}
	cands2[0].Worker.Draining = true
	err := PickInto(&d, req16(2), cands2, DefaultConfig(), nil)
	if !errors.Is(err, ErrNoEligible) || d.Primary != -1 || len(d.Fallbacks) != 0 || len(d.Terms) != 1 || d.Terms[0].Cost != 0 {
		t.Fatalf("second pick err %v decision %+v", err, d)
	}
}
