package picker

import (
	"fmt"
	"math"
)

// A candidate's cost is the sum of the terms listed here, in this order:
// each term fills its column (Terms.Parts[id], in KV blocks, weight
// applied) for every eligible candidate, and the column is added to the
// candidate's Cost as it is set. A later term may read the cost so far
// (the recompute term breaks the holder's ties by it), so the order is
// part of the cost; it is the order the costs were summed in before the
// list existed, so that a replay decides bit for bit as it did
// (testdata/picks.golden pins it).
//
// Two kinds of term, by what they read. A row term (prefill, decode,
// requests) reads its own candidate only, so the row terms are computed
// together in the one pass over the workers that also sets the inputs
// they read (Credit, PrefillBlocks, TTFTSeconds): one pass for the three,
// and each candidate's cost is still summed in the list's order. A cross
// term (herd: the best credit in the fleet; recompute: the best-cached
// holder and the cost so far) compares candidates and makes its own
// passes after the row terms. Row terms come first in the list
// (TestTermTable checks it).
//
// Adding a term: its file in picker/ (a row term's value function, or a
// cross term's apply function, and its doc), its test, and here one
// TermID constant, one entry in termTable, and its call in applyTerms.
// The YAML switch (extproc.picker.terms.<name>), the decision record's
// column and kvgate-lab replay's --term flag read this table.

// TermID names one listed term: the index of its column in Terms.Parts.
type TermID uint8

const (
	TermPrefill TermID = iota
	TermDecode
	TermRequests
	TermHerd
	TermRecompute
	// NumTerms is the number of listed terms.
	NumTerms
)

// Term describes one listed term.
type Term struct {
	ID   TermID
	Name string // YAML key under extproc.picker.terms, decision-record column, replay --term name
	// Computes says what the column holds, for the README and --help.
	Computes string
	// KvgateOnly: the term is part of the kvgate policy only; under
	// dynamo its column stays 0.
	KvgateOnly bool
	// FixedWeight: the term has no weight of its own (Dynamo counts
	// decode blocks once); its weight is always 1.
	FixedWeight bool

	weight func(*Config) *float64 // nil with FixedWeight
	row    bool                   // reads its own candidate only (see above)
}

// termInputs is what the terms read and write: the request, the
// candidates, their terms (eligibility, the shared inputs Credit,
// PrefillBlocks and TTFTSeconds, the cost so far) and the fleet's prefill
// rates.
type termInputs struct {
	req   *Request
	cands []Candidate
	terms []Terms
	cfg   *Config
	fleet *fleetView
	// bestCredit is the highest Credit among the eligible candidates, from
	// the row pass (the herd term's tie group is measured from it).
	bestCredit float64
}

// set writes candidate i's column of term id and adds it to the
// candidate's cost at once: terms are applied in the list's order, so
// each candidate's cost is still summed in that order. A term that reads
// the cost so far (recompute) reads it before it sets anything, so it
// sees the earlier terms' sum only.
func (in *termInputs) set(i int, id TermID, v float64) {
	t := &in.terms[i]
	t.Parts[id] = v
	t.Cost += v
}

// termTable is the list. Entries are indexed by their ID.
var termTable = [NumTerms]Term{
	TermPrefill: {
		ID: TermPrefill, Name: "prefill", row: true, weight: func(c *Config) *float64 { return &c.PrefillLoadScale },
		Computes: "prefill_load_scale × the prompt blocks not credited from cache plus the worker's queued prefill (kvgate, throughput_aware: × fleet mean rate / worker rate)",
	},
	TermDecode: {
		ID: TermDecode, Name: "decode", FixedWeight: true, row: true,
		Computes: "the KV blocks the worker would hold: its decode blocks plus this prompt's (kvgate: the expected footprint, with a charge past KV headroom)",
	},
	TermRequests: {
		ID: TermRequests, Name: "requests", row: true, weight: func(c *Config) *float64 { return &c.ActiveRequestWeight },
		Computes: "decode_active_request_weight × the worker's in-flight requests",
	},
	TermHerd: {
		ID: TermHerd, Name: "herd", KvgateOnly: true, weight: func(c *Config) *float64 { return &c.Kvgate.HerdWeight },
		Computes: "anti-herding: among workers tied on cache credit, weight × prompt blocks × the worker's excess in-flight share",
	},
	TermRecompute: {
		ID: TermRecompute, Name: "recompute", KvgateOnly: true, weight: func(c *Config) *float64 { return &c.Kvgate.RecomputeWeight },
		Computes: "affinity under load: prefill_load_scale × weight × the prompt blocks this worker would compute that the best-cached worker would load",
	},
}

