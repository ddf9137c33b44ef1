package extproc

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/picker"
)

// record reports a routed request's decision: the routing metrics, the
// decision log (/debug/decisions), the x-kvgate-debug header for a client
// extproc.debug_header grants it, and a debug log line.
func (r *Router) record(req *server.Request, res *preprocess.Result, c choice, d *server.Decision, prio requestPriority, now time.Time) {
	chosen := c.cands[c.dec.Primary]
	depth := chosen.Depths.Max()
	r.metrics.requests.WithLabelValues(res.Served, "routed").Inc()
	r.metrics.picks.WithLabelValues(chosen.Worker.ID.String()).Inc()
	if len(res.Sequence) > 0 {
		r.metrics.overlap.Observe(float64(depth) / float64(len(res.Sequence)))
	}
	entry := decisionEntry{
		Time: now, RequestID: req.RequestID, Model: res.Served, Tokens: len(res.Tokens), Blocks: len(res.Sequence),
		Chosen: chosen.Worker.ID.String(), Endpoint: d.Endpoint, Fallbacks: d.Fallbacks, Prefiller: d.Prefiller, PD: c.pdNote,
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

type candidateTerms struct {
	Worker        string  `json:"worker"`
	CachedBlocks  [4]int  `json:"cached_blocks"` // device, host (cumulative), disk, external
	Credit        float64 `json:"credit"`
	PrefillBlocks float64 `json:"prefill_blocks"`
	DecodeBlocks  float64 `json:"decode_blocks"`
	Cost          float64 `json:"cost"`
	Reason        string  `json:"ineligible,omitempty"`
}

// header renders the top candidates for the x-kvgate-debug response header.
func (e decisionEntry) header() string {
	parts := make([]string, 0, len(e.Candidates))
	for _, c := range e.Candidates {
		s := fmt.Sprintf("%s cost=%.2f credit=%.2f prefill=%.2f decode=%.2f cached=%d", c.Worker, c.Cost, c.Credit, c.PrefillBlocks, c.DecodeBlocks, c.CachedBlocks[0])
		if c.Reason != "" {
			s += " ineligible=" + c.Reason
		}
		parts = append(parts, s)
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
		out = append(out, candidateTerms{
			Worker: c.Worker.ID.String(), CachedBlocks: [4]int(c.Depths), Credit: t.Credit,
			PrefillBlocks: t.PrefillBlocks, DecodeBlocks: t.DecodeBlocks, Cost: t.Cost, Reason: t.Reason,
		})
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
