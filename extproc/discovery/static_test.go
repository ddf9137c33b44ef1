package discovery

import (
	"context"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/internal/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

func TestStaticExpandsDPRanks(t *testing.T) {
	src, err := Static([]config.Engine{
		{Endpoint: "10.0.0.2:8000", Model: "m", Events: "tcp://10.0.0.2:5557", Replay: "tcp://10.0.0.2:5600", DPRanks: 2, Role: "prefill"},
		{Endpoint: "10.0.0.1:8000", Model: "m", DPRanks: 1, Role: "", Draining: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Worker{
		{ID: kvfleet.WorkerID{Endpoint: "10.0.0.1:8000"}, Endpoint: "10.0.0.1:8000", Model: "m", Role: picker.RoleBoth, Draining: true},
		{ID: kvfleet.WorkerID{Endpoint: "10.0.0.2:8000"}, Endpoint: "10.0.0.2:8000", Model: "m", Role: picker.RolePrefill,
			Events: "tcp://10.0.0.2:5557", Replay: "tcp://10.0.0.2:5600"},
		{ID: kvfleet.WorkerID{Endpoint: "10.0.0.2:8000", DPRank: 1}, Endpoint: "10.0.0.2:8000", Model: "m", Role: picker.RolePrefill,
			Events: "tcp://10.0.0.2:5558", Replay: "tcp://10.0.0.2:5601"},
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	done := make(chan error)
	go func() {
		done <- src.Run(ctx, func(ws []Worker) {
			calls++
			if !slices.Equal(ws, want) {
				t.Errorf("workers:\n got %+v\nwant %+v", ws, want)
			}
		})
	}()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if calls != 1 {
		t.Fatalf("onChange called %d times, want 1", calls)
	}
}

func TestStaticRejectsBadInput(t *testing.T) {
	for name, e := range map[string]config.Engine{
		"role":      {Endpoint: "a:1", Model: "m", Role: "router"},
		"events":    {Endpoint: "a:1", Model: "m", Events: "http://a:1"},
		"port+rank": {Endpoint: "a:1", Model: "m", Events: "tcp://a:65535", DPRanks: 2},
		"replay":    {Endpoint: "a:1", Model: "m", Events: "tcp://a:1", Replay: "tcp://a"},
		"no model":  {Endpoint: "a:1"},
		"ranks":     {Endpoint: "a:1", Model: "m", DPRanks: 5000},
	} {
		if _, err := Static([]config.Engine{e}); err == nil {
			t.Errorf("%s: accepted %+v", name, e)
		}
	}
	dup := config.Engine{Endpoint: "a:1", Model: "m"}
	if _, err := Static([]config.Engine{dup, dup}); err == nil {
		t.Error("duplicate engine accepted")
	}
}
