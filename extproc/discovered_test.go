package extproc

import (
	"context"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

// reportOnce is a discovery.Source that reports one worker set, then waits.
type reportOnce []kvfleet.Worker

func (s reportOnce) Run(ctx context.Context, onChange func([]kvfleet.Worker)) error {
	onChange(slices.Clone(s))
	<-ctx.Done()
	return nil
}

// Discovered workers reach the router and the indexer's subscriptions in
// the one shape, unconverted: DP ranks with their own event ports, roles
// and draining kept.
func TestFollowDiscovery(t *testing.T) {
	cfg := config.Config{Engines: []config.Engine{
		{Endpoint: "10.0.0.1:8000", Model: "qwen3", DPRanks: 2, Role: "prefill", Events: "tcp://10.0.0.1:5557", Replay: "tcp://10.0.0.1:5600"},
		{Endpoint: "10.0.0.2:8000", Model: "qwen3", DPRanks: 1, Draining: true},
	}}
	ws, err := cfg.Workers()
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, nil, defaultHarnessConfig())
	var got []kvfleet.Worker
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- FollowDiscovery(ctx, reportOnce(ws), r.router, func(_ context.Context, w []kvfleet.Worker) error {
			got = w
			cancel()
			return nil
		}, r.router.log)
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ws) {
		t.Fatalf("workers for the indexer:\n got %+v\nwant %+v", got, ws)
	}
	pw := r.router.fleet.Load().pools["qwen3"].workers
	ids := make([]kvfleet.WorkerID, 0, len(pw))
	for _, w := range pw {
		ids = append(ids, w.ID)
	}
	want := []kvfleet.WorkerID{{Endpoint: "10.0.0.1:8000"}, {Endpoint: "10.0.0.1:8000", DPRank: 1}, {Endpoint: "10.0.0.2:8000"}}
	if !slices.Equal(ids, want) || pw[0].Role != picker.RolePrefill || !pw[2].Draining || pw[1].Endpoint != "10.0.0.1:8000" {
		t.Fatalf("router members %+v", pw)
	}
	if !r.router.fleet.Load().pools["qwen3"].approx[kvfleet.WorkerID{Endpoint: "10.0.0.2:8000"}] {
		t.Fatal("a worker without KV events must be routed in approximate mode")
	}
	if r.router.fleet.Load().pools["qwen3"].approx[kvfleet.WorkerID{Endpoint: "10.0.0.1:8000", DPRank: 1}] {
		t.Fatal("a worker with KV events must be routed on the index")
	}
}
