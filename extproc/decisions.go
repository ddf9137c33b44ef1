package extproc

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

// record reports a routed request's decision: the routing metrics, the
// decision log (/debug/decisions), the x-kvgate-debug header for a client
// extproc.debug_header grants it, and a debug log line.
func (r *Router) record(req *server.Request, res *preprocess.Result, c choice, d *server.Decision, prio requestPriority, now time.Time) {
	chosen := c.cands[c.dec.Primary]
	depth := chosen.Depths.Max()
	r.metrics.requests.WithLabelValues(res.Served, "routed").Inc()
	chosenID := chosen.Worker.ID.String() // once for the metric and the record
	r.metrics.picks.WithLabelValues(chosenID).Inc()
	if len(res.Sequence) > 0 {
		r.metrics.overlap.Observe(float64(depth) / float64(len(res.Sequence)))
	}
	entry := decisionEntry{
		Time: now, RequestID: req.RequestID, Model: res.Served, Tokens: len(res.Tokens), Blocks: len(res.Sequence),
		Chosen: chosenID, Endpoint: d.Endpoint, Fallbacks: d.Fallbacks, Prefiller: d.Prefiller, PD: c.pdNote,
		Candidates: topCandidates(c.cands, c.dec, 4),
		Objective:  prio.Objective, Priority: prio.Priority, PriorityFrom: prio.From,
	}
	r.debug.add(entry)
	if req.Debug {
		// Only to clients extproc.debug_header grants it: the header shows
		// every candidate's cached depth (issue 15: a prompt's variant
		// revealed whether it was cached).
		outcome := "refused"
		if r.debugOK.grants(req) {
			outcome = "granted"
			d.DebugHeader = entry.header()
		}
		r.metrics.debugHeader.WithLabelValues(outcome).Inc()
	}
	if !r.log.Enabled(context.Background(), slog.LevelDebug) {
		return // the arguments below are boxed per call even when dropped
	}
	r.log.Debug("routed", "request_id", req.RequestID, "model", res.Served, "worker", entry.Chosen, "tokens", entry.Tokens, "cached_blocks", depth, "blocks", entry.Blocks)
}

// decisionEntry is one routing decision as an SRE reads it.
type decisionEntry struct {
	Time       time.Time        `json:"time"`
	RequestID  string           `json:"request_id,omitempty"`
	Model      string           `json:"model"`
	Tokens     int              `json:"tokens"`
	Blocks     int              `json:"blocks"`
	Chosen     string           `json:"chosen"`
	Endpoint   string           `json:"endpoint"`
	Fallbacks  []string         `json:"fallbacks,omitempty"`
	Prefiller  string           `json:"prefiller,omitempty"`
	PD         string           `json:"pd,omitempty"`
	Candidates []candidateTerms `json:"candidates"`
	// Objective is the InferenceObjective the request named; Priority its
	// priority (0 without one), PriorityFrom where that came from
	// (objective, header, default; priority.go).
	Objective    string `json:"objective,omitempty"`
	Priority     int    `json:"priority"`
	PriorityFrom string `json:"priority_from"`
	// Shed is why admission refused the request (429); then nothing was
	// chosen.
	Shed string `json:"shed,omitempty"`
}

// candidateTerms is one candidate in a decision record. Every number is
// named: the cached prefix per tier, the inputs the terms share, and each
// listed picker term (picker/terms.go) by name. Cost is exactly the sum of
// the terms, in the order listed.
type candidateTerms struct {
	Worker string `json:"worker"`
	// Cached is the prefix the index matched on this worker, per tier, in
	// blocks; cumulative: a block on the device also counts in the host
	// tier's depth and below.
	Cached cachedBlocks `json:"cached_blocks"`
	// CreditBlocks weighs the cached blocks by tier (extproc.tier_weights).
	CreditBlocks float64 `json:"credit_blocks"`
	// QueuedAndPromptBlocks is the worker's queued prefill plus this
	// prompt, before credit (Dynamo's raw_prefill_blocks).
	QueuedAndPromptBlocks float64 `json:"queued_and_prompt_blocks"`
	// PredictedTTFTSeconds: the kvgate policy's estimate (queued prefill,
	// then the uncached prompt, at the worker's measured rate).
	PredictedTTFTSeconds float64 `json:"predicted_ttft_seconds,omitempty"`
	// Terms are the listed terms' columns in KV blocks, weight applied;
	// absent for an ineligible candidate.
	Terms termColumns `json:"terms,omitempty"`
	Cost  float64     `json:"cost"`
	// Reason is why the candidate was ineligible.
	Reason string `json:"ineligible,omitempty"`
}

