package extproc

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kvgate/kvgate/picker"
)

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
	return fmt.Sprintf("chosen=%s blocks=%d; %s", e.Chosen, e.Blocks, strings.Join(parts, "; "))
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
