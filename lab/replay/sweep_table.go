package replay

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteSweepTable prints a sweep as an aligned text table: per policy its
// SLA capacity and the figures at 1×, at capacity and overloaded, with the
// capacity's ratio to each baseline's.
func WriteSweepTable(w io.Writer, r *SweepResult) error {
	sla := fmt.Sprintf("TTFT p90 ≤ %.0f ms", r.TTFTSLAMs)
	if r.ITLSLAMs > 0 {
		sla += fmt.Sprintf(", ITL p90 ≤ %.0f ms", r.ITLSLAMs)
	}
	fmt.Fprintf(w, "capacity sweep %s: %d requests, %d workers × %d blocks of %d tokens; SLA %s\n",
		r.Trace, r.Requests, r.Workers, r.GPUBlocks, r.BlockSize, sla)
	fmt.Fprintf(w, "hit ratio bounds: pooled LRU (one cache of %d blocks) %.3f, infinite-cache ideal %.3f\n\n",
		r.Workers*r.GPUBlocks, r.PooledLRUHitRatio, r.IdealHitRatio)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tcapacity ×\t1× hit\t1× p90 ms\t1× req/s\tcap hit\tcap p90 ms\tcap req/s\t%.2f×cap hit\tp90 ms\treq/s\t\n", r.Overload)
	for _, p := range r.Policies {
		c := fmt.Sprintf("%.3g", p.Capacity)
		if p.CapacityAtLeast {
			c = "≥" + c
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.0f\t%.2f\t%.3f\t%.0f\t%.2f\t%.3f\t%.0f\t%.2f\t\n", p.Policy, c,
			p.Nominal.HitRatio, p.Nominal.TTFTP90Ms, p.Nominal.ThroughputRPS,
			p.AtCapacity.HitRatio, p.AtCapacity.TTFTP90Ms, p.AtCapacity.ThroughputRPS,
			p.Overloaded.HitRatio, p.Overloaded.TTFTP90Ms, p.Overloaded.ThroughputRPS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, sr := range r.OverloadRates {
		fmt.Fprintf(w, "\nevery policy at %s's overload rate ×%.3g:\n", sr.Policy, sr.Rate)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "policy\thit\tTTFT p90 ms\treq/s\t")
		for _, p := range r.Policies {
			a := p.AtOverloadOf[sr.Policy]
			fmt.Fprintf(tw, "%s\t%.3f\t%.0f\t%.2f\t\n", p.Policy, a.HitRatio, a.TTFTP90Ms, a.ThroughputRPS)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
