package extproc

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/extproc/enginemetrics"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// signalSource is one source of worker state beside the index and
// kvgate's own bookings (the outlier detector, the health checker, the
// other replicas' shared load, the engines' metrics). The gatherer reads
// the sources (gather.go); the Router keeps this list and gives each its
// life cycle once: its targets on every SetMembers, its background work
// in Run until Run's context ends (stop), its metrics in Register. A
// disabled source is not listed.
type signalSource struct {
	name string
	// setWorkers hands the source the new worker set; nil: it takes none.
	setWorkers func([]kvfleet.Worker)
	// run works in the background until ctx ends; nil: no background work.
	run func(ctx context.Context)
	// collectors are its metrics.
	collectors []prometheus.Collector
}

// outlierSource lists the passive outlier detector: its targets are the
// endpoints by pool, as max_ejection_percent counts per pool.
func outlierSource(o *outlierDetector, r *Router) signalSource {
	return signalSource{
		name: "outlier",
		setWorkers: func(workers []kvfleet.Worker) {
			poolOf := make(map[string]string, len(workers))
			for _, w := range workers {
				poolOf[w.ID.Endpoint] = w.Model
			}
			o.setTargets(poolOf)
		},
		// The router's clock read at each collection: tests move it.
		collectors: []prometheus.Collector{o.ejections, o.responses, outlierCollector{o, func() time.Time { return r.now() }}},
	}
}

// healthSource lists the active health checker: it probes each worker's
// endpoint.
func healthSource(h *healthChecker) signalSource {
	return signalSource{
		name: "health",
		setWorkers: func(workers []kvfleet.Worker) {
			eps := make([]string, 0, len(workers))
			for _, w := range workers {
				eps = append(eps, w.ID.Endpoint)
			}
			h.setTargets(eps)
		},
		run:        h.run,
		collectors: []prometheus.Collector{h.probes, h.failures},
	}
}

// sharedLoadSource lists the replicas' shared load: it publishes this
// replica's bookings and reads the others', whatever the worker set.
func sharedLoadSource(s *sharedLoad) signalSource {
	return signalSource{name: "shared_load", run: s.run, collectors: s.collectors()}
}

// engineMetricsSource lists the engines' /metrics scraper.
func engineMetricsSource(e *enginemetrics.Scraper, log *slog.Logger) signalSource {
	return signalSource{
		name: "engine_metrics",
		setWorkers: func(workers []kvfleet.Worker) {
			if err := e.SetWorkers(workers); err != nil {
				log.Warn("engine metrics targets", "err", err)
			}
		},
		run: e.Run,
	}
}

// runSignals runs every listed source's background work until ctx ends.
func runSignals(ctx context.Context, sources []signalSource) {
	var wg sync.WaitGroup
	for _, s := range sources {
		if s.run != nil {
			wg.Add(1)
			go func() { defer wg.Done(); s.run(ctx) }()
		}
	}
	wg.Wait()
}
