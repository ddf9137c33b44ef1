package extproc

import (
	"math/rand/v2"
	"time"

	"github.com/kvgate/kvgate/extproc/enginemetrics"
	"github.com/kvgate/kvgate/extproc/loadview"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/picker"
)

// gatherer lists workers as picker candidates: each with its cached depths
// (the match stage's answer) and its state as every signal source reports
// it. It is the request path's one reader of those sources:
//
//   - subset hint: the proxy's allowed endpoints (the request's own)
//   - outlier detector: ejected, and the slow-start weight after an
//     ejection (outlier.go)
//   - health checker: failed its probes (health.go)
//   - slow-start draw: a recovering worker sits out this request with
//     probability 1 - weight (the request's random source)
//   - load view: kvgate's own bookings (loadview.View)
//   - shared load: the other replicas' bookings (sharedload.go)
//   - engine metrics: the engine's queue, running batch and KV usage
//     (enginemetrics.Scraper)
//   - throughput estimates: prefill tokens per second (loadview.Throughput)
//
// Each source guards its own state and a nil one is disabled; the gatherer
// holds no lock and no state. The router owns the sources' life cycle
// through its list of them (signals.go: SetMembers sets their targets, Run
// runs them, Register exports them).
type gatherer struct {
	load       *loadview.View
	throughput *loadview.Throughput
	outlier    *outlierDetector       // nil when disabled
	health     *healthChecker         // nil when disabled
	shared     *sharedLoad            // nil unless the Redis backend shares load
	engines    *enginemetrics.Scraper // nil when disabled
}

// gather lists workers with their cached depths in m (nil: none) and their
// load, restricted to the proxy's subset hint when it sent one (nil: none).
// The depths are copied: m may be reused once gather returns.
func (g *gatherer) gather(workers []picker.Worker, m *kvindex.Match, hint []string, now time.Time, rnd *rand.Rand) []picker.Candidate {
	var allowed map[string]bool
	if hint != nil {
		allowed = make(map[string]bool, len(hint))
		for _, h := range hint {
			allowed[h] = true
		}
	}
	loads := g.load.SnapshotAll()
	cands := make([]picker.Candidate, 0, len(workers))
	warming, usable := 0, 0
	for _, w := range workers {
		if allowed != nil && !allowed[w.Endpoint] {
			continue
		}
		ejected, weight := g.outlier.state(w.Endpoint, now)
		// Ejected workers stay listed (the debug header shows why) but the
		// picker excludes them: no traffic, not even as a fallback — unless
		// too few of the pool are healthy and the pick is in panic
		// (picker.Config.HealthyPanicThreshold).
		w.Ejected = ejected
		if !g.health.healthy(w.Endpoint) {
			w.Unhealthy = true // failed its health probes: eligible again after one success
		}
		if !w.Unhealthy && !w.Draining && !w.Ejected {
			usable++
			if weight < 1 && rnd.Float64() >= weight {
				w.Warming = true
				warming++
			}
		}
		depths, _ := m.Lookup(w.ID)
		cands = append(cands, picker.Candidate{Worker: w, Depths: depths, Load: g.loadOf(w, loads[w.ID], now)})
	}
	if warming > 0 && warming == usable {
		// Every usable worker is ramping and this draw left them all out:
		// slow start shapes traffic, it must never refuse it.
		for i := range cands {
			cands[i].Worker.Warming = false
		}
	}
	return cands
}

// loadOf adds to own (this replica's bookings on w) what the other sources
// know of w's load.
func (g *gatherer) loadOf(w picker.Worker, own picker.Load, now time.Time) picker.Load {
	l := own
	if peer := g.shared.peerEstimate(w.ID, l); peer != (picker.Load{}) {
		// The other replicas' load (their last publish, extrapolated by
		// this replica's own change since): without it every replica sends
		// a burst to the same idle worker.
		l.InflightRequests += peer.InflightRequests
		l.PrefillTokens += peer.PrefillTokens
		l.DecodeBlocks += peer.DecodeBlocks
	}
	if g.engines != nil {
		if smp, ok := g.engines.Get(w.ID, now); ok {
			l.HaveEngine, l.Waiting, l.Running, l.KVUsage = true, smp.Waiting, smp.Running, smp.KVUsage
			l.KVCapacityBlocks = smp.NumGPUBlocks
		}
	}
	if rate, ok := g.throughput.Rate(w.ID); ok {
		l.PrefillTokensPerSec = rate
	}
	return l
}