// cachedBlocks is kvfleet.Depths with each tier named.
type cachedBlocks struct {
	Device   int `json:"device"`
	Host     int `json:"host"`
	Disk     int `json:"disk"`
	External int `json:"external"`
}

// termColumns is one value per listed term, in picker.TermList's order;
// it encodes as a JSON object keyed by term name, in that order.
type termColumns []float64

func (c termColumns) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, t := range picker.TermList()[:len(c)] {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, t.Name)
		b = append(b, ':')
		v, err := json.Marshal(c[i])
		if err != nil {
			return nil, fmt.Errorf("term %s: %w", t.Name, err)
		}
		b = append(b, v...)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads the object MarshalJSON writes back into the
// list's order; a term the record does not name reads as 0.
func (c *termColumns) UnmarshalJSON(b []byte) error {
	var byName map[string]float64
	if err := json.Unmarshal(b, &byName); err != nil {
		return fmt.Errorf("decision terms: %w", err)
	}
	*c = make(termColumns, picker.NumTerms)
	for i, t := range picker.TermList() {
		(*c)[i] = byName[t.Name]
	}
	return nil
}

// header renders the top candidates for the x-kvgate-debug response header:
// each term by name, so that the printed terms add up to the printed cost
// (to the rounding of two decimals).
func (e decisionEntry) header() string {
	parts := make([]string, 0, len(e.Candidates))
	for _, c := range e.Candidates {
		var b strings.Builder
		fmt.Fprintf(&b, "%s cost=%.2f", c.Worker, c.Cost)
		for i, t := range picker.TermList()[:len(c.Terms)] {
			fmt.Fprintf(&b, " %s=%.2f", t.Name, c.Terms[i])
		}
		fmt.Fprintf(&b, " credit=%.2f cached_device=%d cached_host=%d cached_disk=%d cached_external=%d",
			c.CreditBlocks, c.Cached.Device, c.Cached.Host, c.Cached.Disk, c.Cached.External)
		if c.Reason != "" {
			b.WriteString(" ineligible=" + c.Reason)
		}
		parts = append(parts, b.String())
	}
	prio := fmt.Sprintf("priority=%d(%s)", e.Priority, e.PriorityFrom)
	if e.Objective != "" {
		prio += " objective=" + e.Objective
	}
	return fmt.Sprintf("chosen=%s blocks=%d %s; %s", e.Chosen, e.Blocks, prio, strings.Join(parts, "; "))
}

func topCandidates(cands []picker.Candidate, d picker.Decision, n int) []candidateTerms {
	idx := make([]int, len(cands))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ta, tb := d.Terms[idx[a]], d.Terms[idx[b]]
		if ta.Eligible != tb.Eligible {
			return ta.Eligible
		}
		return ta.Cost < tb.Cost
	})
	out := make([]candidateTerms, 0, n)
	for _, i := range idx[:min(n, len(idx))] {
		t := d.Terms[i]
		c := cands[i]
		ct := candidateTerms{
			Worker: c.Worker.ID.String(),
			Cached: cachedBlocks{
				Device: c.Depths[kvfleet.TierDevice], Host: c.Depths[kvfleet.TierHost],
				Disk: c.Depths[kvfleet.TierDisk], External: c.Depths[kvfleet.TierExternal],
			},
			CreditBlocks: t.Credit, QueuedAndPromptBlocks: t.PrefillBlocks, PredictedTTFTSeconds: t.TTFTSeconds,
			Cost: t.Cost, Reason: t.Reason,
		}
		if t.Eligible {
			ct.Terms = termColumns(t.Parts[:])
		}
		out = append(out, ct)
	}
	return out
}

// decisionLog keeps the most recent decisions for /debug/decisions.
type decisionLog struct {
	mu   sync.Mutex
	ring []decisionEntry
	next int
	full bool
}

func newDecisionLog(n int) *decisionLog { return &decisionLog{ring: make([]decisionEntry, n)} }

func (l *decisionLog) add(e decisionEntry) {
	if len(l.ring) == 0 {
		return
	}
	l.mu.Lock()
	l.ring[l.next] = e
	l.next = (l.next + 1) % len(l.ring)
	l.full = l.full || l.next == 0
	l.mu.Unlock()
}

// recent returns the kept decisions, newest first.
func (l *decisionLog) recent() []decisionEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.next
	if l.full {
		n = len(l.ring)
	}
	out := make([]decisionEntry, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, l.ring[(l.next-i+len(l.ring))%len(l.ring)])
	}
	return out
}

// DecisionsHandler serves /debug/decisions.
func (r *Router) DecisionsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(r.debug.recent())
	})
}
