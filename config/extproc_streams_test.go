package config

import (
	"strings"
	"testing"
)

func TestFallbacksDefaultFollowsEnvoyRouting(t *testing.T) {
	for doc, want := range map[string]int{
		"":                                       2, // override_host, unset
		"extproc: {fallbacks: 0}":                0, // an explicit 0 stays 0
		"extproc: {fallbacks: 3}":                3,
		"extproc: {envoy_routing: original_dst}": 0,
	} {
		c, err := Parse(strings.NewReader(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if c.Extproc.Fallbacks != want {
			t.Errorf("%q: fallbacks %d, want %d", doc, c.Extproc.Fallbacks, want)
		}
	}
}

func TestExtprocEnvoyKeysValidated(t *testing.T) {
	for doc, want := range map[string]string{
		"extproc: {envoy_routing: original_dst, fallbacks: 2}":                                                                 "extproc.fallbacks: must be 0 with extproc.envoy_routing original_dst",
		"extproc: {envoy_routing: maglev}":                                                                                     `extproc.envoy_routing: "maglev" is not one of override_host, original_dst`,
		"extproc: {streams: {buffer_budget_bytes: 1024}}":                                                                      "extproc.streams.buffer_budget_bytes: 1024 is below extproc.max_body_bytes",
		"extproc: {streams: {request_idle_timeout: 1ms}}":                                                                      "extproc.streams.request_idle_timeout: must be at least 100ms",
		"extproc: {streams: {request_idle_timeout: 10s, request_timeout: 5s}}":                                                 "extproc.streams.request_timeout: must be at least request_idle_timeout",
		"extproc: {streams: {max_open: -1}}":                                                                                   "extproc.streams.max_open",
		"extproc: {grpc: {keepalive_min_time: 10ms}}":                                                                          "extproc.grpc.keepalive_min_time: must be at least 1s",
		"extproc: {drain_grace: 1h}":                                                                                           "extproc.drain_grace: must be at most 10m",
		"models: [{name: m, block_size: 4}]\nengines: [{endpoint: 'localhost:8001', model: m}]":                                `engines[0].endpoint: "localhost:8001": want a literal ip:port; "localhost" is not an IP address`,
		"models: [{name: m, block_size: 4}]\nengines: [{endpoint: '[fe80::1%eth0]:80', model: m}]":                             "engines[0].endpoint",
		"models: [{name: m, block_size: 4}]\nengines: [{endpoint: '[::1]:80', model: m}, {endpoint: '[0:0::1]:80', model: m}]": "engines[1].endpoint: duplicate engine [::1]:80",
	} {
		_, err := Parse(strings.NewReader(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to contain %q", doc, err, want)
		}
	}
}

// Engine endpoints are stored as Envoy spells them.
func TestEngineEndpointsCanonical(t *testing.T) {
	c, err := Parse(strings.NewReader("models: [{name: m, block_size: 4}]\nengines: [{endpoint: '[0:0:0:0:0:0:0:1]:8000', model: m}, {endpoint: '[FD00::B]:8000', model: m}]"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Engines[0].Endpoint != "[::1]:8000" || c.Engines[1].Endpoint != "[fd00::b]:8000" {
		t.Errorf("endpoints %q %q", c.Engines[0].Endpoint, c.Engines[1].Endpoint)
	}
}

func TestStreamDefaultsFitTheBody(t *testing.T) {
	c := Default()
	s := c.Extproc.Streams
	if s.BufferBudgetBytes != 64<<20 || s.MaxOpen != 4096 || s.RequestIdleTimeout.D().String() != "30s" || c.Extproc.GRPC.MaxConcurrentStreams != 1000 {
		t.Errorf("defaults %+v %+v", s, c.Extproc.GRPC)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
