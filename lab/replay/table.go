package replay

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints res as an aligned text table.
func WriteTable(w io.Writer, res *Result) error {
	if res.BlockSize > 0 {
		fmt.Fprintf(w, "trace %s: %d requests, %d workers, block size %d, %d GPU blocks per worker; ideal hit ratio %.3f (infinite cache), pooled-LRU bound %.3f (one LRU of %d blocks)\n\n",
			res.Trace, res.Requests, res.Workers, res.BlockSize, res.GPUBlocks, res.IdealHitRatio, res.PooledLRUHitRatio, res.Workers*res.GPUBlocks)
	} else { // a live replay: the fleet's cache geometry is not known here
		fmt.Fprintf(w, "trace %s: %d requests, %d workers served; ideal hit ratio %.3f (one infinite cache, empty at the start)\n\n",
			res.Trace, res.Requests, res.Workers, res.IdealHitRatio)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\thit ratio\t% of ideal\tTTFT p50 ms\tp90 ms\tp99 ms\tITL p50 ms\tE2E p90 ms\treq/s\timbalance\t")
	for _, p := range res.Order {
		r := res.Policies[p]
		ofIdeal := 0.0
		if res.IdealHitRatio > 0 {
			ofIdeal = 100 * r.HitRatio / res.IdealHitRatio
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.1f\t%.3f\t%.3f\t\n",
			p, r.HitRatio, ofIdeal, r.TTFTP50Ms, r.TTFTP90Ms, r.TTFTP99Ms, r.ITLP50Ms, r.E2EP90Ms, r.ThroughputRPS, r.LoadImbalance)
	}
	return tw.Flush()
}
