//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/kv/kvstream"
	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/lab/procs"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/testkit/redistest"
)

// upstreamEngine is one enginesim process speaking a current-vLLM shape.
type upstreamEngine struct {
	name     string
	endpoint string
	events   string
	replay   string
	salt     string // cache_salt sent with this engine's requests
	proc     *procs.Proc
}

// startUpstreamEngine starts an engine with a small cache (so blocks are
// evicted and BlockRemoved flows) in vLLM v0.26's layout plus extra, and a
// gap forced at batch 2 (kept for replay, never sent live).
func startUpstreamEngine(t *testing.T, name, tokDir, salt string, extra ...string) *upstreamEngine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		httpAddr, err1 := freeport.Addr()
		ev, err2 := freeport.Addr()
		rep, err3 := freeport.Addr()
		if err := firstErr(err1, err2, err3); err != nil {
			t.Fatal(err)
		}
		e := &upstreamEngine{name: name, endpoint: httpAddr, events: "tcp://" + ev, replay: "tcp://" + rep, salt: salt}
		args := append([]string{"enginesim", "--listen", httpAddr, "--model", modelName, "--tokenizer", tokDir,
			"--block-size", strconv.Itoa(blockSize), "--gpu-blocks", "96", "--speedup", "50",
			"--kv-events-endpoint", e.events, "--kv-events-replay", e.replay,
			"--kv-events-skip-live", "2", "--seed", strconv.Itoa(attempt), "--drain", "1s"}, extra...)
		e.proc = procs.Start(t, name, labBin, args...)
		err := e.proc.WaitHTTP(ctx, "http://"+httpAddr+"/health")
		if err == nil {
			return e
		}
		if attempt == startAttempts || ctx.Err() != nil {
			t.Fatalf("engine %s: %v", name, err)
		}
	}
}

func (e *upstreamEngine) cache(t *testing.T) []uint64 {
	t.Helper()
	resp, err := httpClient.Get("http://" + e.endpoint + "/debug/kv-cache")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c enginesim.DebugCache
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	return c.Blocks
}

func (e *upstreamEngine) complete(t *testing.T, tokens []int) {
	t.Helper()
	body := map[string]any{"model": modelName, "prompt": tokens, "max_tokens": 4}
	if e.salt != "" {
		body["cache_salt"] = e.salt
	}
	b, _ := json.Marshal(body)
	resp, err := httpClient.Post("http://"+e.endpoint+"/v1/completions", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("engine %s: %s", e.name, resp.Status)
	}
}

