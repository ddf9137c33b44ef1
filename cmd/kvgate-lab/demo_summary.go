package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// demoRound is one round of the side-by-side demo: the same trace slice
// through a fresh round-robin fleet, then through a fresh kvgate fleet.
type demoRound struct{ rr, kv *demoFleetRun }

// spread is one figure over the rounds: its median and range. n counts the
// rounds that had the figure (a ratio to a zero has none).
type spread struct {
	median, lo, hi float64
	n              int
}

// spreadOf summarises vs, NaNs left out.
func spreadOf(vs []float64) spread {
	var ok []float64
	for _, v := range vs {
		if !math.IsNaN(v) {
			ok = append(ok, v)
		}
	}
	if len(ok) == 0 {
		return spread{}
	}
	slices.Sort(ok)
	m := ok[len(ok)/2]
	if len(ok)%2 == 0 {
		m = (ok[len(ok)/2-1] + m) / 2
	}
	return spread{median: m, lo: ok[0], hi: ok[len(ok)-1], n: len(ok)}
}

// over is k/r, NaN when round robin's figure is not positive.
func over(k, r float64) float64 {
	if r <= 0 {
		return math.NaN()
	}
	return k / r
}

// demoFigures are the summary's numbers, each computed from the rounds.
type demoFigures struct {
	rounds, requests int
	rrHit, kvHit     spread // prefix-cache hit ratio of prompt tokens
	hitRatio         spread // kvgate's hit ratio over round robin's, per round
	// prefillSaved is the share of round robin's prompt tokens to prefill
	// (those not served from cache) that kvgate did not have to prefill:
	// 1 - (1-kvHit)/(1-rrHit), per round. Both fleets get the same prompts.
	prefillSaved       spread
	rrP50, kvP50       spread // TTFT p50, ms
	rrP90, kvP90       spread
	p50Ratio, p90Ratio spread
	rrFailed, kvFailed int // over all rounds
	ideal              float64
}

// figuresOf computes the summary's numbers from the rounds; ideal is the
// slice's infinite-cache hit ratio.
func figuresOf(rounds []demoRound, requests int, ideal float64) demoFigures {
	f := demoFigures{rounds: len(rounds), requests: requests, ideal: ideal}
	var rrHit, kvHit, hit, saved, rr50, kv50, rr90, kv90, r50, r90 []float64
	for _, r := range rounds {
		a, b := r.rr.res, r.kv.res
		rrHit, kvHit = append(rrHit, a.HitRatio), append(kvHit, b.HitRatio)
		hit = append(hit, over(b.HitRatio, a.HitRatio))
		saved = append(saved, 1-over(1-b.HitRatio, 1-a.HitRatio))
		rr50, kv50 = append(rr50, a.TTFTP50Ms), append(kv50, b.TTFTP50Ms)
		rr90, kv90 = append(rr90, a.TTFTP90Ms), append(kv90, b.TTFTP90Ms)
		r50, r90 = append(r50, over(b.TTFTP50Ms, a.TTFTP50Ms)), append(r90, over(b.TTFTP90Ms, a.TTFTP90Ms))
		f.rrFailed += r.rr.failed
		f.kvFailed += r.kv.failed
	}
	f.rrHit, f.kvHit, f.hitRatio, f.prefillSaved = spreadOf(rrHit), spreadOf(kvHit), spreadOf(hit), spreadOf(saved)
	f.rrP50, f.kvP50, f.rrP90, f.kvP90 = spreadOf(rr50), spreadOf(kv50), spreadOf(rr90), spreadOf(kv90)
	f.p50Ratio, f.p90Ratio = spreadOf(r50), spreadOf(r90)
	return f
}

