package extproc

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/prometheus/client_golang/prometheus"
)

// healthChecker probes every engine's health endpoint (vLLM: GET /health)
// and marks an engine unhealthy after UnhealthyAfter failures in a row, so
// that a dead engine stops receiving requests within about
// Interval × UnhealthyAfter even when nothing else tells kvgate it died. One
// success makes it healthy again.
type healthChecker struct {
	cfg    extprocconfig.HealthCheck
	client *http.Client

	mu      sync.Mutex
	targets map[string]*healthState // by endpoint ip:port
	// onRecover, if set, hears of an endpoint passing a probe after being
	// marked unhealthy (outlier detection slow-starts it).
	onRecover func(endpoint string)

	probes, failures *prometheus.CounterVec
}

type healthState struct {
	failures  int
	unhealthy atomic.Bool
}

func newHealthChecker(cfg extprocconfig.HealthCheck) *healthChecker {
	return &healthChecker{
		cfg:     cfg,
		client:  &http.Client{Timeout: cfg.Timeout.D()},
		targets: map[string]*healthState{},
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_extproc_health_probes_total",
			Help: "Engine health probes by result (ok, failed)."}, []string{"result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_extproc_worker_marked_unhealthy_total",
			Help: "Times an engine was marked unhealthy after consecutive failed probes."}, []string{"endpoint"}),
	}
}

// setTargets replaces the probed endpoints, keeping the state of those
// that stay.
func (h *healthChecker) setTargets(endpoints []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	next := make(map[string]*healthState, len(endpoints))
	for _, e := range endpoints {
		if s, ok := h.targets[e]; ok {
			next[e] = s
		} else {
			next[e] = &healthState{}
		}
	}
	h.targets = next
}

// healthy reports whether an endpoint may receive requests; unknown
// endpoints are healthy until probed.
func (h *healthChecker) healthy(endpoint string) bool {
	if h == nil {
		return true
	}
	h.mu.Lock()
	s := h.targets[endpoint]
	h.mu.Unlock()
	return s == nil || !s.unhealthy.Load()
}

// run probes all targets every interval until ctx ends.
func (h *healthChecker) run(ctx context.Context) {
	t := time.NewTicker(h.cfg.Interval.D())
	defer t.Stop()
	for {
		h.probeAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *healthChecker) probeAll(ctx context.Context) {
	h.mu.Lock()
	targets := make(map[string]*healthState, len(h.targets))
	for e, s := range h.targets {
		targets[e] = s
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for e, s := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := h.probe(ctx, e)
			if ctx.Err() != nil {
				return
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if ok {
				h.probes.WithLabelValues("ok").Inc()
				s.failures = 0
				if s.unhealthy.Swap(false) && h.onRecover != nil {
					h.onRecover(e)
				}
				return
			}
			h.probes.WithLabelValues("failed").Inc()
			s.failures++
			if s.failures >= h.cfg.UnhealthyAfter && !s.unhealthy.Load() {
				s.unhealthy.Store(true)
				h.failures.WithLabelValues(e).Inc()
			}
		}()
	}
	wg.Wait()
}

func (h *healthChecker) probe(ctx context.Context, endpoint string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+endpoint+h.cfg.Path, nil)
	if err != nil {
		return false
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
