package picker

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// MaxCandidates bounds one pick; a fleet larger than this is a config error.
const MaxCandidates = 1 << 16

// Pick chooses a worker for req among cands. It returns ErrNoEligible when
// every candidate is excluded (the Decision's Terms still say why).
//
// rnd breaks exact ties at Temperature 0 and samples the softmax above 0;
// with a nil rnd the choice is deterministic (lowest index among ties, and
// argmin instead of sampling), which suits debugging but herds.
//
// cfg is validated on every call; a caller that picks with one
// configuration many times checks it once (Config.Check) and calls
// Checked.Pick.
func Pick(req Request, cands []Candidate, cfg Config, rnd *rand.Rand) (Decision, error) {
	var d Decision
	err := pickInto(&d, req, cands, &cfg, true, rnd)
	return d, err
}

// PickInto is Pick writing into dst, reusing dst's slices: a caller that
// keeps one Decision per worker goroutine picks without allocating.
func PickInto(dst *Decision, req Request, cands []Candidate, cfg Config, rnd *rand.Rand) error {
	return pickInto(dst, req, cands, &cfg, true, rnd)
}

// errUnchecked is the zero Checked's answer.
var errUnchecked = errors.New("picker: configuration not checked (Config.Check makes a Checked)")

// Pick is the package's Pick with a configuration validated once.
func (k *Checked) Pick(req Request, cands []Candidate, rnd *rand.Rand) (Decision, error) {
	var d Decision
	err := k.PickInto(&d, req, cands, rnd)
	return d, err
}

// PickInto is the package's PickInto with a configuration validated once.
func (k *Checked) PickInto(dst *Decision, req Request, cands []Candidate, rnd *rand.Rand) error {
	if !k.ok {
		return errUnchecked
	}
	return pickInto(dst, req, cands, &k.cfg, false, rnd)
}

// pickInto is PickInto; validate is false for a Checked configuration.
// The request is validated on every call: it is each request's input.
func pickInto(dst *Decision, req Request, cands []Candidate, cfg *Config, validate bool, rnd *rand.Rand) error {
	dst.Primary = -1
	dst.Fallbacks = dst.Fallbacks[:0]
	dst.Panic, dst.Healthy, dst.Hosts = false, 0, 0
	if cap(dst.Terms) >= len(cands) {
		dst.Terms = dst.Terms[:len(cands)]
	} else {
		dst.Terms = make([]Terms, len(cands))
	}
	terms := dst.Terms
	clear(terms)

	if err := req.Validate(); err != nil {
		return fmt.Errorf("picker: %w", err)
	}
	if validate {
		if err := cfg.Validate(); err != nil {
			return err
		}
	}
	if len(cands) > MaxCandidates {
		return fmt.Errorf("picker: %d candidates, more than %d", len(cands), MaxCandidates)
	}

	dst.Panic, dst.Healthy, dst.Hosts = healthyPanic(cands, req.Stage, cfg)
	// The fleet's prefill rates are read by the kvgate policy only (the
	// predicted TTFT, and the throughput-aware prefill term): under dynamo
	// neither the rates nor their median are gathered.
	kvgate := cfg.Policy == PolicyKvgate
	eligible := 0
	dst.rates = dst.rates[:0]
	for i := range cands {
		c := &cands[i]
		if r := exclusion(c, req.Stage, cfg, dst.Panic); r != "" {
			terms[i].Reason = r
			continue
		}
		terms[i].Eligible = true
		eligible++
		if v := c.Load.PrefillTokensPerSec; kvgate && measuredRate(v) {
			dst.rates = append(dst.rates, v)
		}
	}
	if eligible == 0 {
		return ErrNoEligible
	}
	fleet := fleetView{uniform: true}
	if kvgate {
		fleet = newFleetView(dst.rates, cfg.Kvgate.DefaultPrefillTokensPerSec)
		if cfg.Kvgate.ThroughputAware {
			fleet.meanOver(cands, terms, eligible)
		}
	}
	applyTerms(&termInputs{req: &req, cands: cands, terms: terms, cfg: cfg, fleet: &fleet})

	if cfg.Temperature == 0 || rnd == nil {
		dst.Primary = argmin(terms, rnd)
	} else {
		dst.Primary = softmaxSample(terms, cfg.Temperature, rnd.Float64())
	}
	dst.Fallbacks = appendFallbacks(dst.Fallbacks, dst.Primary, cands, terms, cfg.Fallbacks)
	return nil
}

// argmin returns the eligible index of lowest cost; exact ties are broken
// uniformly at random by reservoir sampling, as Dynamo's
// minimum_cost_index does (selector/default.rs).
func argmin(terms []Terms, rnd *rand.Rand) int {
	best, ties := -1, 0
	for i := range terms {
		if !terms[i].Eligible {
			continue
		}
		switch {
		case best < 0 || terms[i].Cost < terms[best].Cost:
			best, ties = i, 1
		case terms[i].Cost == terms[best].Cost:
			ties++
			if rnd != nil && rnd.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// softmaxSample follows Dynamo's softmax_sample_index (selector/default.rs):
// costs are normalised to [0, 1] by the eligible min and max, each row gets
// weight exp(−normalised / temperature), and the row where the cumulative
// probability first reaches sample in [0, 1) wins. Equal costs are uniform.
// Two passes over the weights instead of a probability buffer keep it
// allocation-free.
func softmaxSample(terms []Terms, temperature, sample float64) int {
	lo, hi := math.Inf(1), math.Inf(-1)
	last := -1
	for i := range terms {
		if terms[i].Eligible {
			lo, hi = min(lo, terms[i].Cost), max(hi, terms[i].Cost)
			last = i
		}
	}
	weight := func(c float64) float64 {
		if hi == lo {
			return 1
		}
		return math.Exp(-(c - lo) / ((hi - lo) * temperature))
	}
	sum := 0.0
	for i := range terms {
		if terms[i].Eligible {
			sum += weight(terms[i].Cost)
		}
	}
	cum := 0.0
	for i := range terms {
		if terms[i].Eligible {
			cum += weight(terms[i].Cost) / sum
			if sample <= cum {
				return i
			}
		}
	}
	return last // rounding left cum just under sample
}

// appendFallbacks appends up to n eligible candidates other than primary,
// cheapest first (lower index on ties). A candidate whose endpoint is
// already listed is skipped: the proxy retries by endpoint, so two
// data-parallel ranks behind one ip:port are one retry target.
func appendFallbacks(dst []int, primary int, cands []Candidate, terms []Terms, n int) []int {
	taken := func(i int) bool {
		ep := cands[i].Worker.Endpoint
		if i == primary || (ep != "" && ep == cands[primary].Worker.Endpoint) {
			return true
		}
		for _, j := range dst {
			if i == j || (ep != "" && ep == cands[j].Worker.Endpoint) {
				return true
			}
		}
		return false
	}
	for len(dst) < n {
		best := -1
		for i := range terms {
			if terms[i].Eligible && (best < 0 || terms[i].Cost < terms[best].Cost) && !taken(i) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		dst = append(dst, best)
	}
	return dst
}
