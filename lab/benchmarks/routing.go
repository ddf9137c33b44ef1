package benchmarks

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvgate/kvgate/lab/replay"
)

// RoutingOptions configure the routing benchmark: the in-process replay of
// the Mooncake conversation trace (lab/replay) at several fleet sizes.
type RoutingOptions struct {
	// RepoRoot is the repository root; default ".".
	RepoRoot string
	// Trace is the workload, named TraceName in the report (the lab passes
	// the 1,000-request Mooncake slice embedded in kvgate-lab). Empty:
	// TracePath is read.
	Trace     []replay.TraceRequest
	TraceName string
	// TracePath is the trace file when Trace is empty; default the
	// 300-request slice shipped in lab/replay/testdata, relative to
	// RepoRoot: the report must come from a trace that is in the
	// repository, not from a folder beside the checkout.
	TracePath    string
	WorkerCounts []int  // default 4, 8, 16
	Command      string // the command line shown in the report; default "kvgate-lab bench"
	Seed         uint64
}

// Routing replays the trace once per policy at each fleet size and writes
// the BENCHMARKS.md section: hit ratio (and % of the infinite-cache ideal)
// and TTFT percentiles per policy.
func Routing(ctx context.Context, w io.Writer, opt RoutingOptions) error {
	if opt.RepoRoot == "" {
		opt.RepoRoot = "."
	}
	if len(opt.WorkerCounts) == 0 {
		opt.WorkerCounts = []int{4, 8, 16}
	}
	if opt.Command == "" {
		opt.Command = "kvgate-lab bench"
	}
	reqs, name := opt.Trace, opt.TraceName
	if len(reqs) == 0 {
		path := opt.TracePath
		if path == "" {
			path = filepath.Join(opt.RepoRoot, "e2e", "replay", "testdata", "conversation_head300.jsonl")
		}
		var err error
		if reqs, err = replay.LoadTrace(path, 0); err != nil {
			return fmt.Errorf("routing benchmark: %w", err)
		}
		name = filepath.Base(path)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Routing (trace replay)\n\n")
	fmt.Fprintf(&b, "Trace: `%s`, %d requests (Mooncake FAST'25 conversation trace; each hash_id is 512 tokens). "+
		"Each policy runs once on a fresh fleet of simulated engines (lab/enginesim: vLLM-like prefix cache and scheduler, "+
		"Dynamo mocker timing, 512-token blocks, 2,048 blocks = 1 Mi tokens of KV per engine) in virtual time. "+
		"Hit ratio = prefix-cached prompt tokens / prompt tokens as the engines report them; ideal = one infinite cache. "+
		"Command: `%s`; equivalent: `kvgate-lab replay --workers N`.\n\n", name, len(reqs), opt.Command)
	for _, n := range opt.WorkerCounts {
		start := time.Now()
		res, err := replay.Run(ctx, name, reqs, replay.Options{Workers: n, Seed: opt.Seed})
		if err != nil {
			return fmt.Errorf("routing benchmark, %d workers: %w", n, err)
		}
		fmt.Fprintf(&b, "**%d workers** — ideal hit ratio %.3f; replay of all policies took %.1f s.\n\n", n, res.IdealHitRatio, time.Since(start).Seconds())
		b.WriteString("| policy | hit ratio | % of ideal | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|\n")
		for _, p := range res.Order {
			r := res.Policies[p]
			of := 0.0
			if res.IdealHitRatio > 0 {
				of = 100 * r.HitRatio / res.IdealHitRatio
			}
			fmt.Fprintf(&b, "| %s | %.3f | %.1f | %.0f | %.0f | %.0f |\n", p, r.HitRatio, of, r.TTFTP50Ms, r.TTFTP90Ms, r.TTFTP99Ms)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
