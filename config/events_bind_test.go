package config

import (
	"strings"
	"testing"
)

const bindBase = `
models: [{name: m, block_size: 16}]
`

// Bind mode's keys: every mistake names its key path, and a bound socket
// off loopback needs an allow list (secure by default).
func TestEventsBindValidation(t *testing.T) {
	good := []string{
		bindBase + `indexer: {events_bind: "tcp://127.0.0.1:5557"}
engines: [{endpoint: "10.0.0.1:8000", model: m, events: bind, topic: "kv@10.0.0.1@m", replay: "tcp://10.0.0.1:5558"}]`,
		bindBase + `indexer: {events_bind: "tcp://0.0.0.0:5557", events_bind_allow: ["10.0.0.0/24", "192.168.1.7"]}
engines: [{endpoint: "10.0.0.1:8000", model: m, events: bind, topic: a, dp_ranks: 2}, {endpoint: "10.0.0.2:8000", model: m, events: bind, topic: b}]`,
	}
	for _, y := range good {
		c, err := Parse(strings.NewReader(y))
		if err != nil {
			t.Fatalf("%s\n-> %v", y, err)
		}
		if _, err := c.Indexer.EventsBindAllowPrefixes(); err != nil {
			t.Fatal(err)
		}
	}
	bad := []struct{ yaml, want string }{
		{bindBase + `engines: [{endpoint: "10.0.0.1:8000", model: m, events: bind, topic: a}]`, `engines[0].events: "bind" needs indexer.events_bind`},
		{bindBase + `indexer: {events_bind: "tcp://127.0.0.1:5557"}
engines: [{endpoint: "10.0.0.1:8000", model: m, events: bind}]`, "engines[0].topic: required"},
		{bindBase + `indexer: {events_bind: "tcp://127.0.0.1:5557"}
engines: [{endpoint: "10.0.0.1:8000", model: m, events: bind, topic: a}, {endpoint: "10.0.0.2:8000", model: m, events: bind, topic: a}]`, `engines[1].topic: "a" is also engines[0]'s`},
		{bindBase + `indexer: {events_bind: "tcp://0.0.0.0:5557"}`, "indexer.events_bind: \"tcp://0.0.0.0:5557\" listens beyond loopback"},
		{bindBase + `indexer: {events_bind: "udp://127.0.0.1:5557"}`, "indexer.events_bind: \"udp://127.0.0.1:5557\": want tcp://host:port"},
		{bindBase + `indexer: {events_bind: "tcp://127.0.0.1:5557", events_bind_allow: ["10.0.0.0/33"]}`, "indexer.events_bind_allow[0]"},
		{bindBase + `indexer: {events_bind_allow: ["10.0.0.0/8"]}`, "indexer.events_bind_allow: set without indexer.events_bind"},
		{bindBase + `indexer: {events_bind: "tcp://127.0.0.1:65535"}
engines: [{endpoint: "10.0.0.1:8000", model: m, events: bind, topic: a, dp_ranks: 2}]`, "engines[0].dp_ranks: indexer.events_bind plus rank 1"},
	}
	for _, c := range bad {
		_, err := Parse(strings.NewReader(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s\n-> %v, want %q", c.yaml, err, c.want)
		}
	}
}