// verdict is the demo's last line: one plain sentence of what the run
// showed, every number in it from f (medians over the rounds).
func (f demoFigures) verdict() string {
	var b strings.Builder
	b.WriteString("Verdict: ")
	pct := func(v float64) string { return fmt.Sprintf("%.1f %%", 100*v) }
	switch {
	case f.rrHit.n == 0:
		b.WriteString("no round finished, nothing to compare")
		return b.String() + "."
	case f.kvHit.median == 0 && f.rrHit.median == 0:
		b.WriteString("neither fleet served any prompt tokens from cache (a slice without repeated prefixes shows no difference)")
	case f.rrHit.median == 0:
		fmt.Fprintf(&b, "kvgate served %s of prompt tokens from cache, round robin none", pct(f.kvHit.median))
	case f.hitRatio.median > 1:
		fmt.Fprintf(&b, "kvgate served %.1f× more prompt tokens from cache than round robin (%s vs %s), so %.0f %% fewer prompt tokens to prefill",
			f.hitRatio.median, pct(f.kvHit.median), pct(f.rrHit.median), 100*f.prefillSaved.median)
	default:
		fmt.Fprintf(&b, "kvgate did not serve more prompt tokens from cache than round robin in this run (%s vs %s, %.2f×)",
			pct(f.kvHit.median), pct(f.rrHit.median), f.hitRatio.median)
	}
	if f.p50Ratio.n > 0 && f.p90Ratio.n > 0 {
		fmt.Fprintf(&b, "; its time to first token was %.2f× round robin's at p50 and %.2f× at p90 (", f.p50Ratio.median, f.p90Ratio.median)
		// Where the rounds disagree on which fleet was faster, say so.
		var mixed []string
		for _, r := range []struct {
			name string
			s    spread
		}{{"p50", f.p50Ratio}, {"p90", f.p90Ratio}} {
			if r.s.lo < 1 && r.s.hi > 1 {
				mixed = append(mixed, fmt.Sprintf("%s %.2f–%.2f×", r.name, r.s.lo, r.s.hi))
			}
		}
		if len(mixed) > 0 {
			b.WriteString(strings.Join(mixed, ", ") + " over the rounds; ")
		}
		b.WriteString("below 1× is faster)")
	}
	if f.rounds > 1 {
		fmt.Fprintf(&b, "; medians of %d rounds", f.rounds)
	}
	if f.rrFailed+f.kvFailed > 0 {
		fmt.Fprintf(&b, "; but %d round-robin and %d kvgate requests failed", f.rrFailed, f.kvFailed)
	}
	return b.String() + "."
}

// writeSideBySide prints the two fleets' figures over the rounds (median
// and range), kvgate's ratio to round robin, and the verdict.
func writeSideBySide(out io.Writer, rounds []demoRound, f demoFigures) {
	one := f.rounds == 1
	show := func(s spread, format string, scale float64) string {
		if s.n == 0 {
			return "-"
		}
		v := fmt.Sprintf(format, scale*s.median)
		if one {
			return v
		}
		return v + " [" + strings.TrimSpace(fmt.Sprintf(format, scale*s.lo)) + "–" + strings.TrimSpace(fmt.Sprintf(format, scale*s.hi)) + "]"
	}
	perEngine := func(n []int) string {
		s := make([]string, len(n))
		for i, v := range n {
			s[i] = strconv.Itoa(v)
		}
		return strings.Join(s, " ")
	}
	if one {
		fmt.Fprintf(out, "\nSummary: the same %d requests, round robin vs kvgate\n", f.requests)
	} else {
		fmt.Fprintf(out, "\nSummary: the same %d requests, round robin vs kvgate, %d rounds (median [lowest–highest])\n", f.requests, f.rounds)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 3, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\tround-robin\tkvgate\tkvgate / round-robin\t\n")
	fmt.Fprintf(tw, "prefix-cache hit ratio (prompt tokens)\t%s\t%s\t%s\t\n", show(f.rrHit, "%.1f%%", 100), show(f.kvHit, "%.1f%%", 100), show(f.hitRatio, "%.2f×", 1))
	fmt.Fprintf(tw, "time to first token p50\t%s\t%s\t%s\t\n", show(f.rrP50, "%.0f ms", 1), show(f.kvP50, "%.0f ms", 1), show(f.p50Ratio, "%.2f×", 1))
	fmt.Fprintf(tw, "time to first token p90\t%s\t%s\t%s\t\n", show(f.rrP90, "%.0f ms", 1), show(f.kvP90, "%.0f ms", 1), show(f.p90Ratio, "%.2f×", 1))
	fmt.Fprintf(tw, "failed requests\t%d\t%d\t\t\n", f.rrFailed, f.kvFailed)
	if len(rounds) > 0 {
		last := rounds[len(rounds)-1]
		label := "requests per engine"
		if !one {
			label += " (last round)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t\t\n", label, perEngine(last.rr.perEngine), perEngine(last.kv.perEngine))
	}
	tw.Flush()
	fmt.Fprintf(out, "The slice's infinite-cache ideal (every repeated prefix block a hit): %.1f%% of prompt tokens.\n", 100*f.ideal)
	fmt.Fprintln(out, "TTFT comes from simulated engines on this machine: compare the two columns, not the absolute numbers.")
	fmt.Fprintln(out, f.verdict())
}
