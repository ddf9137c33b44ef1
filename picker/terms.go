package picker

import (
	"fmt"
	"math"
)

// A candidate's cost is the sum of the terms listed here, in this order:
// each term fills its column (Terms.Parts[id], in KV blocks, weight
// applied) for every eligible candidate, and the column is then added to
// the candidates' Cost. A later term may read the cost so far (the
// recompute term breaks the holder's ties by it), so the order is part of
// the cost; it is the order the costs were summed in before the list
// existed, so that a replay decides bit for bit as it did.
//
// Adding a term: its file in picker/ (the apply function and its doc), its
// test, and here one TermID constant, one entry in termTable and one case
// in applyTerm. The YAML switch (extproc.picker.terms.<name>), the
// decision record's column and kvgate-lab replay's --term flag read this
// table.

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
}

// termInputs is what a term's apply function reads and writes: the
// request, the candidates, their terms (eligibility, the shared inputs
// Credit, PrefillBlocks and TTFTSeconds, the cost so far) and the fleet's
// prefill rates.
type termInputs struct {
	req   *Request
	cands []Candidate
	terms []Terms
	// device is each candidate's overlap in device memory (fillInputs).
	device []float64
	cfg    *Config
	fleet  *fleetView
	id     TermID
}

// set writes candidate i's column of the term being applied and adds it to
// the candidate's cost at once: terms are applied in the list's order, so
// each candidate's cost is still summed in that order, in one pass per
// term. A term that reads the cost so far (recompute) reads it before it
// sets anything, so it sees the earlier terms' sum only.
func (in *termInputs) set(i int, v float64) {
	t := &in.terms[i]
	t.Parts[in.id] = v
	t.Cost += v
}

// termTable is the list. Entries are indexed by their ID.
var termTable = [NumTerms]Term{
	TermPrefill: {
		ID: TermPrefill, Name: "prefill", weight: func(c *Config) *float64 { return &c.PrefillLoadScale },
		Computes: "prefill_load_scale × the prompt blocks not credited from cache plus the worker's queued prefill (kvgate, throughput_aware: × fleet mean rate / worker rate)",
	},
	TermDecode: {
		ID: TermDecode, Name: "decode", FixedWeight: true,
		Computes: "the KV blocks the worker would hold: its decode blocks plus this prompt's (kvgate: the expected footprint, with a charge past KV headroom)",
	},
	TermRequests: {
		ID: TermRequests, Name: "requests", weight: func(c *Config) *float64 { return &c.ActiveRequestWeight },
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

// applyTerm runs term id's apply function. A switch, not a function in
// the table: static calls keep the inputs on the stack, so that PickInto
// stays allocation-free.
func applyTerm(id TermID, in *termInputs) {
	switch id {
	case TermPrefill:
		applyPrefill(in)
	case TermDecode:
		applyDecode(in)
	case TermRequests:
		applyRequests(in)
	case TermHerd:
		applyHerd(in)
	case TermRecompute:
		applyRecompute(in)
	}
}

// applyTerms fills every enabled term's column for the eligible
// candidates, in the list's order; set adds each column into Cost.
func applyTerms(in *termInputs) {
	for id := range NumTerms {
		if !in.cfg.TermEnabled(id) {
			continue
		}
		in.id = id
		applyTerm(id, in)
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
