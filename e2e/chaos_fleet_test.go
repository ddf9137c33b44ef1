package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/procs"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// Chaos tests (issue 9 item 5) kill real processes under a steady stream
// of requests. This file starts the fleet they break: engines, one or more
// extproc replicas behind a gateway that fails over between them as Envoy
// does between the hosts of an ext_proc cluster, and with the Redis
// backend a separate `kvgate indexer`.

type chaosOptions struct {
	engines  int
	replicas int // extproc processes (default 1)
	// redisAddrs selects the Redis backend (cluster when more than one);
	// empty keeps the index in the extproc's memory.
	redisAddrs []string
	// engineDeadAfter is indexer.engine_dead_after: the bound on how long
	// a dead engine's entries may stay in the index.
	engineDeadAfter time.Duration
	// indexTimeout bounds one index match; a failed or slow match routes
	// on load alone and counts kvgate_extproc_index_errors_total.
	indexTimeout time.Duration
	speedup      string
	// eventsVia, when set, gives the KV-event endpoint the config names
	// for engine i (a proxy in front of e.events).
	eventsVia func(i int, e *engine) string
}

// chaosSlowStart is extproc.outlier.slow_start in the chaos fleets.
const chaosSlowStart = 3 * time.Second

type chaosFleet struct {
	*fleet
	opts    chaosOptions
	tokDir  string
	admins  []string // per extproc replica
	listens []string
	procs   []*procs.Proc // per extproc replica
}

func startChaosFleet(t *testing.T, o chaosOptions) *chaosFleet {
	t.Helper()
	if o.replicas == 0 {
		o.replicas = 1
	}
	if o.speedup == "" {
		o.speedup = speedup
	}
	tokDir, err := modelfiles.Model(modelName)
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	cf := &chaosFleet{fleet: &fleet{t: t}, opts: o, tokDir: tokDir}
	var engs []map[string]any
	for i := range o.engines {
		e := cf.startEngineAt(t, i, nil)
		cf.engines = append(cf.engines, e)
		events := e.events
		if o.eventsVia != nil {
			events = o.eventsVia(i, e)
		}
		engs = append(engs, map[string]any{"endpoint": e.endpoint, "model": modelName, "events": events, "replay": e.replay})
	}
	indexer := map[string]any{"engine_dead_after": o.engineDeadAfter.String()}
	extproc := map[string]any{
		"health_check":  map[string]any{"interval": "200ms", "timeout": "1s", "unhealthy_after": 2},
		"index_timeout": o.indexTimeout.String(),
		// A recovered engine ramps up over slow_start (default 30s, as
		// Envoy's); shortened so a test sees the whole ramp.
		// base_ejection_time likewise (default 30s): kvgate keeps an
		// engine ejected for it even once active health checks pass again.
		"outlier": map[string]any{"slow_start": chaosSlowStart.String(), "base_ejection_time": chaosSlowStart.String()},
		// The tests read each decision from x-kvgate-debug (off by default).
		"debug_header": map[string]any{"allow_any_client": true},
	}
	cfg := map[string]any{
		"models":  []map[string]any{{"name": modelName, "block_size": blockSize, "tokenizer": tokDir}},
		"engines": engs,
		"extproc": extproc,
		"indexer": indexer,
	}
	if len(o.redisAddrs) > 0 {
		cf.registryLag = time.Second
		cfg["index"] = map[string]any{"backend": "redis", "redis": map[string]any{
			"addrs": o.redisAddrs, "cluster": len(o.redisAddrs) > 1, "prefix": "chaos:", "worker_ttl": "2s"}}
	}
	cf.cfgPath = filepath.Join(t.TempDir(), "kvgate.yaml")
	ctx, cancel := context.WithTimeout(context.Background(), 2*readyTimeout)
	defer cancel()
	if len(o.redisAddrs) > 0 {
		for attempt := 1; ; attempt++ {
			at, err := freeport.Addr()
			if err != nil {
				t.Fatal(err)
			}
			indexer["listen"] = at
			writeConfig(t, cf.cfgPath, cfg)
			cf.indexerAt = at
			if cf.indexer = cf.startIndexer(ctx); cf.indexer != nil {
				break
			}
			if attempt == startAttempts {
				t.Fatal("indexer did not start")
			}
		}
	} else {
		writeConfig(t, cf.cfgPath, cfg)
	}
	for r := range o.replicas {
		for attempt := 1; ; attempt++ {
			listen, err1 := freeport.Addr()
			admin, err2 := freeport.Addr()
			if err := firstErr(err1, err2); err != nil {
				t.Fatal(err)
			}
			p := procs.Start(t, fmt.Sprintf("extproc%d", r), kvgateBin, "extproc", "--config", cf.cfgPath, "--listen", listen, "--admin", admin, "--drain", "2s")
			err := p.WaitHTTP(ctx, "http://"+admin+"/readyz")
			if err == nil {
				cf.admins, cf.listens, cf.procs = append(cf.admins, admin), append(cf.listens, listen), append(cf.procs, p)
				break
			}
			if attempt == startAttempts {
				t.Fatalf("extproc %d: %v", r, err)
			}
			p.Stop()
		}
	}
	cf.extproc, cf.admin = cf.procs[0], cf.admins[0]
	var workers []string
	for _, e := range cf.engines {
		workers = append(workers, e.endpoint)
	}
	// envoy.yaml's ext_proc cluster: round robin over the replicas its
	// gRPC health check passes, as Envoy spreads streams.
	_, cf.gateway = debugGateway(t, "envoy.yaml", envoyharness.ProxyOptions{ExtProc: cf.listens, Workers: workers})
	return cf
}

// startEngineAt starts engine i; with prev set it restarts that engine on
// the same ports (its identity and the addresses in the config).
func (cf *chaosFleet) startEngineAt(t *testing.T, i int, prev *engine) *engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		e := prev
		if e == nil {
			http, err1 := freeport.Addr()
			ev, err2 := freeport.Addr()
			rep, err3 := freeport.Addr()
			if err := firstErr(err1, err2, err3); err != nil {
				t.Fatal(err)
			}
			e = &engine{endpoint: http, events: "tcp://" + ev, replay: "tcp://" + rep}
		}
		e.proc = procs.Start(t, fmt.Sprintf("engine%d", i), labBin, "enginesim",
			"--listen", e.endpoint, "--model", modelName, "--tokenizer", cf.tokDir,
			"--block-size", strconv.Itoa(blockSize), "--gpu-blocks", "8192", "--speedup", cf.opts.speedup,
			"--kv-events-endpoint", e.events, "--kv-events-replay", e.replay,
			"--seed", strconv.Itoa(i+1), "--drain", "2s")
		err := e.proc.WaitHTTP(ctx, "http://"+e.endpoint+"/health")
		if err == nil {
			return e
		}
		// A restart reuses its ports: a socket in TIME_WAIT does not stop
		// a listener (Go sets SO_REUSEADDR), so failing here is real.
		if prev != nil || attempt == startAttempts || ctx.Err() != nil {
			t.Fatalf("engine %d: %v", i, err)
		}
	}
}
