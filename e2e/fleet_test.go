package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/procs"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// kvgateBin (the production processes) and labBin (the workshop's
// simulated engines) are the binaries TestMain built for this run.
var kvgateBin, labBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kvgate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	kvgateBin, err = procs.Build(dir, "kvgate")
	if err == nil {
		labBin, err = procs.Build(dir, "kvgate-lab")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const (
	modelName = "qwen3"
	blockSize = 16
	// speedup divides the simulated GPU step times: requests finish in
	// milliseconds, yet a 20k-token stream still runs for seconds.
	speedup = "10"
	// startAttempts bounds retries when a port picked free was taken
	// before the process bound it.
	startAttempts = 4
	readyTimeout  = 30 * time.Second
)

type engine struct {
	endpoint string // HTTP host:port = the worker's identity
	events   string
	replay   string
	proc     *procs.Proc
}

type fleetOptions struct {
	engines int
	// redisAddrs selects the Redis backend with a separate `kvgate
	// indexer` process; empty means the memory index inside the extproc.
	redisAddrs []string
	workerTTL  time.Duration
	// extproc overrides keys of the extproc section (the attack tests
	// restore the defaults the other tests relax).
	extproc map[string]any
}

type fleet struct {
	t         *testing.T
	engines   []*engine
	cfgPath   string
	extproc   *procs.Proc
	listen    string // extproc ext_proc gRPC host:port
	admin     string // extproc admin host:port
	indexer   *procs.Proc
	indexerAt string // indexer host:port (Redis variant)
	gateway   string // base URL of the gateway playing Envoy
	// registryLag is how long after the indexer stores a new worker's
	// blocks the extproc may still match on an older snapshot of the Redis
	// worker registry (index.RedisConfig.RegistryStaleness: WorkerTTL/4
	// capped at 250ms), with margin for a loaded machine.
	registryLag time.Duration
}

// startFleet starts the engines, the extproc (and with Redis the indexer)
// as real processes and a gateway in the test process that plays Envoy's
// side of ext_proc and forwards to the chosen engine.
func startFleet(t *testing.T, o fleetOptions) *fleet {
	t.Helper()
	tokDir, err := modelfiles.Model(modelName)
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	f := &fleet{t: t}
	for i := range o.engines {
		f.engines = append(f.engines, startEngine(t, i, tokDir))
	}
	// The file is written as an operator would write it (durations as
	// strings), then checked by the strict parser in writeConfig.
	var engines []map[string]any
	for _, e := range f.engines {
		engines = append(engines, map[string]any{"endpoint": e.endpoint, "model": modelName, "events": e.events, "replay": e.replay})
	}
	extproc := map[string]any{
		"health_check": map[string]any{"interval": "200ms", "timeout": "1s", "unhealthy_after": 2},
		// Generous: on a loaded CI machine a Redis Cluster match can
		// exceed the 50ms default, and the request would be routed on
		// load alone (correct behaviour, but not what these tests check).
		"index_timeout": "2s",
		// The tests read each decision from x-kvgate-debug (off by default).
		"debug_header": map[string]any{"allow_any_client": true},
	}
	for k, v := range o.extproc {
		extproc[k] = v
	}
	indexer := map[string]any{}
	cfg := map[string]any{
		"models":  []map[string]any{{"name": modelName, "block_size": blockSize, "tokenizer": tokDir}},
		"engines": engines,
		"extproc": extproc,
		"indexer": indexer,
	}
	if len(o.redisAddrs) > 0 {
		f.registryLag = time.Second
		cfg["index"] = map[string]any{"backend": "redis", "redis": map[string]any{
			"addrs": o.redisAddrs, "cluster": len(o.redisAddrs) > 1, "prefix": "e2e:", "worker_ttl": o.workerTTL.String()}}
	}
	dir := t.TempDir()
	f.cfgPath = filepath.Join(dir, "kvgate.yaml")
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		listen, err1 := freeport.Addr()
		admin, err2 := freeport.Addr()
		idxAt, err3 := freeport.Addr()
		if err := firstErr(err1, err2, err3); err != nil {
			t.Fatal(err)
		}
		extproc["listen"], extproc["admin"], indexer["listen"] = listen, admin, idxAt
		writeConfig(t, f.cfgPath, cfg)
		if len(o.redisAddrs) > 0 {
			f.indexerAt = idxAt
			f.indexer = f.startIndexer(ctx)
			if f.indexer == nil {
				continue
			}
		}
		p := procs.Start(t, "extproc", kvgateBin, "extproc", "--config", f.cfgPath, "--drain", "2s")
		err := p.WaitHTTP(ctx, "http://"+admin+"/readyz")
		if err == nil {
			f.extproc, f.listen, f.admin = p, listen, admin
			break
		}
		if attempt == startAttempts || ctx.Err() != nil {
			t.Fatalf("extproc: %v", err)
		}
		if f.indexer != nil {
			f.indexer.Stop()
		}
	}
	var workers []string
	for _, e := range f.engines {
		workers = append(workers, e.endpoint)
	}
	_, f.gateway = debugGateway(t, "envoy.yaml", envoyharness.ProxyOptions{ExtProc: []string{extproc["listen"].(string)}, Workers: workers})
	return f
}

// startIndexer starts `kvgate indexer` on the config's indexer.listen; nil
// when it exited before ready (its port was taken: the caller retries).
func (f *fleet) startIndexer(ctx context.Context) *procs.Proc {
	f.t.Helper()
	p := procs.Start(f.t, "indexer", kvgateBin, "indexer", "--config", f.cfgPath)
	if err := p.WaitHTTP(ctx, "http://"+f.indexerAt+"/readyz"); err != nil {
		select {
		case <-p.Exited():
			f.t.Logf("indexer did not start, retrying: %v", err)
			return nil
		default:
			f.t.Fatalf("indexer: %v", err)
		}
	}
	return p
}

func startEngine(t *testing.T, i int, tokDir string) *engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		http, err1 := freeport.Addr()
		ev, err2 := freeport.Addr()
		rep, err3 := freeport.Addr()
		if err := firstErr(err1, err2, err3); err != nil {
			t.Fatal(err)
		}
		e := &engine{endpoint: http, events: "tcp://" + ev, replay: "tcp://" + rep}
		e.proc = procs.Start(t, fmt.Sprintf("engine%d", i), labBin, "enginesim",
			"--listen", http, "--model", modelName, "--tokenizer", tokDir,
			"--block-size", strconv.Itoa(blockSize), "--gpu-blocks", "8192", "--speedup", speedup,
			"--kv-events-endpoint", e.events, "--kv-events-replay", e.replay,
			"--seed", strconv.Itoa(i+1), "--drain", "2s")
		err := e.proc.WaitHTTP(ctx, "http://"+http+"/health")
		if err == nil {
			return e
		}
		if attempt == startAttempts || ctx.Err() != nil {
			t.Fatalf("engine %d: %v", i, err)
		}
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func writeConfig(t *testing.T, path string, cfg map[string]any) {
	t.Helper()
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Round-trip through the strict parser, so a config the processes
	// would reject fails here with its key path.
	if _, err := config.Parse(bytes.NewReader(b)); err != nil {
		t.Fatalf("generated config: %v\n%s", err, b)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
