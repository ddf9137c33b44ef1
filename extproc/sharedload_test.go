package extproc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/indexer"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/testkit/poll"
	"github.com/kvgate/kvgate/lab/testkit/redistest"
	"github.com/kvgate/kvgate/picker"
)

func TestLoadSnapshotRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	in := map[kvfleet.WorkerID]picker.Load{
		{Endpoint: "10.0.0.1:8000", DPRank: 0}: {InflightRequests: 3, PrefillTokens: 4096, DecodeBlocks: 77},
		{Endpoint: "10.0.0.2:8000", DPRank: 1}: {InflightRequests: 1},
		{Endpoint: "10.0.0.3:8000", DPRank: 0}: {}, // idle: not published
	}
	b, err := encodeLoadSnapshot(at, 12345, in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeLoadSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.At.Equal(at) || len(got.Workers) != 2 || !got.HaveRouted || got.Routed != 12345 {
		t.Fatalf("decoded %+v from %s", got, b)
	}
	for w, l := range in {
		if l == (picker.Load{}) {
			continue
		}
		if got.Workers[w] != l {
			t.Errorf("%s: %+v, want %+v", w, got.Workers[w], l)
		}
	}
}

func TestLoadSnapshotRejectsBadInput(t *testing.T) {
	cases := map[string]string{
		`not json`:                                                   "load snapshot",
		`{"v":2,"at":1,"workers":[]}`:                                "version 2",
		`{"v":1,"at":0,"workers":[]}`:                                "at 0",
		`{"v":1,"at":1,"workers":[["a:1#0",1,2]]}`:                   "workers[0]: 3 fields",
		`{"v":1,"at":1,"workers":[[5,1,2,3]]}`:                       "workers[0][0]",
		`{"v":1,"at":1,"workers":[["nohash",1,2,3]]}`:                "workers[0][0]",
		`{"v":1,"at":1,"workers":[["a:1#0",-1,2,3]]}`:                "workers[0][1]",
		`{"v":1,"at":1,"workers":[["a:1#0",1,1.5,3]]}`:               "workers[0][2]",
		`{"v":1,"at":1,"workers":[["a:1#0",1,2,1099511627777]]}`:     "workers[0][3]",
		`{"v":1,"at":1,"workers":[["a:1#0",1,2,3],["a:1#0",1,2,3]]}`: "listed twice",
		`{"v":1,"at":1,"routed":-1,"workers":[]}`:                    "routed",
		`{"v":1,"at":1,"routed":1.5,"workers":[]}`:                   "routed",
	}
	for in, want := range cases {
		_, err := decodeLoadSnapshot([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", in, err, want)
		}
	}
	if _, err := decodeLoadSnapshot(make([]byte, maxSnapshotBytes+1)); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("oversized snapshot: %v", err)
	}
}