// TermList is the listed terms, in the order they are summed.
func TermList() []Term { return termTable[:] }

// LookupTerm finds a term by name.
func LookupTerm(name string) (TermID, bool) {
	for _, t := range termTable {
		if t.Name == name {
			return t.ID, true
		}
	}
	return 0, false
}

// String is the term's name.
func (id TermID) String() string {
	if id < NumTerms {
		return termTable[id].Name
	}
	return fmt.Sprintf("term%d", uint8(id))
}

// MaxTermWeight bounds every term's weight (the config's range checks).
const MaxTermWeight = 1e6

// CheckTermWeight reports whether w is a valid weight for term id.
func CheckTermWeight(id TermID, w float64) error {
	switch {
	case id >= NumTerms:
		return fmt.Errorf("unknown term %d", id)
	case termTable[id].FixedWeight && w != 1:
		return fmt.Errorf("term %s has a fixed weight of 1, got %v", id, w)
	case math.IsNaN(w) || w < 0 || w > MaxTermWeight:
		return fmt.Errorf("term %s weight %v outside [0, %g]", id, w, float64(MaxTermWeight))
	}
	return nil
}

// TermWeight is term id's weight in c (1 for a fixed-weight term).
func (c *Config) TermWeight(id TermID) float64 {
	if w := termTable[id].weight; w != nil {
		return *w(c)
	}
	return 1
}

// SetTermWeight sets term id's weight in c; Validate checks its range.
func (c *Config) SetTermWeight(id TermID, w float64) error {
	if err := CheckTermWeight(id, w); err != nil {
		return err
	}
	if f := termTable[id].weight; f != nil {
		*f(c) = w
	}
	return nil
}

// TermEnabled reports whether term id is computed under c's policy.
func (c *Config) TermEnabled(id TermID) bool {
	return !c.TermsOff[id] && (c.Policy == PolicyKvgate || !termTable[id].KvgateOnly)
}

// applyTerms fills every enabled term's column for the eligible
// candidates, in the list's order, and adds each into Cost (set): first
// one pass over the candidates that sets each one's inputs and its row
// terms' columns, then each cross term's own passes. Static calls, not
// functions in the table: the inputs stay on the stack, so that PickInto
// stays allocation-free.
func applyTerms(in *termInputs) {
	prefill, decode, requests := newPrefillTerm(in), newDecodeTerm(in), newRequestsTerm(in)
	in.bestCredit = -1
	for i := range in.cands {
		t := &in.terms[i]
		if !t.Eligible {
			continue
		}
		c := &in.cands[i]
		device := fillInputs(in.req, c, in.cfg, in.fleet, t)
		if t.Credit > in.bestCredit {
			in.bestCredit = t.Credit
		}
		if prefill.on {
			in.set(i, TermPrefill, prefill.of(in, i))
		}
		if decode.on {
			in.set(i, TermDecode, decode.of(c, device))
		}
		if requests.on {
			in.set(i, TermRequests, requests.of(c))
		}
	}
	if in.cfg.TermEnabled(TermHerd) {
		applyHerd(in)
	}
	if in.cfg.TermEnabled(TermRecompute) {
		applyRecompute(in)
	}
}

// fillInputs sets the inputs every term may read on an eligible
// candidate's Terms: the tier-weighted credit, Dynamo's raw prefill
// blocks, and (kvgate policy) the predicted TTFT: the worker first drains
// its queued prefill, then computes the part of this prompt it cannot
// load from cache. It returns the overlap held in device memory, from the
// same walk, for the decode term.
func fillInputs(req *Request, c *Candidate, cfg *Config, fleet *fleetView, t *Terms) (device float64) {
	t.Credit, device = tierCredit(&c.Depths, req.Blocks, &cfg.TierWeights)
	if req.Stage == StageDecode {
		return device
	}
	t.PrefillBlocks = rawPrefillBlocks(req, &c.Load)
	if cfg.Policy == PolicyKvgate {
		prefill := max(0, t.PrefillBlocks-t.Credit)
		t.TTFTSeconds = prefill * float64(req.BlockSize) / fleet.rateOf(&c.Load)
	}
	return device
}
