package plannersim

import (
	"fmt"
	"io"
)

// WriteTable prints the comparison as a Markdown table, with each
// policy's GPU-hours relative to the cheapest static fleet reaching
// SLAGoal.
func WriteTable(w io.Writer, rep *Report) {
	fmt.Fprintln(w, "| policy | SLA attainment | TTFT ok | ITL ok | GPU-hours | × cheapest 99 % static | TTFT p90 (ms) | ITL p90 (ms) | scale events |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rep.Results {
		ratio := "–"
		if rep.Cheapest != nil && rep.Cheapest.GPUHours > 0 {
			ratio = fmt.Sprintf("%.2f", r.GPUHours/rep.Cheapest.GPUHours)
		}
		name := r.Policy
		if r == rep.Cheapest {
			name += " (cheapest ≥ 99 %)"
		}
		fmt.Fprintf(w, "| %s | %.2f %% | %.2f %% | %.2f %% | %.2f | %s | %.0f | %.1f | %d |\n",
			name, 100*r.SLAAttainment, 100*r.TTFTAttainment, 100*r.ITLAttainment, r.GPUHours, ratio, r.TTFTP90Ms, r.ITLP90Ms, r.ScaleEvents)
	}
	if rep.Cheapest == nil {
		fmt.Fprintf(w, "\nNo static fleet tried reached %.0f %% SLA attainment.\n", 100*SLAGoal)
	}
}
