package journal

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// At returns the last entry at or before t (the zero time: the last entry).
func At(entries []Entry, t time.Time) (Entry, bool) {
	var found Entry
	ok := false
	for _, e := range entries {
		if !t.IsZero() && e.Time.After(t) {
			break
		}
		found, ok = e, true
	}
	return found, ok
}

// Explain prints one decision for a person: per pool what was observed,
// what was forecast and the model terms, and what was decided.
func Explain(w io.Writer, e Entry) {
	mode := "applied"
	switch {
	case e.Advisory:
		mode = "advisory (not applied)"
	case e.Error != "":
		mode = "NOT applied: " + e.Error
	case !e.Applied:
		mode = "not applied"
	}
	fmt.Fprintf(w, "decision at %s by %s — %s\n", e.Time.UTC().Format(time.RFC3339), e.Policy, mode)
	fmt.Fprintf(w, "  why: %s\n", e.Decision.Reason)
	pools := map[string]bool{}
	for p := range e.Observation.Pools {
		pools[p] = true
	}
	for p := range e.Decision.Desired {
		pools[p] = true
	}
	for _, name := range slices.Sorted(maps.Keys(pools)) {
		o := e.Observation.Pools[name]
		fmt.Fprintf(w, "  pool %s\n", name)
		fmt.Fprintf(w, "    observed: %d ready, %d pending, %d draining (%d idle); %.3g req/s, %.0f input / %.0f output tokens, cache hit %.0f%%\n",
			o.Replicas, o.Pending, o.Draining, len(o.Idle), o.RequestRate, o.MeanInputTokens, o.MeanOutputTokens, 100*o.CacheHitRate)
		fmt.Fprintf(w, "              TTFT p90 %s, ITL p90 %s, queue %.0f, KV usage %.0f%%\n",
			dur(o.TTFTP90), dur(o.ITLP90), o.QueueDepth, 100*o.KVUsage)
		var terms []string
		for k, v := range e.Decision.Terms {
			if rest, ok := strings.CutPrefix(k, name+"."); ok {
				terms = append(terms, fmt.Sprintf("%s=%.4g", rest, v))
			}
		}
		slices.Sort(terms)
		if len(terms) > 0 {
			fmt.Fprintf(w, "    terms: %s\n", strings.Join(terms, " "))
		}
		fmt.Fprintf(w, "    decided: %s → %d replicas (%d serving once draining ends)", orDash(e.Decision.Action[name]), e.Decision.Desired[name], e.Decision.Active[name])
		if d := e.Decision.Drain[name]; len(d) > 0 {
			fmt.Fprintf(w, "; drain %s", strings.Join(d, ", "))
		}
		if r := e.Decision.Remove[name]; len(r) > 0 {
			fmt.Fprintf(w, "; remove %s", strings.Join(r, ", "))
		}
		fmt.Fprintln(w)
	}
}

func dur(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	return d.Round(time.Millisecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
