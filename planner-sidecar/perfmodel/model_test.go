package perfmodel

import (
	"math"
	"strings"
	"testing"
	"time"
)

// handProfile has numbers whose interpolations are easy to derive by hand.
func handProfile() Profile {
	return Profile{
		Prefill: []PrefillPoint{
			{InputTokens: 1000, Concurrency: 4, TTFTSeconds: 0.4, TokensPerSecond: 20000},
			{InputTokens: 1000, Concurrency: 1, TTFTSeconds: 0.1, TokensPerSecond: 10000},
			{InputTokens: 1000, Concurrency: 2, TTFTSeconds: 0.2, TokensPerSecond: 15000},
			{InputTokens: 3000, Concurrency: 1, TTFTSeconds: 0.3, TokensPerSecond: 12000},
			{InputTokens: 3000, Concurrency: 2, TTFTSeconds: 0.6, TokensPerSecond: 18000},
		},
		Decode: []DecodePoint{
			{ContextTokens: 1000, Batch: 1, ITLSeconds: 0.010, TokensPerSecond: 100},
			{ContextTokens: 1000, Batch: 8, ITLSeconds: 0.020, TokensPerSecond: 400},
			{ContextTokens: 1000, Batch: 32, ITLSeconds: 0.040, TokensPerSecond: 800},
		},
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestPrefillThroughput(t *testing.T) {
	m := mustNew(t, handProfile())
	cases := []struct {
		input float64
		ttft  time.Duration
		want  float64
	}{
		{1000, 200 * time.Millisecond, 15000}, // exactly on a point
		{1000, 300 * time.Millisecond, 17500}, // halfway between c=2 and c=4
		{1000, time.Second, 20000},            // past the heaviest point: its throughput
		{1000, 50 * time.Millisecond, 10000},  // target missed even at c=1: lightest point
		{3000, 450 * time.Millisecond, 15000}, // halfway between c=1 and c=2 at 3000
		{2000, 300 * time.Millisecond, 14750}, // (17500 + 12000) / 2
		{500, 300 * time.Millisecond, 17500},  // below the shortest length: clamped
		{9000, 600 * time.Millisecond, 18000}, // above the longest length: clamped
		{1500, 300 * time.Millisecond, 16125}, // 0.75·17500 + 0.25·12000
	}
	for _, c := range cases {
		if got := m.PrefillThroughput(c.input, c.ttft); !near(got, c.want) {
			t.Errorf("PrefillThroughput(%v, %s) = %v, want %v", c.input, c.ttft, got, c.want)
		}
	}
}

func TestDecodeThroughput(t *testing.T) {
	m := mustNew(t, handProfile())
	// ITL 30 ms is halfway between batch 8 (20 ms, 400/s) and 32 (40 ms, 800/s).
	if got := m.DecodeThroughput(1000, 30*time.Millisecond); !near(got, 600) {
		t.Errorf("got %v, want 600", got)
	}
	if got := m.DecodeThroughput(5000, 15*time.Millisecond); !near(got, 250) {
		t.Errorf("got %v, want 250", got)
	}
}

func TestExpectedLatencies(t *testing.T) {
	m := mustNew(t, handProfile())
	cases := []struct {
		thr  float64
		want time.Duration
	}{
		{5000, 100 * time.Millisecond},  // under the lightest point: unloaded TTFT
		{17500, 300 * time.Millisecond}, // the inverse of PrefillThroughput
		{25000, 600 * time.Millisecond}, // last segment's slope (0.2 s per 5000) extended
	}
	for _, c := range cases {
		if got := m.ExpectedTTFT(1000, c.thr); (got - c.want).Abs() > time.Microsecond {
			t.Errorf("ExpectedTTFT(1000, %v) = %s, want %s", c.thr, got, c.want)
		}
	}
	if got := m.ExpectedITL(1000, 600); (got - 30*time.Millisecond).Abs() > time.Microsecond {
		t.Errorf("ExpectedITL = %s, want 30ms", got)
	}
	// One point per length: latency grows in proportion past it.
	one := mustNew(t, Profile{
		Prefill: []PrefillPoint{{InputTokens: 100, Concurrency: 1, TTFTSeconds: 0.1, TokensPerSecond: 1000}},
		Decode:  []DecodePoint{{ContextTokens: 100, Batch: 1, ITLSeconds: 0.01, TokensPerSecond: 100}},
	})
	if got := one.ExpectedTTFT(100, 3000); (got - 300*time.Millisecond).Abs() > time.Microsecond {
		t.Errorf("single point ExpectedTTFT = %s, want 300ms", got)
	}
}

func TestReadProfileRejectsBadInput(t *testing.T) {
	cases := map[string]string{
		`{"prefill":[],"decode":[]}`: "prefill: at least one point",
		`{"prefill":[{"input_tokens":1,"concurrency":1,"ttft_seconds":0.1,"tokens_per_second":1}],"decode":[{"context_tokens":1,"batch":0,"itl_seconds":0.1,"tokens_per_second":1}]}`: "decode[0]",
		`{"prefill":[{"input_tokens":1,"concurrency":1,"ttft_seconds":-1,"tokens_per_second":1}],"decode":[{"context_tokens":1,"batch":1,"itl_seconds":0.1,"tokens_per_second":1}]}`:  "prefill[0]",
		`{"prefill":[], "extra":1}`: "unknown field",
		`[`:                         "profile:",
	}
	for in, want := range cases {
		_, err := ReadProfile(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want it to mention %q", in, err, want)
		}
	}
	p := handProfile()
	p.Prefill = append(p.Prefill, PrefillPoint{InputTokens: 1000, Concurrency: 2, TTFTSeconds: 1, TokensPerSecond: 1})
	if _, err := New(p); err == nil || !strings.Contains(err.Error(), "two points") {
		t.Errorf("duplicate point: err = %v", err)
	}
}

func TestProfileRoundTrip(t *testing.T) {
	var b strings.Builder
	if err := handProfile().Write(&b); err != nil {
		t.Fatal(err)
	}
	p, err := ReadProfile(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Prefill) != 5 || p.Prefill[0].TokensPerSecond != 20000 || len(p.Decode) != 3 {
		t.Fatalf("round trip lost data: %+v", p)
	}
}

func TestCorrection(t *testing.T) {
	c := NewCorrection(0.5, 0.5, 3)
	c.Observe(200*time.Millisecond, 100*time.Millisecond, 0, 10*time.Millisecond)
	// TTFT: 0.5·1 + 0.5·2 = 1.5; ITL unmeasured: stays 1.
	if !near(c.TTFT, 1.5) || c.ITL != 1 {
		t.Fatalf("got %+v", c)
	}
	for range 20 {
		c.Observe(10*time.Second, 100*time.Millisecond, time.Millisecond, 10*time.Millisecond)
	}
	if c.TTFT != 3 || c.ITL != 0.5 {
		t.Fatalf("clamps: got TTFT %v ITL %v, want 3 and 0.5", c.TTFT, c.ITL)
	}
	if got := Target(300*time.Millisecond, 1.5); got != 200*time.Millisecond {
		t.Fatalf("Target = %s", got)
	}
}

func FuzzReadProfile(f *testing.F) {
	var b strings.Builder
	_ = handProfile().Write(&b)
	f.Add(b.String())
	f.Add(`{"prefill":[{"input_tokens":1,"concurrency":1,"ttft_seconds":1e308,"tokens_per_second":1e-308}],"decode":[{"context_tokens":1,"batch":1,"itl_seconds":1,"tokens_per_second":1}]}`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ReadProfile(strings.NewReader(s))
		if err != nil {
			return
		}
		m, err := New(p)
		if err != nil {
			return
		}
		for _, x := range []float64{0, 1, 1e3, 1e9, math.NaN()} {
			if v := m.PrefillThroughput(x, time.Second); !(v > 0) {
				t.Fatalf("PrefillThroughput(%v) = %v, want > 0", x, v)
			}
			if v := m.DecodeThroughput(x, time.Millisecond); !(v > 0) {
				t.Fatalf("DecodeThroughput(%v) = %v, want > 0", x, v)
			}
			_ = m.ExpectedTTFT(x, x)
			_ = m.ExpectedITL(x, x)
		}
	})
}

func mustNew(t *testing.T, p Profile) *Model {
	t.Helper()
	m, err := New(p)
	if err != nil {
		t.Fatalf("fixture profile: %v", err)
	}
	return m
}
