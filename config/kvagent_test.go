package config

import (
	"strings"
	"testing"
)

// engines[].tier_events / tier_replay: the kvagent stream of an engine
// (the indexer's side of the kvagent; the kvagent section itself is
// tested in kvagent/agentconfig).
func TestEngineTierEvents(t *testing.T) {
	base := `models: [{name: m, block_size: 16}]
engines:
  - endpoint: 10.0.0.1:8000
    model: m
    events: tcp://10.0.0.1:5557
`
	if _, err := Parse(strings.NewReader(base + "    tier_events: tcp://10.0.0.1:5600\n    tier_replay: tcp://10.0.0.1:5601\n")); err != nil {
		t.Fatal(err)
	}
	for extra, want := range map[string]string{
		"    tier_replay: tcp://10.0.0.1:5601\n":                   "engines[0].tier_replay: set without tier_events",
		"    tier_events: udp://10.0.0.1:5600\n":                   "engines[0].tier_events:",
		"    tier_events: tcp://10.0.0.1:5557\n":                   "engines[0].tier_events: same endpoint as events",
		"    tier_events: tcp://10.0.0.1:65535\n    dp_ranks: 2\n": "engines[0].tier_events:",
	} {
		if _, err := Parse(strings.NewReader(base + extra)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", extra, err, want)
		}
	}
}
