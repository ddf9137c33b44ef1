package config

import (
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/confaddr"
)

const good = `
index:
  backend: redis
  redis:
    addrs: ["127.0.0.1:7000", "127.0.0.1:7001"]
    worker_ttl: 10s
indexer:
  listen: 127.0.0.1:0
models:
  - name: qwen3
    block_size: 16
    namespace: tenant-a
    loras: [qwen3-sql]
engines:
  - endpoint: 10.0.0.1:8000
    model: qwen3
    events: tcp://10.0.0.1:5557
    replay: tcp://10.0.0.1:5558
    dp_ranks: 2
`

func TestParseGood(t *testing.T) {
	c, err := Parse(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if c.Index.Redis.WorkerTTL.D() != 10*time.Second || c.Index.Redis.BlockTTL.D() != time.Hour {
		t.Fatalf("durations: %v %v", c.Index.Redis.WorkerTTL.D(), c.Index.Redis.BlockTTL.D())
	}
	if c.Engines[0].DPRanks != 2 || c.Model("qwen3").BlockSize != 16 || c.Model("qwen3-sql") != nil {
		t.Fatalf("unexpected %+v", c)
	}
	ep, port, err := confaddr.ZMQEndpoint(c.Engines[0].Events, 1)
	if err != nil || ep != "tcp://10.0.0.1:5558" || port != 5558 {
		t.Fatalf("rank 1 endpoint = %q %d %v", ep, port, err)
	}
}

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Index.Backend != "memory" {
		t.Fatalf("default backend %q", c.Index.Backend)
	}
	empty, err := Parse(strings.NewReader(""))
	if err != nil || empty.Index.Backend != "memory" {
		t.Fatalf("empty document: %v %+v", err, empty)
	}
}

func TestParseErrorsNameThePath(t *testing.T) {
	cases := map[string]string{
		"index: {backend: etcd}":                                       "index.backend",
		"index: {backend: redis}":                                      "index.redis.addrs",
		"index: {backend: redis, redis: {addrs: [x]}}":                 "index.redis.addrs[0]",
		"index: {bakend: memory}":                                      "index.bakend: unknown key (did you mean backend?)",
		"index: {redis: {worker_ttl: soon}}":                           "bad duration",
		"models: [{name: m, block_size: 0}]":                           "models[0].block_size",
		"models: [{name: m, block_size: 4}, {name: m, block_size: 4}]": "models[1].name",
		"models: [{name: m, block_size: 4}]\nengines: [{endpoint: '10.0.0.1:1', model: n, events: 'tcp://a:2'}]": "engines[0].model",
		"models: [{name: m, block_size: 4}]\nengines: [{endpoint: '10.0.0.1:1', model: m, events: 'udp://a:2'}]": "engines[0].events",
		"models: [{name: m, block_size: 4}]\nengines: [{endpoint: 'a', model: m, events: 'tcp://a:2'}]":          "engines[0].endpoint",
		"index: {backend: redis, redis: {addrs: ['a:1'], password_env: KVGATE_NO_SUCH_VAR}}":                     "password_env",
		"indexer: {listen: nowhere}": "indexer.listen",
		"models: [{name: m, block_size: 4}]\nengines: [{endpoint: '10.0.0.1:1', model: m, events: 'tcp://a:2', kind: tgi}]": "engines[0].kind",
	}
	for in, want := range cases {
		_, err := Parse(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to mention %q", in, err, want)
		}
	}
}

func TestParseRejectsHugeFile(t *testing.T) {
	_, err := Parse(strings.NewReader(strings.Repeat("#", MaxFileBytes+1)))
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("got %v", err)
	}
}

// FuzzParse: arbitrary files never crash the loader, and whatever loads validates.
func FuzzParse(f *testing.F) {
	f.Add(good)
	f.Add("index: {backend: memory}")
	f.Add("engines: [{}]")
	f.Fuzz(func(t *testing.T, in string) {
		c, err := Parse(strings.NewReader(in))
		if err == nil {
			if verr := c.Validate(); verr != nil {
				t.Fatalf("Parse accepted an invalid config: %v", verr)
			}
		}
	})
}

// engines[].kind reaches the fleet's workers, which pick the event format
// by it.
func TestEngineKindReachesTheWorkers(t *testing.T) {
	c, err := Parse(strings.NewReader("models: [{name: m, block_size: 4}]\nengines:\n" +
		"  - {endpoint: '10.0.0.1:1', model: m, events: 'tcp://10.0.0.1:2', kind: trtllm, dp_ranks: 2}\n" +
		"  - {endpoint: '10.0.0.2:1', model: m, events: 'tcp://10.0.0.2:2'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ws, err := c.Workers()
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 3 || ws[0].Kind != "trtllm" || ws[1].Kind != "trtllm" || ws[2].Kind != "" {
		t.Fatalf("workers %+v: want both ranks of the first engine trtllm, the second engine default", ws)
	}
}
