package extproc

import (
	"context"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/discovery"
	"github.com/kvgate/kvgate/internal/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

// Discovered workers reach the router and the indexer's engine list in the
// shapes they expect: DP ranks regrouped per endpoint with rank 0's event
// ports, roles and draining kept.
func TestFollowDiscovery(t *testing.T) {
	engines := []config.Engine{
		{Endpoint: "10.0.0.1:8000", Model: "qwen3", DPRanks: 2, Role: "prefill", Events: "tcp://10.0.0.1:5557", Replay: "tcp://10.0.0.1:5600"},
		{Endpoint: "10.0.0.2:8000", Model: "qwen3", DPRanks: 1, Draining: true},
	}
	src, err := discovery.Static(engines)
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, nil, defaultHarnessConfig())
	var got []config.Engine
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- FollowDiscovery(ctx, src, r.router, func(_ context.Context, e []config.Engine) error {
			got = e
			cancel()
			return nil
		}, r.router.log)
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].DPRanks != 2 || got[0].Events != "tcp://10.0.0.1:5557" || got[0].Replay != "tcp://10.0.0.1:5600" || got[0].Role != "prefill" || !got[1].Draining || got[1].Events != "" {
		t.Fatalf("engines for the indexer: %+v", got)
	}
	ws := r.router.fleet.Load().pools["qwen3"].workers
	ids := make([]kvfleet.WorkerID, 0, len(ws))
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	want := []kvfleet.WorkerID{{Endpoint: "10.0.0.1:8000"}, {Endpoint: "10.0.0.1:8000", DPRank: 1}, {Endpoint: "10.0.0.2:8000"}}
	if !slices.Equal(ids, want) || ws[0].Role != picker.RolePrefill || !ws[2].Draining {
		t.Fatalf("router members %+v", ws)
	}
	if !r.router.fleet.Load().pools["qwen3"].approx[kvfleet.WorkerID{Endpoint: "10.0.0.2:8000"}] {
		t.Fatal("a worker without KV events must be routed in approximate mode")
	}
}
