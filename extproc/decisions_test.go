package extproc

import (
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

// For many random decisions, the record's terms, read back from its JSON,
// add up to its cost exactly (in the order picker.TermList gives), every
// term is named, and the header's printed terms add up to its printed
// cost to within their rounding (issue 32: "cost=301.56 … prefill=30.56
// decode=31.00" did not).
func TestDecisionRecordTermsSumToCost(t *testing.T) {
	rnd := rand.New(rand.NewPCG(32, 5))
	names := make([]string, 0, picker.NumTerms)
	for _, term := range picker.TermList() {
		names = append(names, term.Name)
	}
	headerCand := regexp.MustCompile(`(\S+) cost=(-?[0-9.]+)((?: [a-z_]+=-?[0-9.]+)*) credit=`)
	headerTerm := regexp.MustCompile(` ([a-z_]+)=(-?[0-9.]+)`)
	eligible, printed := 0, 0
	for range 500 {
		blocks := rnd.IntN(40)
		req := picker.Request{PromptTokens: blocks*16 + rnd.IntN(16), BlockSize: 16, Blocks: blocks, ExpectedOutputTokens: rnd.IntN(900)}
		cfg := picker.DefaultConfig()
		if rnd.IntN(3) > 0 {
			cfg.Policy = picker.PolicyKvgate
		}
		cfg.ActiveRequestWeight = float64(rnd.IntN(3)) / 3
		cfg.TermsOff[picker.TermID(rnd.IntN(int(picker.NumTerms)))] = rnd.IntN(2) == 0
		var cands []picker.Candidate
		for i := range 1 + rnd.IntN(8) {
			id := kvfleet.WorkerID{Endpoint: "10.0.0." + strconv.Itoa(i+1) + ":8000"}
			d := kvfleet.Depths{rnd.IntN(blocks + 1)}
			for tier := 1; tier < int(kvfleet.NumTiers); tier++ {
				d[tier] = d[tier-1] + rnd.IntN(3)
			}
			cands = append(cands, picker.Candidate{
				Worker: picker.Worker{ID: id, Endpoint: id.Endpoint, Role: picker.RoleBoth, Draining: rnd.IntN(6) == 0},
				Depths: d,
				Load: picker.Load{InflightRequests: rnd.IntN(30), PrefillTokens: rnd.Int64N(20000), DecodeBlocks: rnd.Int64N(4000),
					PrefillTokensPerSec: float64(rnd.IntN(2)) * rnd.Float64() * 40000, KVCapacityBlocks: rnd.Int64N(2) * 3000},
			})
		}
		dec, err := picker.Pick(req, cands, cfg, nil)
		if err != nil {
			continue // all draining: no record is made
		}
		e := decisionEntry{Chosen: cands[dec.Primary].Worker.ID.String(), Blocks: blocks, Candidates: topCandidates(cands, dec, 4)}
		doc, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var back struct {
			Candidates []struct {
				Worker string             `json:"worker"`
				Cached map[string]int     `json:"cached_blocks"`
				Terms  map[string]float64 `json:"terms"`
				Cost   float64            `json:"cost"`
				Reason string             `json:"ineligible"`
			} `json:"candidates"`
		}
		if err := json.Unmarshal(doc, &back); err != nil {
			t.Fatal(err)
		}
		for _, c := range back.Candidates {
			if len(c.Cached) != int(kvfleet.NumTiers) || c.Cached["device"] > c.Cached["host"] {
				t.Fatalf("cached_blocks %v: want device, host, disk, external (cumulative)", c.Cached)
			}
			if c.Reason != "" {
				if c.Terms != nil {
					t.Fatalf("ineligible %s carries terms %v", c.Worker, c.Terms)
				}
				continue
			}
			eligible++
			if len(c.Terms) != len(names) {
				t.Fatalf("terms %v: want %v", c.Terms, names)
			}
			sum := 0.0
			for _, n := range names {
				sum += c.Terms[n]
			}
			if sum != c.Cost {
				t.Fatalf("%s: terms %v sum to %v, cost %v\n%s", c.Worker, c.Terms, sum, c.Cost, doc)
			}
		}
		for _, m := range headerCand.FindAllStringSubmatch(e.header(), -1) {
			cost, _ := strconv.ParseFloat(m[2], 64)
			sum, n := 0.0, 0
			for _, tm := range headerTerm.FindAllStringSubmatch(m[3], -1) {
				v, _ := strconv.ParseFloat(tm[2], 64)
				sum += v
				n++
			}
			if n > 0 {
				printed++
			}
			if n != 0 && n != len(names) {
				t.Fatalf("header candidate %q: %d terms, want %d", m[0], n, len(names))
			}
			// Each printed value is off by at most 0.005.
			if n > 0 && (sum-cost > 0.005*float64(n+1) || cost-sum > 0.005*float64(n+1)) {
				t.Fatalf("header candidate %q: terms sum to %.4f, cost %.2f", m[0], sum, cost)
			}
		}
	}
	if eligible < 1000 || printed < 1000 {
		t.Fatalf("only %d eligible candidates recorded, %d read from headers: the check saw too few", eligible, printed)
	}
}
