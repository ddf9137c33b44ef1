package picker

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// FuzzPick feeds arbitrary requests, candidates and knobs to Pick and
// decidePD and checks the Decision's invariants: never a panic, the primary
// and fallbacks are eligible, distinct and in range, costs are finite.
func FuzzPick(f *testing.F) {
	f.Add([]byte("\x00\x10\x00\x40\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b"))
	f.Add(make([]byte, 200))
	f.Fuzz(func(t *testing.T, data []byte) {
		rd := fuzzReader{b: data}
		req := Request{
			Stage:                Stage(rd.u8() % 4),
			BlockSize:            int(rd.u16()),
			PromptTokens:         int(rd.u32() % (MaxPromptTokens + 2)),
			ExpectedOutputTokens: int(int32(rd.u32())),
		}
		if req.BlockSize > 0 {
			req.Blocks = req.PromptTokens / req.BlockSize
			if rd.u8()%8 == 0 {
				req.Blocks += int(int8(rd.u8()))
			}
		}
		cfg := DefaultConfig()
		if rd.u8()%2 == 1 {
			cfg.Policy = PolicyKvgate
		}
		cfg.Temperature = float64(rd.u8()%5) / 2
		cfg.Fallbacks = int(rd.u8() % 5)
		cfg.ActiveRequestWeight = float64(rd.u8() % 3)
		cfg.MaxInflight = int(rd.u8() % 4)
		var cands []Candidate
		for i := range int(rd.u8() % 12) {
			var d kvfleet.Depths
			for t := range kvfleet.NumTiers {
				d[t] = int(int16(rd.u16()))
			}
			c := cand(i%5, d, Load{
				InflightRequests:    int(int16(rd.u16())),
				PrefillTokens:       int64(rd.u64()),
				DecodeBlocks:        int64(rd.u64()),
				PrefillTokensPerSec: math.Float64frombits(rd.u64()),
				KVCapacityBlocks:    int64(int32(rd.u32())),
				HaveEngine:          rd.u8()%2 == 1,
				Waiting:             int(int16(rd.u16())),
				Running:             int(int16(rd.u16())),
				KVUsage:             math.Float64frombits(rd.u64()),
			})
			flags := rd.u8()
			c.Worker.Role = Role(flags % 4)
			c.Worker.Draining = flags&8 != 0
			c.Worker.Unhealthy = flags&16 != 0
			cands = append(cands, c)
		}

		d, err := Pick(req, cands, cfg, seeded(uint64(len(data))))
		checkDecision(t, d, err, cands, cfg.Fallbacks)

		pc := DefaultPDConfig()
		pc.Picker = cfg
		half := len(cands) / 2
		pd, err := decidePD(req, cands[:half], cands[half:], pc, seeded(1))
		if err == nil {
			if pd.Decode.Primary < 0 || pd.Decode.Primary >= len(cands)-half {
				t.Fatalf("P/D decode primary %d of %d", pd.Decode.Primary, len(cands)-half)
			}
			if pd.Disaggregate != (pd.Prefill.Primary >= 0) {
				t.Fatalf("P/D disaggregate %v with prefill primary %d", pd.Disaggregate, pd.Prefill.Primary)
			}
		}
	})
}

func checkDecision(t *testing.T, d Decision, err error, cands []Candidate, fallbacks int) {
	t.Helper()
	if err != nil {
		if d.Primary != -1 || len(d.Fallbacks) != 0 {
			t.Fatalf("error %v with decision %+v", err, d)
		}
		if errors.Is(err, ErrNoEligible) {
			for i, tm := range d.Terms {
				if tm.Eligible || tm.Reason == "" {
					t.Fatalf("ErrNoEligible but candidate %d: %+v", i, tm)
				}
			}
		}
		return
	}
	if len(d.Terms) != len(cands) || d.Primary < 0 || d.Primary >= len(cands) || !d.Terms[d.Primary].Eligible {
		t.Fatalf("bad primary %d of %d", d.Primary, len(cands))
	}
	if len(d.Fallbacks) > fallbacks {
		t.Fatalf("%d fallbacks, asked for %d", len(d.Fallbacks), fallbacks)
	}
	seen := map[int]bool{d.Primary: true}
	for k, i := range d.Fallbacks {
		if i < 0 || i >= len(cands) || seen[i] || !d.Terms[i].Eligible {
			t.Fatalf("bad fallback %d in %v (primary %d)", i, d.Fallbacks, d.Primary)
		}
		if k > 0 && d.Terms[i].Cost < d.Terms[d.Fallbacks[k-1]].Cost {
			t.Fatalf("fallbacks not in cost order: %v", d.Fallbacks)
		}
		seen[i] = true
	}
	for i, tm := range d.Terms {
		if tm.Eligible && (math.IsNaN(tm.Cost) || math.IsInf(tm.Cost, 0)) {
			t.Fatalf("candidate %d cost %v: %+v", i, tm.Cost, tm)
		}
	}
}

type fuzzReader struct{ b []byte }

func (r *fuzzReader) take(n int) []byte {
	out := make([]byte, n)
	copy(out, r.b)
	r.b = r.b[min(n, len(r.b)):]
	return out
}
func (r *fuzzReader) u8() uint8   { return r.take(1)[0] }
func (r *fuzzReader) u16() uint16 { return binary.LittleEndian.Uint16(r.take(2)) }
func (r *fuzzReader) u32() uint32 { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *fuzzReader) u64() uint64 { return binary.LittleEndian.Uint64(r.take(8)) }
