package indexer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/kv/kvstream"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/poll"
	"github.com/kvgate/kvgate/lab/testkit/redistest"
)

const testBlockSize = 4

type testEngine struct {
	pub      *kvstream.Publisher
	id       kvfleet.WorkerID
	enc      kvevents.Encoding
	sent     uint64
	lastHash uint64
}

func startEngines(t *testing.T, n int) ([]*testEngine, config.Config) {
	t.Helper()
	cfg := config.Default()
	cfg.Indexer.Listen = "127.0.0.1:0"
	cfg.Models = []config.Model{{Name: "m", BlockSize: testBlockSize, Namespace: "tenant"}}
	var engines []*testEngine
	for i := 0; i < n; i++ {
		pub, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pub.Close() })
		e := &testEngine{pub: pub, id: kvfleet.WorkerID{Endpoint: "10.0.0." + string(rune('1'+i)) + ":8000"}, enc: kvevents.Encoding(i % 2)}
		engines = append(engines, e)
		cfg.Engines = append(cfg.Engines, config.Engine{Endpoint: e.id.Endpoint, Model: "m", DPRanks: 1,
			Events: "tcp://" + pub.Addr().String(), Replay: "tcp://" + pub.ReplayAddr().String()})
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return engines, cfg
}

// storeChain publishes one BlockStored continuing the engine's last block.
func (e *testEngine) storeChain(t *testing.T, tokens []uint32, live bool) {
	t.Helper()
	n := len(tokens) / testBlockSize
	ev := kvevents.Event{Kind: kvevents.BlockStored, BlockSize: testBlockSize, TokenIDs: tokens, ParentHash: e.lastHash, HasParent: e.lastHash != 0}
	for i := 0; i < n; i++ {
		e.lastHash += 1000 // engine ids are opaque to the indexer
		ev.BlockHashes = append(ev.BlockHashes, e.lastHash)
	}
	e.publish(t, kvevents.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: []kvevents.Event{ev}}, live)
}

func (e *testEngine) publish(t *testing.T, b kvevents.Batch, live bool) {
	t.Helper()
	payload, err := kvevents.Encode(b, e.enc)
	if err != nil {
		t.Fatal(err)
	}
	if live {
		_, err = e.pub.Publish(payload)
	} else {
		_, err = e.pub.PublishSkippingLive(payload)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.sent++
}

// serviceConfig is what the composition points (cmd/kvgate,
// daemon/extprocd) give New: cfg's sections and its engines expanded.
func serviceConfig(t *testing.T, cfg config.Config) ServiceConfig {
	t.Helper()
	workers, err := cfg.Workers()
	if err != nil {
		t.Fatal(err)
	}
	return ServiceConfig{Index: cfg.Index, Indexer: cfg.Indexer, Models: cfg.Models, Workers: workers}
}

func runService(t *testing.T, cfg config.Config, idx kvindex.Index) *Service {
	t.Helper()
	svc, err := New(serviceConfig(t, cfg), idx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { svc.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("service did not stop within 10s of cancellation")
		}
	})
	return svc
}

// waitBatches waits until every engine's published batches were handled
// (applied, or rejected as undecodable).
func waitBatches(t *testing.T, svc *Service, engines []*testEngine) Status {
	t.Helper()
	var st Status
	poll.Until(t, "the indexer to handle every published batch", 20*time.Second, func() error {
		var err error
		if st, err = svc.Status(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i, e := range engines {
			if w := st.Workers[i]; w.Ingest.Batches+w.DecodeErrors < e.sent {
				return fmt.Errorf("workers %+v", st.Workers)
			}
		}
		return nil
	})
	return st
}

func chain(tokens []uint32) []uint64 {
	seed := blockhash.Seed("", "tenant")
	return blockhash.SequenceHashes(blockhash.LocalHashes(tokens, testBlockSize, seed))
}

func seqTokens(from, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(from + i)
	}
	return t
}