// redisBlocksByWorker lists, per worker, the device-tier blocks the Redis index
// holds for it: every segment key (key schema 2, kv/kvindex/redis_segments.go)
// is scanned and each block's entries read with the index's liveness rule
// (the worker registered, its alive-until not passed, the entry's epoch at
// least the registry's), so entries of a cleared epoch or a dead worker do
// not count. A lone block cannot be matched by itself (Match looks block p
// up in the segment of chain[p - p%64]), hence the registry read here.
func redisBlocksByWorker(t *testing.T, c redis.UniversalClient, _ kvindex.Index, prefix string) map[string][]uint64 {
	t.Helper()
	ctx := context.Background()
	reg, err := c.HGetAll(ctx, prefix+"workers").Result()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	out := map[string][]uint64{}
	iter := c.Scan(ctx, 0, prefix+"v2:s:*", 1000).Iterator()
	for iter.Next(ctx) {
		fields, err := c.HGetAll(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatal(err)
		}
		for f, v := range fields {
			h, err := strconv.ParseUint(f, 16, 64)
			if err != nil {
				t.Fatalf("block field %q of %s: %v", f, iter.Val(), err)
			}
			for _, e := range strings.Split(v, ",") {
				parts := strings.Split(e, ":")
				if len(parts) != 3 || parts[1] != "0" {
					continue // malformed, or not the device tier
				}
				num, epoch := parts[0], parts[2]
				id, ok := reg["w:"+num]
				alive, _ := strconv.ParseInt(reg["a:"+num], 10, 64)
				regEpoch, _ := strconv.ParseInt(reg["e:"+num], 10, 64)
				ep, err := strconv.ParseInt(epoch, 10, 64)
				if !ok || alive < now || err != nil || ep < regEpoch {
					continue
				}
				w, err := kvfleet.ParseWorkerID(id)
				if err != nil {
					t.Fatalf("registry worker %q: %v", id, err)
				}
				out[w.Endpoint] = append(out[w.Endpoint], h)
			}
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	for w := range out {
		slices.Sort(out[w])
	}
	return out
}

// blockDiff reports blocks the index has that the engine does not (stale) and
// the reverse (missing).
func blockDiff(index, engine []uint64) (stale, missing int) {
	for _, h := range index {
		if _, ok := slices.BinarySearch(engine, h); !ok {
			stale++
		}
	}
	for _, h := range engine {
		if _, ok := slices.BinarySearch(index, h); !ok {
			missing++
		}
	}
	return stale, missing
}

// workerGauges reads kvgate_indexer_worker_blocks per worker endpoint
// (rank 0).
func workerGauges(t *testing.T, url string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for w, v := range labelledMetric(t, url, "kvgate_indexer_worker_blocks", "worker") {
		out[strings.TrimSuffix(w, "#0")] = int(v)
	}
	return out
}

// Engines speaking current vLLM — v0.26 layout with OffloadingConnector
// placeholders, a hybrid model's two KV-cache groups, salted requests —
// each with a forced gap, feed a real `kvgate indexer` over ZMQ into Redis:
// afterwards the index equals every engine's cache (0 stale, 0 missing).
// Then Redis loses everything twice while the engines are idle (FLUSHALL,
// and a restart without persistence): each time every worker's entries are
// back within 10 s and the per-worker gauges agree with the kvindex.
func TestUpstreamShapedEnginesAndRedisWipes(t *testing.T) {
	tokDir, err := modelfiles.Model(modelName)
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	rds := redistest.Standalone(t)
	engines := []*upstreamEngine{
		startUpstreamEngine(t, "v026-offload", tokDir, "", "--kv-events-offload-placeholders"),
		startUpstreamEngine(t, "hybrid", tokDir, "", "--kv-events-hybrid-groups"),
		startUpstreamEngine(t, "salted", tokDir, "tenant-a"),
	}
	var cfgEngines []map[string]any
	for _, e := range engines {
		cfgEngines = append(cfgEngines, map[string]any{"endpoint": e.endpoint, "model": modelName, "events": e.events, "replay": e.replay})
	}
	const prefix = "e2e14:"
	idxAt, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "kvgate.yaml")
	writeConfig(t, cfgPath, map[string]any{
		"models":  []map[string]any{{"name": modelName, "block_size": blockSize, "tokenizer": tokDir}},
		"engines": cfgEngines,
		"indexer": map[string]any{"listen": idxAt},
		"index":   map[string]any{"backend": "redis", "redis": map[string]any{"addrs": []string{rds.Addr()}, "prefix": prefix}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	indexer := procs.Start(t, "indexer", kvgateBin, "indexer", "--config", cfgPath)
	if err := indexer.WaitHTTP(ctx, "http://"+idxAt+"/readyz"); err != nil {
		t.Fatalf("indexer: %v", err)
	}
	reader, err := kvindex.NewRedis(context.Background(), kvindex.RedisConfig{Client: rds.NewClient(), Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()

	// Conversations sharing system prompts, more than the 96-block caches
	// hold: stores, shared prefixes and evictions.
	rng := rand.New(rand.NewPCG(14, 14))
	system := [][]int{randomTokens(rng, 5*blockSize), randomTokens(rng, 3*blockSize)}
	for i := range 24 {
		for _, e := range engines {
			e.complete(t, concat(system[i%2], randomTokens(rng, (2+i%5)*blockSize+7)))
		}
	}

	agree := func(what string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			got := redisBlocksByWorker(t, rds.Client(), reader, prefix)
			gauges := workerGauges(t, "http://"+idxAt+"/metrics")
			var bad []string
			for _, e := range engines {
				want := e.cache(t)
				stale, missing := blockDiff(got[e.endpoint], want)
				if stale != 0 || missing != 0 || len(want) == 0 || gauges[e.endpoint] != len(got[e.endpoint]) {
					bad = append(bad, fmt.Sprintf("%s: engine holds %d, index %d (%d stale, %d missing), gauge %d",
						e.name, len(want), len(got[e.endpoint]), stale, missing, gauges[e.endpoint]))
				}
			}
			if len(bad) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: index and engines disagree after %v:\n%s\nindexer log:\n%s", what, within, strings.Join(bad, "\n"), indexer.Output())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	agree("after the traffic", 20*time.Second)
	m, err := scrape("http://" + idxAt + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kvgate_indexer_sequence_gaps_repaired_total"} {
		if m[name] < float64(len(engines)) {
			t.Errorf("%s = %v, want one repaired gap per engine at least", name, m[name])
		}
	}
	if m["kvgate_indexer_decode_errors_total"] != 0 || m["kvgate_indexer_worker_resets_total"] != 0 {
		t.Errorf("decode errors %v, resets %v: want none", m["kvgate_indexer_decode_errors_total"], m["kvgate_indexer_worker_resets_total"])
	}

	// The engines are idle from here on.
	if err := rds.Client().FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	wiped := time.Now()
	agree("after FLUSHALL", 10*time.Second)
	t.Logf("every worker back %v after FLUSHALL", time.Since(wiped).Round(10*time.Millisecond))

	if err := rds.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	agree("after a Redis restart without persistence", 10*time.Second)
	t.Logf("every worker back %v after the Redis restart", time.Since(restarted).Round(10*time.Millisecond))
	if m, err := scrape("http://" + idxAt + "/metrics"); err != nil || m["kvgate_index_wipes_total"] < 2 {
		t.Errorf("kvgate_index_wipes_total %v (%v), want 2", m["kvgate_index_wipes_total"], err)
	}
}

// Bind mode with real processes: `kvgate indexer` binds one socket, the
// engines' PUB sockets connect to it (--kv-events-connect, as vLLM does
// with an endpoint without a wildcard), each is told apart by its topic
// and repaired through its own replay endpoint: the index equals every
// engine's cache.
func TestBindModeIndexerWithConnectingEngines(t *testing.T) {
	tokDir, err := modelfiles.Model(modelName)
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	rds := redistest.Standalone(t)
	bindAt, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	bind := "tcp://" + bindAt
	var engines []*upstreamEngine
	var cfgEngines []map[string]any
	for i, salt := range []string{"", "tenant-b"} {
		topic := fmt.Sprintf("kv@engine-%d@%s", i, modelName)
		e := startUpstreamEngine(t, fmt.Sprintf("connecting-%d", i), tokDir, salt,
			"--kv-events-endpoint", bind, "--kv-events-connect", "--kv-events-topic", topic)
		engines = append(engines, e)
		cfgEngines = append(cfgEngines, map[string]any{"endpoint": e.endpoint, "model": modelName, "events": "bind", "topic": topic, "replay": e.replay})
	}
	const prefix = "e2e14bind:"
	idxAt, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "kvgate.yaml")
	writeConfig(t, cfgPath, map[string]any{
		"models":  []map[string]any{{"name": modelName, "block_size": blockSize, "tokenizer": tokDir}},
		"engines": cfgEngines,
		"indexer": map[string]any{"listen": idxAt, "events_bind": bind},
		"index":   map[string]any{"backend": "redis", "redis": map[string]any{"addrs": []string{rds.Addr()}, "prefix": prefix}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	indexer := procs.Start(t, "indexer", kvgateBin, "indexer", "--config", cfgPath)
	if err := indexer.WaitHTTP(ctx, "http://"+idxAt+"/readyz"); err != nil {
		t.Fatalf("indexer: %v", err)
	}
	reader, err := kvindex.NewRedis(context.Background(), kvindex.RedisConfig{Client: rds.NewClient(), Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	rng := rand.New(rand.NewPCG(9, 14))
	system := randomTokens(rng, 4*blockSize)
	for i := range 16 {
		for _, e := range engines {
			e.complete(t, concat(system, randomTokens(rng, (2+i%4)*blockSize+3)))
		}
	}
	agree := func(when string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := redisBlocksByWorker(t, rds.Client(), reader, prefix)
			var bad []string
			for _, e := range engines {
				want := e.cache(t)
				if stale, missing := blockDiff(got[e.endpoint], want); stale != 0 || missing != 0 || len(want) == 0 {
					bad = append(bad, fmt.Sprintf("%s: engine %d blocks, index %d (%d stale, %d missing)", e.name, len(want), len(got[e.endpoint]), stale, missing))
				}
			}
			if len(bad) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("bind mode, %s: index and engines disagree:\n%s\nindexer log:\n%s", when, strings.Join(bad, "\n"), indexer.Output())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	agree("the engines alone")

	// Issue 31, finding 3: another peer allowed on the bound socket (a
	// process on the indexer's host, here on 127.0.0.9) publishes under
	// engine 0's topic: a publisher of its own, so its first batch is
	// sequence 0 (once taken as engine 0 restarting, dropping its entries),
	// then forged prefixes (once credited to engine 0). The indexer binds
	// the topic to engine 0's address: it refuses them and the index still
	// equals every engine's cache.
	forger, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: bind, Connect: true, From: "127.0.0.9", Topic: fmt.Sprintf("kv@engine-%d@%s", 0, modelName)})
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	var forged []uint32
	for _, tok := range randomTokens(rng, 4*blockSize) {
		forged = append(forged, uint32(tok))
	}
	payload, err := kvevents.Encode(kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.BlockStored, BlockSize: blockSize, TokenIDs: forged,
		BlockHashes: []uint64{9001, 9002, 9003, 9004}}}}, kvevents.EncodingMap)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three forged batches refused by the indexer", 20*time.Second, func() error {
		if _, err := forger.Publish(payload); err != nil {
			return err
		}
		m, err := scrape("http://" + idxAt + "/metrics")
		if err != nil {
			return err
		}
		if n := m[`kvgate_indexer_bind_refused_total{reason="foreign_topic"}`]; n < 3 {
			return fmt.Errorf("kvgate_indexer_bind_refused_total{reason=\"foreign_topic\"} = %v", n)
		}
		return nil
	})
	for i := range 4 {
		engines[0].complete(t, concat(system, randomTokens(rng, (2+i)*blockSize+1)))
	}
	agree("after the forged batches")
	m, err := scrape("http://" + idxAt + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if n := m["kvgate_indexer_publisher_restarts_total"]; n != 0 {
		t.Errorf("kvgate_indexer_publisher_restarts_total = %v after the forged sequence reset, want 0", n)
	}
}