func FuzzDecodeLoadSnapshot(f *testing.F) {
	f.Add([]byte(`{"v":1,"at":1700000000000,"workers":[["10.0.0.1:8000#0",3,4096,77]]}`))
	f.Add([]byte(`{"v":1,"at":1,"workers":[]}`))
	f.Add([]byte(`{"v":1,"at":1,"workers":[["a#0",1,2,3],["a#0",1,2,3]]}`))
	f.Add([]byte(`{"v":1,"at":1,"workers":[["a#0","1",2,3]]}`))
	f.Add([]byte(`{"v":1,"at":1,"routed":18446744073709551615,"workers":[]}`))
	f.Add([]byte(`{"v":1,"at":1,"routed":-1,"workers":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeLoadSnapshot(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same loads.
		again, err := encodeLoadSnapshot(s.At, s.Routed, s.Workers)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := decodeLoadSnapshot(again)
		if err != nil {
			t.Fatalf("re-encoded snapshot does not decode: %v", err)
		}
		if s.HaveRouted && s2.Routed != s.Routed {
			t.Fatalf("routed %d became %d", s.Routed, s2.Routed)
		}
		for w, l := range s.Workers {
			if l != (picker.Load{}) && s2.Workers[w] != l {
				t.Fatalf("%s: %+v became %+v", w, l, s2.Workers[w])
			}
		}
	})
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func sharedCfg(replica string, ttl time.Duration) extprocconfig.SharedLoad {
	return extprocconfig.SharedLoad{Interval: yamlconf.Duration(20 * time.Millisecond), TTL: yamlconf.Duration(ttl), ReplicaID: replica}
}

// Two replicas exchange their loads through a real Redis (standalone and
// a 3-master Cluster: every command touches one key); a withdrawn replica
// stops counting at once, a dead one when its key's TTL passes.
func TestSharedLoadBetweenReplicas(t *testing.T) {
	t.Run("standalone", func(t *testing.T) { checkSharedLoad(t, redistest.Standalone(t).Client()) })
	t.Run("cluster", func(t *testing.T) {
		checkSharedLoad(t, redistest.NewCluster(t, redistest.ClusterOptions{Masters: 3}).Client())
	})
}

func checkSharedLoad(t *testing.T, client redis.UniversalClient) {
	ctx := context.Background()
	w1 := kvfleet.WorkerID{Endpoint: "10.0.0.1:8000"}
	w2 := kvfleet.WorkerID{Endpoint: "10.0.0.2:8000", DPRank: 1}
	aLoad := map[kvfleet.WorkerID]picker.Load{w1: {InflightRequests: 5, PrefillTokens: 9000, DecodeBlocks: 40}}
	bLoad := map[kvfleet.WorkerID]picker.Load{w1: {InflightRequests: 1}, w2: {InflightRequests: 2, PrefillTokens: 10}}
	cLoad := map[kvfleet.WorkerID]picker.Load{w1: {InflightRequests: 2, PrefillTokens: 1000}}
	ttl := 400 * time.Millisecond
	a := newSharedLoad(client, "t:", sharedCfg("replica-a", ttl), func() map[kvfleet.WorkerID]picker.Load { return aLoad }, nil, quietLog())
	b := newSharedLoad(client, "t:", sharedCfg("replica-b", ttl), func() map[kvfleet.WorkerID]picker.Load { return bLoad }, nil, quietLog())
	c := newSharedLoad(client, "t:", sharedCfg("replica-c", ttl), func() map[kvfleet.WorkerID]picker.Load { return cLoad }, nil, quietLog())
	for _, s := range []*sharedLoad{a, b, c} {
		s.round(ctx)
	}
	for _, s := range []*sharedLoad{a, b, c} {
		s.round(ctx) // every replica has now read every other's publish
	}
	// b sees a + c, never itself.
	if got, want := b.peerLoad(w1), (picker.Load{InflightRequests: 7, PrefillTokens: 10000, DecodeBlocks: 40}); got != want {
		t.Fatalf("b's view of %s: %+v, want %+v (a's + c's)", w1, got, want)
	}
	if got := b.peerLoad(w2); got != (picker.Load{}) {
		t.Fatalf("b counts its own load as a peer's: %+v", got)
	}
	if got, want := a.peerLoad(w2), bLoad[w2]; got != want {
		t.Fatalf("a's view of %s: %+v, want %+v", w2, got, want)
	}
	if n := b.peers.Load().Replicas; n != 2 {
		t.Fatalf("b sees %d peers, want 2", n)
	}
	// a withdraws (clean shutdown): gone from b's next read.
	a.withdraw(ctx)
	b.round(ctx)
	if got, want := b.peerLoad(w1), cLoad[w1]; got != want {
		t.Fatalf("after a withdrew, b's view of %s: %+v, want c's %+v", w1, got, want)
	}
	// c dies without withdrawing: its key expires after the TTL and b
	// prunes it from the registry.
	poll.Until(t, fmt.Sprintf("dead replica c to leave b's view after its TTL (%v)", ttl), ttl+5*time.Second, func() error {
		b.round(ctx)
		if got := b.peerLoad(w1); got != (picker.Load{}) {
			return fmt.Errorf("b still counts %+v on %s", got, w1)
		}
		return nil
	})
	if n, err := client.HExists(ctx, "t:load-replicas", "replica-c").Result(); err != nil || n {
		t.Fatalf("dead replica's registry field: exists %v err %v", n, err)
	}
}

// A corrupt peer snapshot is skipped and counted, not fatal to the others.
func TestSharedLoadSkipsCorruptPeer(t *testing.T) {
	client := redistest.Standalone(t).Client()
	ctx := context.Background()
	w := kvfleet.WorkerID{Endpoint: "10.0.0.1:8000"}
	a := newSharedLoad(client, "t:", sharedCfg("a", time.Second), func() map[kvfleet.WorkerID]picker.Load {
		return map[kvfleet.WorkerID]picker.Load{w: {InflightRequests: 4}}
	}, nil, quietLog())
	b := newSharedLoad(client, "t:", sharedCfg("b", time.Second), func() map[kvfleet.WorkerID]picker.Load { return nil }, nil, quietLog())
	a.round(ctx)
	if err := client.Set(ctx, "t:load:evil", `{"v":1,"at":1,"workers":[["x#0",-5,0,0]]}`, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.HSet(ctx, "t:load-replicas", "evil", "1").Err(); err != nil {
		t.Fatal(err)
	}
	b.round(ctx)
	if got := b.peerLoad(w); got.InflightRequests != 4 {
		t.Fatalf("b's view %+v, want a's 4 in flight", got)
	}
	if n := counterValue(t, b.errors.WithLabelValues("decode")); n != 1 {
		t.Fatalf("decode errors %v, want 1", n)
	}
}

// Through two real Routers on one Redis index: a burst routed by replica A
// to the prefix holder shows up in replica B's candidates within one
// interval, and B stops sending to that worker though it holds the prefix.
func TestRoutersShareLoadThroughRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Index.Backend = "redis"
	cfg.Index.Redis.Addrs = []string{srv.Addr()}
	cfg.Models = []config.Model{{Name: "qwen3", BlockSize: 16, Tokenizer: dir}}
	for _, w := range workers {
		cfg.Engines = append(cfg.Engines, config.Engine{Endpoint: w, Model: "qwen3", DPRanks: 1, Role: "both", Events: "tcp://127.0.0.1:1"})
	}
	cfg.Extproc.HealthCheck.Disabled = true
	cfg.Extproc.EngineMetrics.Disabled = true
	cfg.Extproc.SharedLoad.Interval = yamlconf.Duration(20 * time.Millisecond)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	reg, err := preprocess.New(cfg.Models, preprocess.Options{Limits: openai.Limits{MaxBodyBytes: cfg.Extproc.MaxBodyBytes}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	newReplica := func() *Router {
		idx, err := indexer.OpenIndex(ctx, cfg.Index)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { idx.Close() })
		// The Redis index declares itself shared (kvindex.Shared): the
		// router takes the load store from it, no client is handed over.
		r, err := NewRouter(routerConfig(t, cfg), reg, idx, quietLog())
		if err != nil {
			t.Fatal(err)
		}
		if r.shared == nil {
			t.Fatal("shared load is off with the redis backend")
		}
		return r
	}
	// An index that is not shared (memory) leaves each replica on its own
	// load, with the same extproc section.
	if alone, err := NewRouter(routerConfig(t, cfg), reg, kvindex.NewMemory(kvindex.MemoryConfig{}), quietLog()); err != nil || alone.shared != nil {
		t.Fatalf("with a memory index: err %v, shared load on %v", err, alone != nil && alone.shared != nil)
	}
	a, b := newReplica(), newReplica()
	done := make(chan struct{}, 2)
	for _, r := range []*Router{a, b} {
		go func() { r.Run(ctx); done <- struct{}{} }()
	}
	// The prompt's prefix is on workers[0], for both replicas (one index).
	body := chatBody("qwen3", strings.Repeat("The same long system prompt for every request of the burst. ", 20))
	res, err := reg.Chat(body)
	if err != nil {
		t.Fatal(err)
	}
	holder := kvfleet.WorkerID{Endpoint: workers[0]}
	if err := a.idx.Store(ctx, holder, kvfleet.TierDevice, kvindex.ChainBlocks(res.Sequence)); err != nil {
		t.Fatal(err)
	}
	// Replica A has a burst in flight on the holder.
	for range 64 {
		a.load.Begin(holder, int64(len(res.Tokens)), 64, time.Now())
	}
	poll.Until(t, "replica B to see A's burst", 10*time.Second, func() error {
		if got := b.shared.peerLoad(holder); got.InflightRequests != 64 {
			return fmt.Errorf("B's view of the holder %+v, want 64 in flight", got)
		}
		return nil
	})
	p := b.fleet.Load().pools["qwen3"]
	var m *kvindex.Match
	poll.Until(t, "the index match on B", 10*time.Second, func() error {
		if m = matchNow(b, p, res.Sequence, time.Now()); depthsIn(m, holder).Max() != len(res.Sequence) {
			return fmt.Errorf("match %v, want the holder at %d blocks", m.Map(), len(res.Sequence))
		}
		return nil
	})
	for _, c := range candidates(b, p, m) {
		if c.Worker.ID == holder && c.Load.InflightRequests != 64 {
			t.Fatalf("B's candidate for the holder carries %d in flight, want A's 64", c.Load.InflightRequests)
		}
	}
	req := picker.Request{Stage: picker.StageAggregated, PromptTokens: len(res.Tokens), BlockSize: 16, Blocks: len(res.Sequence), ExpectedOutputTokens: 256}
	dec, err := picker.Pick(req, candidates(b, p, m), b.pickConfig, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := candidates(b, p, m)[dec.Primary].Worker.ID; got == holder {
		t.Fatalf("B sent the next request to %s too, though A has 64 in flight there", got)
	}
	// Without A's load, B prefers the holder (the control for the line above).
	a.load.Sweep(time.Now().Add(time.Hour), 0)
	poll.Until(t, "A's finished burst to leave B's view", 10*time.Second, func() error {
		if got := b.shared.peerLoad(holder); got.InflightRequests != 0 {
			return fmt.Errorf("still counted on B: %+v", got)
		}
		return nil
	})
	dec, err = picker.Pick(req, candidates(b, p, m), b.pickConfig, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := candidates(b, p, m)[dec.Primary].Worker.ID; got != holder {
		t.Fatalf("with A idle, B chose %s over the prefix holder", got)
	}
	cancel()
	<-done
	<-done
}

func counterValue(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// Between two reads a replica extrapolates its peers' load from its own
// change since their snapshot (loadview/peers.go), scaled by their share of
// the traffic, which it derives from the routed counts they publish. Clocks
// are fixed so that which own sample is nearest each snapshot is known.
func TestSharedLoadExtrapolatesBetweenReads(t *testing.T) {
	client := redistest.Standalone(t).Client()
	ctx := context.Background()
	w := kvfleet.WorkerID{Endpoint: "10.0.0.1:8000"}
	aLoad := map[kvfleet.WorkerID]picker.Load{w: {InflightRequests: 1}}
	bLoad := map[kvfleet.WorkerID]picker.Load{w: {InflightRequests: 1}}
	aRouted, bRouted := uint64(10), uint64(10)
	a := newSharedLoad(client, "t:", sharedCfg("a", time.Minute), func() map[kvfleet.WorkerID]picker.Load { return aLoad }, func() uint64 { return aRouted }, quietLog())
	b := newSharedLoad(client, "t:", sharedCfg("b", time.Minute), func() map[kvfleet.WorkerID]picker.Load { return bLoad }, func() uint64 { return bRouted }, quietLog())
	base := time.UnixMilli(time.Now().UnixMilli())
	at := func(s *sharedLoad, d time.Duration) { s.now = func() time.Time { return base.Add(d) } }

	at(a, 0)
	a.round(ctx) // own sample at +0: {1}
	at(b, 10*time.Millisecond)
	b.round(ctx) // b's snapshot at +10: {1}, routed 10
	at(a, 40*time.Millisecond)
	a.round(ctx) // own sample at +40: {1}; reads b
	if got := a.peerLoad(w); got.InflightRequests != 1 {
		t.Fatalf("a reads b's published %+v, want 1 in flight", got)
	}
	// a routes 3 more to w before its next read. b's snapshot (+10) is
	// nearest a's +0 sample ({1}); with no traffic history yet b's share
	// is 1: b likely did the same, 1 + (4 − 1) = 4.
	now := picker.Load{InflightRequests: 4}
	if got := a.peerEstimate(w, now); got.InflightRequests != 4 {
		t.Fatalf("a's estimate of b on %s: %+v, want 4 in flight", w, got)
	}
	// a goes on routing (400 more) while b routes none: b's share falls to
	// (0+4)/(403+4) and the estimate stays at b's published 1
	// (1 + 4/407 × (4 − 1) rounds to 1; the nearest own sample to b's +60
	// snapshot is a's +40 one, {1}).
	aRouted = 413
	at(b, 60*time.Millisecond)
	b.round(ctx)
	at(a, 100*time.Millisecond)
	a.round(ctx)
	if got, want := a.peers.Load().Estimate(w, now), (picker.Load{InflightRequests: 1}); got != want {
		t.Fatalf("estimate of an idle peer: %+v, want its published %+v", got, want)
	}
	if got, want := gaugeValue(t, a.shareSum), 4.0/407.0; got < want-1e-9 || got > want+1e-9 {
		t.Fatalf("peer share gauge %v, want %v", got, want)
	}
	// A replica that publishes no routed count (an older build) is
	// assumed to get an even share.
	if err := client.Set(ctx, "t:load:old", `{"v":1,"at":`+strconv.FormatInt(base.Add(100*time.Millisecond).UnixMilli(), 10)+`,"workers":[]}`, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.HSet(ctx, "t:load-replicas", "old", "1").Err(); err != nil {
		t.Fatal(err)
	}
	at(a, 120*time.Millisecond)
	a.round(ctx)
	// b's counts decayed over the 20 ms since: 403·e^(−20ms/2s).
	if got, want := gaugeValue(t, a.shareSum), 1+4.0/(403*math.Exp(-0.01)+4); got < want-1e-9 || got > want+1e-9 {
		t.Fatalf("peer share gauge with an old peer %v, want %v", got, want)
	}
}

func gaugeValue(t *testing.T, g interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
