package replay

import (
	"fmt"
	"io"
	"strings"
)

// isKvgate tells kvgate's own policies from the peers' and baselines.
func isKvgate(p string) bool { return strings.HasPrefix(p, PolicyKvgate) }

// bestPeer is the policy other than kvgate's with the highest goodput in
// row, "" when there is none.
func bestPeer(row *OverloadRow, policies []string) string {
	best := ""
	for _, p := range policies {
		if isKvgate(p) {
			continue
		}
		if best == "" || row.Results[p].GoodputRPS > row.Results[best].GoodputRPS {
			best = p
		}
	}
	return best
}

// topBand is the attainment of the highest priority band, -1 without
// bands.
func topBand(r *PolicyResult) float64 {
	if len(r.Bands) == 0 {
		return -1
	}
	return r.Bands[len(r.Bands)-1].Attainment
}

// WriteOverloadTable prints an overload sweep as a Markdown table, one row
// per multiple: every policy's goodput and attainment, the subject's
// (CapacityOf) goodput against the best peer's and its own at 1×, its
// shed, abandon and queue-wait figures, and with tenants or bands the
// fairness and top-band figures of the subject and the best peer.
func WriteOverloadTable(w io.Writer, r *OverloadResult) error {
	subj := r.CapacityOf
	fmt.Fprintf(w, "overload sweep %s, %d workers: %s's SLA capacity ×%.3g (attainment ≥ %.0f %% within TTFT %.0f ms), clients abandon at %.3g × the SLA, %.0f s of arrivals per replay\n",
		r.Trace, r.Workers, subj, r.Capacity, MeetsCapacitySLA*100, r.TTFTSLAMs, r.AbandonAfter, r.SpanS)
	var caps []string
	for _, p := range r.Policies {
		caps = append(caps, fmt.Sprintf("%s ×%.3g", p, r.Capacities[p]))
	}
	fmt.Fprintf(w, "each policy's own capacity, same criterion: %s\n\n", strings.Join(caps, ", "))
	order := strings.Join(r.Policies, " / ")
	fmt.Fprintf(w, "| load × capacity (rate ×) | requests | goodput req/s: %s | %s ÷ best peer; ÷ own 1× | SLA attainment, same order | %s shed / abandoned / queue wait p99 ms | well-behaved tenants, %s vs best peer: Jain / pooled / lowest attainment | top band attainment: %s / best peer |\n", order, subj, subj, subj, subj)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	var base float64
	for i := range r.Rows {
		row := &r.Rows[i]
		s := row.Results[subj]
		if i == 0 {
			base = s.GoodputRPS
		}
		var gp, att []string
		for _, p := range r.Policies {
			gp = append(gp, fmt.Sprintf("%.1f", row.Results[p].GoodputRPS))
			att = append(att, fmt.Sprintf("%.3f", row.Results[p].SLAAttainment))
		}
		peer := bestPeer(row, r.Policies)
		ratio := "—"
		if peer != "" && row.Results[peer].GoodputRPS > 0 {
			ratio = fmt.Sprintf("%.2f (%s)", s.GoodputRPS/row.Results[peer].GoodputRPS, peer)
		}
		own := "—"
		if base > 0 {
			own = fmt.Sprintf("%.2f", s.GoodputRPS/base)
		}
		fair, band := "—", "—"
		if peer != "" && len(s.Tenants) > 0 {
			q := row.Results[peer]
			fair = fmt.Sprintf("%.3f / %.3f / %.3f vs %.3f / %.3f / %.3f", s.JainIndex, s.WellBehavedAttainment, s.WellBehavedMinAttainment,
				q.JainIndex, q.WellBehavedAttainment, q.WellBehavedMinAttainment)
		}
		if peer != "" && topBand(s) >= 0 {
			band = fmt.Sprintf("%.3f / %.3f", topBand(s), topBand(row.Results[peer]))
		}
		fmt.Fprintf(w, "| %.3g× (%.3g) | %d | %s | %s; %s | %s | %.3f / %.3f / %.0f | %s | %s |\n",
			row.Multiple, row.Rate, row.Requests, strings.Join(gp, " / "), ratio, own, strings.Join(att, " / "),
			s.ShedRate, s.AbandonRate, s.QueueWaitP99Ms, fair, band)
	}
	return nil
}
