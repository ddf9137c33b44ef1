// Package collect gathers what the planner observes of each pool over one
// interval — request rate, mean input and output lengths, TTFT and ITL
// p90, queue depth, KV usage, prefix-cache hit rate, and which replicas
// are ready or idle — either from the Prometheus HTTP API (PromQL over
// vLLM's metric names) or, where no Prometheus runs, by scraping the
// engines' and kvgate extproc's /metrics directly and differencing
// counters and histograms between scrapes.
package collect

import (
	"context"
	"fmt"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// Collector is one source of observations (Prometheus or direct scrape).
type Collector interface {
	// Collect observes every pool at now. draining maps the replicas the
	// planner has asked to drain to their pool: they are counted apart, and
	// reported Idle once they serve nothing or are no longer seen at all. A partial result comes with the errors of
	// the sources that failed; each is a *SourceError.
	Collect(ctx context.Context, now time.Time, draining map[string]string) (plan.Observation, []error)
}

// SourceError names what failed: "prometheus", "engine", "extproc".
type SourceError struct {
	Source string
	Target string
	Err    error
}

func (e *SourceError) Error() string {
	return fmt.Sprintf("collect %s %s: %v", e.Source, e.Target, e.Err)
}

func (e *SourceError) Unwrap() error { return e.Err }

// maxBodyBytes bounds one /metrics page or one API answer.
const maxBodyBytes = 16 << 20