func TestServiceIngestsRepairsGapsAndReportsMetrics(t *testing.T) {
	engines, cfg := startEngines(t, 2)
	idx := kvindex.NewMemory(kvindex.MemoryConfig{})
	svc := runService(t, cfg, idx)

	system := seqTokens(1, 8)  // 2 blocks shared by both engines
	turn := seqTokens(100, 12) // 3 more blocks on engine 0
	lost := seqTokens(200, 4)  // engine 0's next batch never arrives live
	after := seqTokens(300, 4) // and the one after it reveals the gap
	engines[0].storeChain(t, system, true)
	engines[1].storeChain(t, system, true)
	engines[0].storeChain(t, turn, true)
	engines[0].storeChain(t, lost, false)
	engines[0].storeChain(t, after, true)
	st := waitBatches(t, svc, engines)

	full := append(append(append(append([]uint32{}, system...), turn...), lost...), after...)
	m, err := kvindex.MatchMap(context.Background(), idx, chain(full))
	if err != nil {
		t.Fatal(err)
	}
	if d := m[engines[0].id][kvfleet.TierDevice]; d != 7 {
		t.Errorf("engine 0 depth %d, want 7 (the replayed block included)", d)
	}
	if d := m[engines[1].id][kvfleet.TierDevice]; d != 2 {
		t.Errorf("engine 1 depth %d, want 2", d)
	}
	w0 := st.Workers[0]
	if w0.Stream.GapsDetected < 1 || w0.Stream.GapsRepaired < 1 || w0.Stream.Resets != 0 {
		t.Errorf("gap not repaired cleanly: %+v", w0.Stream)
	}

	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	body := get(t, srv.URL+"/metrics", 200)
	for _, want := range []string{
		`kvgate_indexer_sequence_gaps_repaired_total{model="m",worker="10.0.0.1:8000#0"} `,
		`kvgate_indexer_events_applied_total{kind="block_stored",model="m",worker="10.0.0.1:8000#0"} 4`,
		`kvgate_index_entries 9`,
		`kvgate_index_up 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	get(t, srv.URL+"/healthz", 200)
	get(t, srv.URL+"/readyz", 200)
	var status Status
	if err := json.Unmarshal([]byte(get(t, srv.URL+"/status", 200)), &status); err != nil {
		t.Fatal(err)
	}
	if status.Index.Workers != 2 || len(status.Workers) != 2 {
		t.Errorf("/status: %+v", status)
	}
}

// An undecodable batch may have carried removals: the worker's entries must
// be dropped (never stale) and rebuilt from what follows.
func TestServiceResetsWorkerOnUndecodableBatch(t *testing.T) {
	engines, cfg := startEngines(t, 1)
	idx := kvindex.NewMemory(kvindex.MemoryConfig{})
	svc := runService(t, cfg, idx)
	e := engines[0]
	e.storeChain(t, seqTokens(1, 8), true)
	if _, err := e.pub.Publish([]byte{0xc1}); err != nil { // 0xc1 is never valid msgpack
		t.Fatal(err)
	}
	e.sent++
	e.lastHash = 0
	e.storeChain(t, seqTokens(50, 4), true)
	st := waitBatches(t, svc, engines)
	if st.Workers[0].DecodeErrors != 1 {
		t.Fatalf("decode errors %d, want 1", st.Workers[0].DecodeErrors)
	}
	m, _ := kvindex.MatchMap(context.Background(), idx, chain(seqTokens(1, 8)))
	if len(m) != 0 {
		t.Errorf("blocks stored before the undecodable batch still indexed: %v", m)
	}
	m, _ = kvindex.MatchMap(context.Background(), idx, chain(seqTokens(50, 4)))
	if m[e.id][kvfleet.TierDevice] != 1 {
		t.Errorf("blocks stored after the reset missing: %v", m)
	}
}

// Several extproc replicas share the Redis index: what one indexer applies,
// another process's index client sees.
// runOnRedis runs the service for n engines on a Redis index of its own.
func runOnRedis(t *testing.T, n int) (*redistest.Server, []*testEngine, *Service, kvindex.Index) {
	t.Helper()
	srv := redistest.Standalone(t)
	engines, cfg := startEngines(t, n)
	cfg.Index.Backend = "redis"
	cfg.Index.Redis.Addrs = []string{srv.Addr()}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	idx, err := OpenIndex(context.Background(), cfg.Index)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idx.Close() })
	return srv, engines, runService(t, cfg, idx), idx
}

func TestServiceOnRedisSharedIndex(t *testing.T) {
	srv, engines, svc, _ := runOnRedis(t, 2)
	engines[0].storeChain(t, seqTokens(1, 12), true)
	engines[1].storeChain(t, seqTokens(1, 4), true)
	waitBatches(t, svc, engines)

	replica, err := kvindex.NewRedis(context.Background(), kvindex.RedisConfig{Client: srv.NewClient()})
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	m, err := kvindex.MatchMap(context.Background(), replica, chain(seqTokens(1, 12)))
	if err != nil {
		t.Fatal(err)
	}
	if m[engines[0].id][kvfleet.TierDevice] != 3 || m[engines[1].id][kvfleet.TierDevice] != 1 {
		t.Fatalf("replica sees %v, want depths 3 and 1", m)
	}
}

func TestOpenIndexReportsUnreachableRedis(t *testing.T) {
	c := config.Default().Index
	c.Backend = "redis"
	c.Redis.Addrs = []string{"127.0.0.1:1"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := OpenIndex(ctx, c); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("got %v, want an error naming the address", err)
	}
}

func get(t *testing.T, url string, want int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// workersOf expands engines as the configuration does (config.Config.Workers).
func workersOf(t *testing.T, cfg config.Config, engines []config.Engine) []kvfleet.Worker {
	t.Helper()
	cfg.Engines = engines
	ws, err := cfg.Workers()
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// Discovery changes the worker set at run time: a new engine is
// subscribed, a departed one's entries leave the kvindex.
func TestServiceSetWorkers(t *testing.T) {
	engines, cfg := startEngines(t, 2)
	first := cfg
	first.Engines = cfg.Engines[:1]
	idx := kvindex.NewMemory(kvindex.MemoryConfig{})
	svc := runService(t, first, idx)
	engines[0].storeChain(t, seqTokens(1, 8), true)
	waitBatches(t, svc, engines[:1])

	if err := svc.SetWorkers(context.Background(), workersOf(t, cfg, cfg.Engines)); err != nil {
		t.Fatal(err)
	}
	engines[1].storeChain(t, seqTokens(1, 4), true)
	st := waitBatches(t, svc, engines)
	if len(st.Workers) != 2 {
		t.Fatalf("workers %d after adding one", len(st.Workers))
	}
	m, _ := kvindex.MatchMap(context.Background(), idx, chain(seqTokens(1, 8)))
	if m[engines[0].id][kvfleet.TierDevice] != 2 || m[engines[1].id][kvfleet.TierDevice] != 1 {
		t.Fatalf("match %v", m)
	}

	if err := svc.SetWorkers(context.Background(), workersOf(t, cfg, cfg.Engines[1:])); err != nil {
		t.Fatal(err)
	}
	m, _ = kvindex.MatchMap(context.Background(), idx, chain(seqTokens(1, 8)))
	if _, ok := m[engines[0].id]; ok || m[engines[1].id][kvfleet.TierDevice] != 1 {
		t.Fatalf("after removing engine 0: %v", m)
	}
	if st, _ := svc.Status(context.Background()); len(st.Workers) != 1 || st.Workers[0].Worker != engines[1].id.String() {
		t.Fatalf("status after removal: %+v", st.Workers)
	}
}

// Redis loses its data (FLUSHALL) while the engines are idle: nothing on
// their streams would notice, so the generation watcher must, and every
// worker is rebuilt from its engine's replay buffer within 10 s, with the
// per-worker gauges equal to what the index holds again.
func TestServiceResyncsIdleWorkersAfterRedisFlushAll(t *testing.T) {
	srv, engines, svc, idx := runOnRedis(t, 2)
	engines[0].storeChain(t, seqTokens(1, 12), true)
	engines[1].storeChain(t, seqTokens(1, 4), true)
	waitBatches(t, svc, engines)
	want := map[kvfleet.WorkerID]int{engines[0].id: 3, engines[1].id: 1}
	depthsNow := func() map[kvfleet.WorkerID]kvfleet.Depths {
		m, err := kvindex.MatchMap(context.Background(), idx, chain(seqTokens(1, 12)))
		if err != nil {
			return nil
		}
		return m
	}
	for w, d := range want {
		if got := depthsNow()[w][kvfleet.TierDevice]; got != d {
			t.Fatalf("before the wipe: %v depth %d, want %d", w, got, d)
		}
	}
	if err := srv.Client().FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	wiped := time.Now()
	if m := depthsNow(); len(m) != 0 {
		t.Fatalf("FLUSHALL left %v", m)
	}
	poll.Until(t, "every worker rebuilt after FLUSHALL", 10*time.Second, func() error {
		m := depthsNow()
		for w, d := range want {
			if m[w][kvfleet.TierDevice] != d {
				st, _ := svc.Status(context.Background())
				return fmt.Errorf("the index holds %v, want %v; status %+v", m, want, st.Workers)
			}
		}
		return nil
	})
	t.Logf("every worker back %v after FLUSHALL", time.Since(wiped).Round(time.Millisecond))
	st, err := svc.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range st.Workers {
		if got := w.Ingest.SequenceEntries; got != int64(want[engines[i].id]) {
			t.Errorf("worker %s reports %d entries, the index holds %d", engines[i].id, got, want[engines[i].id])
		}
	}
	if svc.wipes.Load() != 1 {
		t.Errorf("wipes %d, want 1", svc.wipes.Load())
	}
}

// startBindEngines configures n bind-mode engines whose publishers
// connect to cfg's bound socket, engine i from its own endpoint's address
// (127.0.0.(i+2): every 127/8 address is loopback on Linux), as an engine
// in a pod connects from its pod IP.
func startBindEngines(t *testing.T, n int) ([]*testEngine, config.Config) {
	t.Helper()
	cfg := config.Default()
	cfg.Indexer.Listen = "127.0.0.1:0"
	cfg.Indexer.EventsBind = fmt.Sprintf("tcp://127.0.0.1:%d", freeport.Pick(t))
	cfg.Models = []config.Model{{Name: "m", BlockSize: testBlockSize, Namespace: "tenant"}}
	var engines []*testEngine
	for i := 0; i < n; i++ {
		ip := fmt.Sprintf("127.0.0.%d", i+2)
		topic := fmt.Sprintf("kv@%s@m", ip)
		pub, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: cfg.Indexer.EventsBind, Connect: true, From: ip, Topic: topic, ReplayEndpoint: "tcp://" + ip + ":0"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pub.Close() })
		e := &testEngine{pub: pub, id: kvfleet.WorkerID{Endpoint: ip + ":8000"}, enc: kvevents.EncodingMap}
		engines = append(engines, e)
		cfg.Engines = append(cfg.Engines, config.Engine{Endpoint: e.id.Endpoint, Model: "m", DPRanks: 1, Topic: topic,
			Events: config.EventsBindMode, Replay: "tcp://" + pub.ReplayAddr().String()})
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return engines, cfg
}

// Bind mode end to end in one process: engines' publishers connect to the
// indexer's bound socket, each is told apart by its topic, and its gaps
// are repaired through its own replay endpoint.
func TestServiceBindMode(t *testing.T) {
	engines, cfg := startBindEngines(t, 2)
	idx := kvindex.NewMemory(kvindex.MemoryConfig{})
	svc := runService(t, cfg, idx)
	engines[0].storeChain(t, seqTokens(1, 8), true)
	engines[0].storeChain(t, seqTokens(9, 4), false) // missed live: a gap
	engines[0].storeChain(t, seqTokens(13, 4), true)
	engines[1].storeChain(t, seqTokens(1, 4), true)
	waitBatches(t, svc, engines)
	m, err := kvindex.MatchMap(context.Background(), idx, chain(seqTokens(1, 16)))
	if err != nil {
		t.Fatal(err)
	}
	if m[engines[0].id][kvfleet.TierDevice] != 4 || m[engines[1].id][kvfleet.TierDevice] != 1 {
		t.Fatalf("bind mode index %v, want depths 4 and 1", m)
	}
}

// Issue 31, finding 3, end to end in the indexer: a peer allowed on the
// bound socket (another loopback address: any process on the indexer's
// host, or a host in events_bind_allow) publishes under an engine's topic
// from a publisher of its own, so its first batch is sequence 0, which
// used to be taken as the engine restarting (every entry of the engine
// dropped), and its batches store forged prefixes in the engine's name
// (which used to move routing to it). With each topic bound to its
// engine's address, neither changes the index: the engine keeps exactly
// what it published, nothing forged is credited, no reset happens, and
// the refusals are counted (kvgate_indexer_bind_refused_total).
func TestServiceBindModeRefusesAnotherPeersBatchesUnderAnEnginesTopic(t *testing.T) {
	engines, cfg := startBindEngines(t, 1)
	victim := engines[0]
	idx := kvindex.NewMemory(kvindex.MemoryConfig{})
	svc := runService(t, cfg, idx)
	victim.storeChain(t, seqTokens(1, 16), true)
	waitBatches(t, svc, engines)

	pub, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: cfg.Indexer.EventsBind, Connect: true, From: "127.0.0.9", Topic: cfg.Engines[0].Topic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	forger := &testEngine{pub: pub, id: victim.id, enc: kvevents.EncodingMap}
	forged := seqTokens(1000, 16)
	// The forger's first batches go out before its connection is up (a PUB
	// drops them) and each refusal cuts it, so it publishes until three
	// batches, the sequence-0 one among them or not, have been refused.
	poll.True(t, "three forged batches refused", 20*time.Second, func() bool {
		forger.storeChain(t, forged[:4], true)
		ls, _ := svc.listenerStats()
		return ls.ForeignTopic >= 3
	})
	victim.storeChain(t, seqTokens(17, 4), true)
	st := waitBatches(t, svc, engines)
	m, err := kvindex.MatchMap(context.Background(), idx, chain(seqTokens(1, 20)))
	if err != nil {
		t.Fatal(err)
	}
	if got := m[victim.id][kvfleet.TierDevice]; got != 5 {
		t.Errorf("engine's own chain: depth %d, want all 5 blocks it published (index %v)", got, m)
	}
	if m, err = kvindex.MatchMap(context.Background(), idx, chain(forged[:4])); err != nil {
		t.Fatal(err)
	} else if len(m) != 0 {
		t.Errorf("forged prefix credited: %v", m)
	}
	if w := st.Workers[0].Stream; w.Resets != 0 || w.PublisherRestarts != 0 {
		t.Errorf("engine stream %+v: want no reset and no publisher restart", w)
	}
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	body := get(t, srv.URL+"/metrics", 200)
	var refused float64
	if _, err := fmt.Sscan(after(body, `kvgate_indexer_bind_refused_total{reason="foreign_topic"} `), &refused); err != nil || refused < 3 {
		t.Errorf("kvgate_indexer_bind_refused_total{reason=\"foreign_topic\"} = %v (%v), want >= 3", refused, err)
	}
}

// after is what follows the first occurrence of marker in s ("" if none).
func after(s, marker string) string {
	_, rest, _ := strings.Cut(s, marker)
	return rest
}
