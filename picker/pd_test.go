package picker

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func pdPools(prefillLoads, decodeLoads []Load, decodeDepth int) (prefill, decode []Candidate) {
	for i, l := range prefillLoads {
		c := cand(i, depth(0), l)
		c.Worker.Role = RolePrefill
		prefill = append(prefill, c)
	}
	for i, l := range decodeLoads {
		c := cand(100+i, depth(decodeDepth), l)
		c.Worker.Role = RoleDecode
		decode = append(decode, c)
	}
	return prefill, decode
}

func TestDecidePD(t *testing.T) {
	// Default config: threshold 1024 uncached tokens, prefill bounds 8
	// requests / 65536 tokens, 128 KiB per token at 10 GB/s (1 s per ~76k
	// tokens), 20000 tokens/s where unmeasured.
	busyDecode := Load{PrefillTokens: 40000} // 2 s of queued prefill
	idle := Load{}
	cases := []struct {
		name        string
		req         Request
		prefill     []Load
		decode      []Load
		decodeDepth int
		want        bool
		reason      string
	}{
		{
			name: "small prompt stays aggregated", req: req16(32), // 512 tokens
			prefill: []Load{idle}, decode: []Load{busyDecode}, want: false, reason: "below threshold",
		},
		{
			name: "long uncached prompt, idle prefill pool, backlogged decode → split", req: req16(512), // 8192 tokens
			prefill: []Load{idle, idle}, decode: []Load{busyDecode}, want: true, reason: "disaggregated",
		},
		{
			name: "saturated prefill pool stays aggregated", req: req16(512),
			prefill: []Load{{InflightRequests: 8}, {PrefillTokens: 70000}},
			decode:  []Load{busyDecode}, want: false, reason: "no prefill worker",
		},
		{
			name: "cached prompt stays aggregated", req: req16(512),
			prefill: []Load{idle}, decode: []Load{busyDecode}, decodeDepth: 500, want: false, reason: "below threshold",
		},
		{
			// Idle decode: local prefill takes as long as remote, so the
			// transfer can only lose.
			name: "idle decode worker: transfer not worth it", req: req16(512),
			prefill: []Load{idle}, decode: []Load{idle}, want: false, reason: "not below TTFT gain",
		},
		{
			name: "no prefill pool at all stays aggregated", req: req16(512),
			decode: []Load{busyDecode}, want: false, reason: "no prefill worker",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pre, dec := pdPools(tc.prefill, tc.decode, tc.decodeDepth)
			got, err := decidePD(tc.req, pre, dec, DefaultPDConfig(), seeded(2))
			if err != nil {
				t.Fatal(err)
			}
			if got.Disaggregate != tc.want || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("disaggregate %v (%s), want %v (%q)", got.Disaggregate, got.Reason, tc.want, tc.reason)
			}
			if got.Decode.Primary < 0 || got.Decode.Primary >= len(dec) {
				t.Fatalf("decode primary %d out of range", got.Decode.Primary)
			}
			if tc.want && (got.Prefill.Primary < 0 || got.Prefill.Primary >= len(pre)) {
				t.Fatalf("prefill primary %d out of range", got.Prefill.Primary)
			}
			if !tc.want && got.Prefill.Primary != -1 {
				t.Fatalf("aggregated decision names prefill worker %d", got.Prefill.Primary)
			}
		})
	}
}

func TestDecidePDEstimates(t *testing.T) {
	// 8192-token prompt, decode worker backlogged by 40000 tokens at 20000
	// tokens/s, prefill worker idle at 40000 tokens/s.
	pre, dec := pdPools([]Load{{PrefillTokensPerSec: 40000}}, []Load{{PrefillTokens: 40000}}, 0)
	got, err := decidePD(req16(512), pre, dec, DefaultPDConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// gain = (40000+8192)/20000 − 8192/40000 = 2.4096 − 0.2048
	if want := 2.4096 - 0.2048; abs(got.GainSeconds-want) > 1e-9 {
		t.Errorf("gain %v, want %v", got.GainSeconds, want)
	}
	// transfer = 8192 × 131072 / 1e10
	if want := 8192.0 * 131072 / 1e10; abs(got.TransferSeconds-want) > 1e-12 {
		t.Errorf("transfer %v, want %v", got.TransferSeconds, want)
	}
	if got.UncachedTokens != 8192 || !got.Disaggregate {
		t.Errorf("decision %+v", got)
	}
}

func TestDecidePDErrors(t *testing.T) {
	pre, dec := pdPools([]Load{{}}, []Load{{}}, 0)
	dec[0].Worker.Unhealthy = true
	strict := DefaultPDConfig()
	strict.Picker.HealthyPanicThreshold = 0 // else the lone unhealthy decode worker is chosen in panic
	if _, err := decidePD(req16(512), pre, dec, strict, nil); !errors.Is(err, ErrNoEligible) {
		t.Errorf("no decode worker: err %v, want ErrNoEligible", err)
	}
	bad := DefaultPDConfig()
	bad.TransferBytesPerSec = 0
	if _, err := decidePD(req16(512), pre, dec, bad, nil); err == nil {
		t.Error("zero bandwidth accepted")
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// decidePD checks cfg and decides: the one-call form the tests use.
func decidePD(req Request, prefill, decode []Candidate, cfg PDConfig, rnd *rand.Rand) (PDDecision, error) {
	k, err := cfg.Check()
	if err != nil {
		return PDDecision{Prefill: Decision{Primary: -1}}, err
	}
	return k.Decide(req, prefill, decode, rnd)
}

// Check refuses an invalid P/D configuration, and the zero CheckedPD
// refuses to decide.
func TestCheckedPDRefuses(t *testing.T) {
	cfg := DefaultPDConfig()
	cfg.MaxPrefillInflight = 0
	if _, err := cfg.Check(); err == nil {
		t.Error("Check accepted max prefill in-flight 0")
	}
	cfg = DefaultPDConfig()
	cfg.Picker.Temperature = -1
	if _, err := cfg.Check(); err == nil {
		t.Error("Check accepted a picker temperature of -1")
	}
	var zero CheckedPD
	if _, err := zero.Decide(req16(200), []Candidate{cand(1, depth(0), Load{})}, []Candidate{cand(2, depth(0), Load{})}, nil); err == nil {
		t.Error("the zero CheckedPD decided")
	}
}
