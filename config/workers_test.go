package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// The engines list expands into one worker per data-parallel rank, in the
// file's order, rank r's endpoints at rank 0's port + r (vLLM's offset).
// (Moved from discovery.Static's test when Static, a second copy of this
// conversion, was deleted: issue 18.)
func TestWorkersExpandDPRanks(t *testing.T) {
	c, err := Parse(strings.NewReader(`
models: [{name: m, block_size: 16}]
engines:
  - {endpoint: "10.0.0.2:8000", model: m, events: "tcp://10.0.0.2:5557", replay: "tcp://10.0.0.2:5600", dp_ranks: 2, role: prefill,
     tier_events: "tcp://10.0.0.2:6557", tier_replay: "tcp://10.0.0.2:6600"}
  - {endpoint: "10.0.0.1:8000", model: m, draining: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Workers()
	if err != nil {
		t.Fatal(err)
	}
	want := []kvfleet.Worker{
		{ID: kvfleet.WorkerID{Endpoint: "10.0.0.2:8000"}, Model: "m", Role: kvfleet.RolePrefill,
			Events: "tcp://10.0.0.2:5557", Replay: "tcp://10.0.0.2:5600", TierEvents: "tcp://10.0.0.2:6557", TierReplay: "tcp://10.0.0.2:6600"},
		{ID: kvfleet.WorkerID{Endpoint: "10.0.0.2:8000", DPRank: 1}, Model: "m", Role: kvfleet.RolePrefill,
			Events: "tcp://10.0.0.2:5558", Replay: "tcp://10.0.0.2:5601", TierEvents: "tcp://10.0.0.2:6558", TierReplay: "tcp://10.0.0.2:6601"},
		{ID: kvfleet.WorkerID{Endpoint: "10.0.0.1:8000"}, Model: "m", Role: kvfleet.RoleBoth, Draining: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("workers:\n got %+v\nwant %+v", got, want)
	}
	if !got[2].Approximate() || got[0].Approximate() {
		t.Error("approximate is: no KV events")
	}
}

// A bind-mode engine's workers keep events "bind" (the indexer offsets its
// own bound port per rank) and their topic.
func TestWorkersBindMode(t *testing.T) {
	c, err := Parse(strings.NewReader(`
indexer: {events_bind: "tcp://127.0.0.1:5557"}
models: [{name: m, block_size: 16}]
engines: [{endpoint: "10.0.0.1:8000", model: m, events: bind, topic: kv@a, dp_ranks: 2}]
`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Workers()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Events != kvfleet.EventsBindMode || got[1].Topic != "kv@a" || got[1].ID.DPRank != 1 {
		t.Fatalf("workers %+v", got)
	}
}

// What discovery.Static refused is refused by the file's validation, or,
// for a rank whose offset port leaves the range, by Workers.
func TestWorkersRejectBadEngines(t *testing.T) {
	for name, e := range map[string]string{
		"role":      `{endpoint: "10.0.0.1:1", model: m, role: router}`,
		"events":    `{endpoint: "10.0.0.1:1", model: m, events: "http://a:1"}`,
		"replay":    `{endpoint: "10.0.0.1:1", model: m, events: "tcp://a:1", replay: "tcp://a"}`,
		"no model":  `{endpoint: "10.0.0.1:1"}`,
		"ranks":     `{endpoint: "10.0.0.1:1", model: m, dp_ranks: 5000}`,
		"duplicate": `{endpoint: "10.0.0.1:1", model: m}, {endpoint: "10.0.0.1:1", model: m}`,
	} {
		doc := "models: [{name: m, block_size: 16}]\nengines: [" + e + "]\n"
		if _, err := Parse(strings.NewReader(doc)); err == nil {
			t.Errorf("%s: accepted %s", name, e)
		}
	}
	c, err := Parse(strings.NewReader(`
models: [{name: m, block_size: 16}]
engines: [{endpoint: "10.0.0.1:1", model: m, events: "tcp://a:65535", dp_ranks: 2}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Workers(); err == nil || !strings.Contains(err.Error(), "engines[0].events: rank 1") {
		t.Errorf("port+rank past 65535: err %v", err)
	}
}
