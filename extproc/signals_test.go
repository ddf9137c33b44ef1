package extproc

import (
	"context"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

func signalNames(r *Router) []string {
	var names []string
	for _, s := range r.signals {
		names = append(names, s.name)
	}
	return names
}

// The Router lists the enabled signal sources once; SetMembers hands each
// the worker set, Run runs them and returns when its context ends.
func TestRouterListsItsSignalSources(t *testing.T) {
	r := newRig(t, nil, envoyharness.DefaultConfig())
	if got := signalNames(r.router); !slices.Equal(got, []string{"outlier", "health", "engine_metrics"}) {
		t.Fatalf("default sources %v", got)
	}
	off := newRig(t, func(c *config.Config) {
		c.Extproc.HealthCheck.Disabled, c.Extproc.Outlier.Disabled, c.Extproc.EngineMetrics.Disabled = true, true, true
	}, envoyharness.DefaultConfig())
	if got := signalNames(off.router); len(got) != 0 {
		t.Fatalf("every source disabled, still listed: %v", got)
	}
	off.router.Run(context.Background()) // nothing to run: returns at once

	if got := r.router.engines.Stats().Targets; got != int64(len(workers)) {
		t.Fatalf("engine metrics targets %d at start, want %d", got, len(workers))
	}
	ws := []kvfleet.Worker{{ID: kvfleet.WorkerID{Endpoint: "10.0.0.9:8000"}, Model: "qwen3", Role: kvfleet.RoleBoth},
		{ID: kvfleet.WorkerID{Endpoint: "10.0.0.9:8000", DPRank: 1}, Model: "qwen3", Role: kvfleet.RoleBoth}}
	if err := r.router.SetMembers(ws); err != nil {
		t.Fatal(err)
	}
	r.router.health.mu.Lock()
	_, probed := r.router.health.targets["10.0.0.9:8000"]
	n := len(r.router.health.targets)
	r.router.health.mu.Unlock()
	if !probed || n != 1 {
		t.Errorf("health targets after SetMembers: %d, new endpoint probed %v", n, probed)
	}
	if got := r.router.engines.Stats().Targets; got != 1 {
		t.Errorf("engine metrics targets %d, want one per endpoint (the ranks share its /metrics)", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.router.Run(ctx); close(done) }()
	cancel()
	<-done // every source stopped with its context
}
