package kvindex

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/lab/testkit/poll"
	"github.com/kvgate/kvgate/lab/testkit/redistest"
)

// One standalone server and one 3-master cluster serve every Redis test
// and benchmark of this package, started on first use (so memory-only
// runs pay nothing) and stopped by TestMain. Tests stay apart by prefix.
var (
	redisOnce       sync.Once
	redisStandalone *redistest.Server
	redisCluster    *redistest.Cluster
	redisStartErr   error
	redisPrefixSeq  atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if redisStandalone != nil {
		redisStandalone.Close()
	}
	if redisCluster != nil {
		redisCluster.Close()
	}
	os.Exit(code)
}

func startRedis(t testing.TB) {
	t.Helper()
	redisOnce.Do(func() {
		ctx := context.Background()
		redisStandalone, redisStartErr = redistest.StartStandalone(ctx, redistest.Options{})
		if redisStartErr != nil {
			return
		}
		redisCluster, redisStartErr = redistest.StartCluster(ctx, redistest.ClusterOptions{Masters: 3})
	})
	if redisStartErr != nil {
		t.Fatalf("redis for tests: %v", redisStartErr)
	}
}

// redisTarget is one Redis deployment the tests run against.
type redisTarget struct {
	name      string
	client    func() redis.UniversalClient // shared, owned by the harness
	newClient func() redis.UniversalClient // fresh, caller closes
}

func redisTargets(t testing.TB) []redisTarget {
	startRedis(t)
	return []redisTarget{
		{"standalone", redisStandalone.Client, redisStandalone.NewClient},
		{"cluster", redisCluster.Client, redisCluster.NewClient},
	}
}

// uniquePrefix keeps tests that share a server apart.
func uniquePrefix(t testing.TB) string {
	name := strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	return fmt.Sprintf("t%d.%s:", redisPrefixSeq.Add(1), name)
}

func newTestRedis(t testing.TB, client redis.UniversalClient, cfg RedisConfig) *Redis {
	t.Helper()
	cfg.Client = client
	r, err := NewRedis(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

var tctx = context.Background()

func worker(i int) kvfleet.WorkerID {
	return kvfleet.WorkerID{Endpoint: fmt.Sprintf("10.1.0.%d:8000", i), DPRank: i % 2}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// matchMap is a Match read whole, for comparisons.
type matchMap = map[kvfleet.WorkerID]kvfleet.Depths

func matchOf(t testing.TB, idx Index, chain []uint64) matchMap {
	t.Helper()
	m, err := MatchMap(tctx, idx, chain)
	if err != nil {
		t.Fatalf("Match: %v", err)
	}
	return m
}

func expectMatch(t testing.TB, idx Index, chain []uint64, want matchMap) {
	t.Helper()
	got := matchOf(t, idx, chain)
	if !sameMatch(got, want) {
		t.Fatalf("Match(%x)\n got %v\nwant %v", chain, got, want)
	}
}

func sameMatch(a, b matchMap) bool {
	if len(a) != len(b) {
		return false
	}
	for w, d := range a {
		if e, ok := b[w]; !ok || e != d {
			return false
		}
	}
	return true
}

// all returns depths equal to n on every tier.
func all(n int) kvfleet.Depths {
	var d kvfleet.Depths
	for t := range d {
		d[t] = n
	}
	return d
}

func TestRedisStoreRemoveClearRemoveWorker(t *testing.T) {
	for _, tg := range redisTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			r := newTestRedis(t, tg.client(), RedisConfig{Prefix: uniquePrefix(t)})
			w1, w2 := worker(1), worker(2)
			chain := []uint64{11, 12, 13, 14}

			expectMatch(t, r, chain, matchMap{})
			blocks := ChainBlocks(chain)
			must(t, r.Store(tctx, w1, kvfleet.TierDevice, blocks[:3]))
			must(t, r.Store(tctx, w1, kvfleet.TierDevice, blocks[:3])) // idempotent
			must(t, r.Store(tctx, w2, kvfleet.TierDevice, blocks[:1]))
			expectMatch(t, r, chain, matchMap{w1: all(3), w2: all(1)})
			// A chain starting elsewhere matches nobody.
			expectMatch(t, r, []uint64{99, 11}, matchMap{})

			must(t, r.Remove(tctx, w1, kvfleet.TierDevice, blocks[1:2]))
			must(t, r.Remove(tctx, w1, kvfleet.TierDevice, ChainBlocks([]uint64{12345}))) // unknown: no-op
			must(t, r.Remove(tctx, w1, kvfleet.TierHost, blocks))                         // other tier: no-op
			expectMatch(t, r, chain, matchMap{w1: all(1), w2: all(1)})

			must(t, r.Clear(tctx, w1))
			expectMatch(t, r, chain, matchMap{w2: all(1)})
			must(t, r.Store(tctx, w1, kvfleet.TierDevice, blocks[:2]))
			expectMatch(t, r, chain, matchMap{w1: all(2), w2: all(1)})

			must(t, r.RemoveWorker(tctx, w2))
			must(t, r.RemoveWorker(tctx, w2)) // unknown: no-op
			expectMatch(t, r, chain, matchMap{w1: all(2)})
			// Back after removal: its old blocks stay forgotten. (chain[3:]
			// as a chain of its own: its first block is its segment's.)
			must(t, r.Store(tctx, w2, kvfleet.TierDevice, ChainBlocks(chain[3:])))
			expectMatch(t, r, chain, matchMap{w1: all(2)})
			expectMatch(t, r, chain[3:], matchMap{w2: all(1)})

			st, err := r.Stats(tctx)
			must(t, err)
			if st.Workers != 2 {
				t.Errorf("Stats.Workers = %d; want 2", st.Workers)
			}
		})
	}
}

func TestRedisMixedTierDepths(t *testing.T) {
	for _, tg := range redisTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			r := newTestRedis(t, tg.client(), RedisConfig{Prefix: uniquePrefix(t)})
			chain := []uint64{1, 2, 3, 4, 5}
			w1, w2, w3 := worker(1), worker(2), worker(3)
			// w1: fastest tiers per block device, host, disk, device, (none).
			must(t, r.Store(tctx, w1, kvfleet.TierDevice, placed(chain, []uint64{1, 4})))
			must(t, r.Store(tctx, w1, kvfleet.TierHost, placed(chain, []uint64{2})))
			must(t, r.Store(tctx, w1, kvfleet.TierDisk, placed(chain, []uint64{3})))
			// w2: block 1 external only.
			must(t, r.Store(tctx, w2, kvfleet.TierExternal, placed(chain, []uint64{1})))
			// w3: block 1 on host and device, block 2 on disk then also host,
			// blocks 3..5 on device: fastest tiers device, host, device...
			must(t, r.Store(tctx, w3, kvfleet.TierHost, placed(chain, []uint64{1})))
			must(t, r.Store(tctx, w3, kvfleet.TierDevice, placed(chain, []uint64{1, 3, 4, 5})))
			must(t, r.Store(tctx, w3, kvfleet.TierDisk, placed(chain, []uint64{2})))
			must(t, r.Store(tctx, w3, kvfleet.TierHost, placed(chain, []uint64{2})))
			expectMatch(t, r, chain, matchMap{
				w1: {1, 2, 4, 4},
				w2: {0, 0, 0, 1},
				w3: {1, 5, 5, 5},
			})
			// Dropping w3's host copy of block 2 leaves disk.
			must(t, r.Remove(tctx, w3, kvfleet.TierHost, placed(chain, []uint64{2})))
			expectMatch(t, r, chain, matchMap{
				w1: {1, 2, 4, 4},
				w2: {0, 0, 0, 1},
				w3: {1, 1, 5, 5},
			})
		})
	}
}

// A chain whose first block this instance never found held is probed
// with its first segment alone: a miss at block 0 costs one key.
func TestRedisMatchStopsEarly(t *testing.T) {
	startRedis(t)
	r := newTestRedis(t, redisStandalone.Client(), RedisConfig{Prefix: uniquePrefix(t)})
	chain := make([]uint64, 1000)
	for i := range chain {
		chain[i] = uint64(i + 1)
	}
	must(t, r.Store(tctx, worker(1), kvfleet.TierDevice, ChainBlocks(chain[:6])))
	expectMatch(t, r, chain, matchMap{worker(1): all(6)})
	// The probe: one segment key, its 64 blocks; the miss at block 6 is
	// in it, so no second round trip.
	c := r.Counters()
	if c.MatchRoundTrips != 1 || c.MatchKeysRead != 1 || c.MatchBlocksRead != SegmentBlocks {
		t.Fatalf("round trips %d, keys %d, blocks %d; want 1, 1 and %d", c.MatchRoundTrips, c.MatchKeysRead, c.MatchBlocksRead, SegmentBlocks)
	}
	// Nobody holds the first block: one round trip, one key.
	expectMatch(t, r, chain[10:], matchMap{})
	if c2 := r.Counters(); c2.MatchRoundTrips != 2 || c2.MatchKeysRead != 2 {
		t.Fatalf("round trips %d, keys %d after a miss at block 0; want 2 and 2", c2.MatchRoundTrips, c2.MatchKeysRead)
	}
}

// A Match of a chain whose first block was last found held is one
// pipelined round trip reading one key per segment, on standalone and on
// Cluster (where the pipeline spans the masters the segments live on); a
// chain starting anywhere else is probed with its first segment, so a
// miss at block 0 reads one key and a hit takes a second round trip for
// the rest. Only a chain longer than redisMaxMatchSegments segments takes
// more.
func TestRedisMatchOneRoundTrip(t *testing.T) {
	for _, tg := range redisTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			r := newTestRedis(t, tg.client(), RedisConfig{Prefix: prefix})
			t.Cleanup(func() { dropPrefix(t, tg.client(), prefix) })
			var last RedisCounters
			expectReads := func(what string, roundTrips, keys, blocks int64) {
				t.Helper()
				c := r.Counters()
				rt, k, b := c.MatchRoundTrips-last.MatchRoundTrips, c.MatchKeysRead-last.MatchKeysRead, c.MatchBlocksRead-last.MatchBlocksRead
				if rt != roundTrips || k != keys || b != blocks {
					t.Fatalf("%s: %d round trips reading %d keys, %d blocks; want %d, %d, %d", what, rt, k, b, roundTrips, keys, blocks)
				}
				last = c
			}
			chain := make([]uint64, 8*SegmentBlocks)
			for i := range chain {
				chain[i] = uint64(i+1) << 20
			}
			must(t, r.Store(tctx, worker(1), kvfleet.TierDevice, ChainBlocks(chain[:300])))
			must(t, r.Store(tctx, worker(2), kvfleet.TierHost, ChainBlocks(chain[:40])))
			want := matchMap{worker(1): all(300), worker(2): {0, 40, 40, 40}}
			expectMatch(t, r, chain, want)
			expectReads("first match", 2, 8, int64(len(chain)))
			expectMatch(t, r, chain, want)
			expectReads("second match", 1, 8, int64(len(chain)))
			miss := make([]uint64, len(chain))
			for i := range miss {
				miss[i] = chain[i] + 1 // stored by nobody
			}
			expectMatch(t, r, miss, matchMap{})
			expectReads("miss at block 0", 1, 1, SegmentBlocks)
			// Once nobody holds the first block the chain is read whole
			// one last time, then probed again.
			must(t, r.Clear(tctx, worker(1)))
			must(t, r.Clear(tctx, worker(2)))
			expectMatch(t, r, chain, matchMap{})
			expectReads("match after the holders cleared", 1, 8, int64(len(chain)))
			expectMatch(t, r, chain, matchMap{})
			expectReads("next match", 1, 1, SegmentBlocks)
			long := make([]uint64, redisMaxMatchSegments*SegmentBlocks+10)
			for i := range long {
				long[i] = uint64(i+1) << 24
			}
			must(t, r.Store(tctx, worker(3), kvfleet.TierDevice, ChainBlocks(long)))
			expectMatch(t, r, long, matchMap{worker(3): all(len(long))})
			// One segment, then the remaining 64 at once.
			expectReads("long chain, first match", 2, redisMaxMatchSegments+1, int64(len(long)))
			expectMatch(t, r, long, matchMap{worker(3): all(len(long))})
			// 64 segments, then 1.
			expectReads("long chain, second match", 2, redisMaxMatchSegments+1, int64(len(long)))
		})
	}
}

// The first-block memory stays bounded: when full it starts over, and a
// chain found held by nobody is forgotten at once.
func TestRedisFirstHeldBounded(t *testing.T) {
	var f redisFirstHeld
	for h := uint64(1); h <= redisFirstHeldKeep; h++ {
		f.note(h, true)
	}
	if !f.seen(1) || !f.seen(redisFirstHeldKeep) || len(f.held) != redisFirstHeldKeep {
		t.Fatalf("after %d notes: %d kept, first seen %v, last seen %v", redisFirstHeldKeep, len(f.held), f.seen(1), f.seen(redisFirstHeldKeep))
	}
	f.note(redisFirstHeldKeep+1, true)
	if len(f.held) != 1 || !f.seen(redisFirstHeldKeep+1) || f.seen(1) {
		t.Fatalf("one past full: %d kept (want 1, the newest)", len(f.held))
	}
	f.note(redisFirstHeldKeep+1, false)
	if f.seen(redisFirstHeldKeep+1) || len(f.held) != 0 {
		t.Fatalf("a chain held by nobody is still remembered (%d kept)", len(f.held))
	}
}

// A Match that finds the registry snapshot past half its staleness bound
// gets it as is and has it reloaded in the background; a Match finds it
// past the bound only if that reload failed, and then waits for one.
func TestRedisRegistryReloadsAhead(t *testing.T) {
	startRedis(t)
	r := newTestRedis(t, redisStandalone.Client(), RedisConfig{Prefix: uniquePrefix(t), RegistryStaleness: time.Second})
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	r.now = func() time.Time { return time.Unix(0, clock.Load()) }
	chain := []uint64{1, 2, 3}
	must(t, r.Store(tctx, worker(1), kvfleet.TierDevice, ChainBlocks(chain)))
	expectMatch(t, r, chain, matchMap{worker(1): all(3)})
	c := r.Counters()
	if c.RegistryReloads != 1 || c.RegistryWaits != 1 {
		t.Fatalf("first match: reloads %d, waits %d; want 1 and 1", c.RegistryReloads, c.RegistryWaits)
	}
	// Past half the bound: answered from the snapshot, reloaded behind.
	clock.Add(int64(600 * time.Millisecond))
	expectMatch(t, r, chain, matchMap{worker(1): all(3)})
	poll.True(t, "a background reload after a match past half the staleness bound", 10*time.Second,
		func() bool { return r.Counters().RegistryReloads >= 2 })
	if w := r.Counters().RegistryWaits; w != 1 {
		t.Fatalf("waits %d after the background reload; want 1", w)
	}
	// The renewed snapshot serves the next match within its bound...
	clock.Add(int64(400 * time.Millisecond))
	expectMatch(t, r, chain, matchMap{worker(1): all(3)})
	// ...and one past the bound is reloaded while the match waits.
	clock.Add(int64(2 * time.Second))
	expectMatch(t, r, chain, matchMap{worker(1): all(3)})
	if w := r.Counters().RegistryWaits; w != 2 {
		t.Fatalf("waits %d after a match past the bound; want 2", w)
	}
}

func TestRedisSecondReplicaSeesWrites(t *testing.T) {
	for _, tg := range redisTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			a := newTestRedis(t, tg.client(), RedisConfig{Prefix: prefix, RegistryStaleness: 20 * time.Millisecond})
			other := tg.newClient()
			defer other.Close()
			b := newTestRedis(t, other, RedisConfig{Prefix: prefix, RegistryStaleness: 20 * time.Millisecond})
			chain := []uint64{7, 8, 9}
			must(t, a.Store(tctx, worker(1), kvfleet.TierHost, ChainBlocks(chain)))
			waitMatch(t, b, chain, matchMap{worker(1): {0, 3, 3, 3}})
			// b takes over worker 1 (its indexer moved) and clears it; a sees
			// that within the staleness bound.
			must(t, b.Clear(tctx, worker(1)))
			must(t, b.Store(tctx, worker(1), kvfleet.TierDevice, ChainBlocks(chain[:1])))
			expectMatch(t, b, chain, matchMap{worker(1): all(1)})
			waitMatch(t, a, chain, matchMap{worker(1): all(1)})
			must(t, b.RemoveWorker(tctx, worker(1)))
			waitMatch(t, a, chain, matchMap{})
		})
	}
}

// waitMatch polls until idx returns want, for changes made through another
// instance (visible within its registry staleness).
func waitMatch(t testing.TB, idx Index, chain []uint64, want matchMap) {
	t.Helper()
	poll.Until(t, fmt.Sprintf("Match(%x) = %v", chain, want), 10*time.Second, func() error {
		if got := matchOf(t, idx, chain); !sameMatch(got, want) {
			return fmt.Errorf("still %v", got)
		}
		return nil
	})
}

// waitFor waits for cond (lab/testkit/poll), failing after 15s with what.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	poll.True(t, what, 15*time.Second, cond)
}

func TestRedisWorkerExpiresWithoutHeartbeat(t *testing.T) {
	for _, tg := range redisTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			// The steps before the writer's Close assume its heartbeats (every
			// WorkerTTL/3) land in time. With 600 ms a loaded 2-core machine
			// starved the heartbeat goroutine or redis-server past the TTL and
			// the worker expired while its writer still ran (issue 31, finding
			// 9: failed once in a helper's run); 3 s leaves a 2 s slack, as
			// the replica test below has, and the expiry wait (10 s) covers it.
			cfg := RedisConfig{Prefix: prefix, WorkerTTL: 3 * time.Second, RegistryStaleness: 20 * time.Millisecond}
			writer, err := NewRedis(tctx, RedisConfig{Client: tg.client(), Prefix: cfg.Prefix, WorkerTTL: cfg.WorkerTTL, RegistryStaleness: cfg.RegistryStaleness})
			must(t, err)
			defer writer.Close()
			reader := newTestRedis(t, tg.client(), cfg)
			chain := []uint64{21, 22}
			must(t, writer.Store(tctx, worker(5), kvfleet.TierDevice, ChainBlocks(chain)))
			expectMatch(t, reader, chain, matchMap{worker(5): all(2)})

			// Heartbeats push alive-until forward while the writer runs.
			first := aliveUntil(t, tg.client(), prefix, worker(5))
			waitFor(t, "two heartbeats", func() bool { return writer.Counters().Heartbeats >= 2 })
			if later := aliveUntil(t, tg.client(), prefix, worker(5)); later <= first {
				t.Fatalf("alive-until %d did not advance past %d after heartbeats", later, first)
			}
			expectMatch(t, reader, chain, matchMap{worker(5): all(2)})

			// The writer's process dies: nobody heartbeats worker 5.
			writer.Close()
			waitMatch(t, reader, chain, matchMap{})
			st, err := reader.Stats(tctx)
			must(t, err)
			if st.Workers != 0 {
				t.Errorf("Stats.Workers = %d for an expired worker; want 0", st.Workers)
			}

			// A new indexer for worker 5: its old blocks must not come back.
			revived := newTestRedis(t, tg.client(), cfg)
			must(t, revived.Store(tctx, worker(5), kvfleet.TierDevice, ChainBlocks([]uint64{30})))
			expectMatch(t, revived, chain, matchMap{})
			expectMatch(t, revived, []uint64{30}, matchMap{worker(5): all(1)})
			waitMatch(t, reader, []uint64{30}, matchMap{worker(5): all(1)})
			if writer.Store(tctx, worker(5), kvfleet.TierDevice, ChainBlocks(chain)) == nil {
				t.Error("Store on a closed index: no error")
			}
		})
	}
}

func aliveUntil(t testing.TB, c redis.UniversalClient, prefix string, w kvfleet.WorkerID) int64 {
	t.Helper()
	num, err := c.HGet(tctx, prefix+"workers", "id:"+w.String()).Result()
	must(t, err)
	v, err := c.HGet(tctx, prefix+"workers", "a:"+num).Int64()
	must(t, err)
	return v
}

func TestRedisPrunesStaleEntries(t *testing.T) {
	for _, tg := range redisTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			r := newTestRedis(t, tg.client(), RedisConfig{Prefix: prefix})
			c := tg.client()
			chain := []uint64{41, 42, 43}
			must(t, r.Store(tctx, worker(1), kvfleet.TierDevice, ChainBlocks(chain)))
			must(t, r.Store(tctx, worker(2), kvfleet.TierHost, ChainBlocks(chain)))
			must(t, r.Clear(tctx, worker(1)))
			must(t, r.RemoveWorker(tctx, worker(2)))
			key, f41, f42 := r.segKey(41), blockField(41), blockField(42)
			stale, err := c.HGet(tctx, key, f41).Result()
			must(t, err)
			// Junk a buggy or foreign writer might leave behind, and a
			// worker number from the future (another replica registered it
			// after this one's snapshot), which must be left alone.
			next, err := c.HGet(tctx, prefix+"workers", "next").Int64()
			must(t, err)
			future := strconv.FormatInt(next+1000, 10) + ":0:0"
			must(t, c.HSet(tctx, key, f41, stale+",junk,1:9:0,7:0:notanumber,"+future).Err())
			expectMatch(t, r, chain, matchMap{})
			waitFor(t, "stale entries pruned", func() bool {
				v, err := c.HGet(tctx, key, f41).Result()
				must(t, err)
				return v == future
			})
			// Match stopped at block 41, so 42 and 43 keep their stale
			// entries until a Match reaches them or their segment's TTL ends.
			if v := c.HGet(tctx, key, f42).Val(); strings.Count(v, ",") != 1 {
				t.Fatalf("block 42 holds %q; want its 2 stale entries (not visited)", v)
			}
			if ttl := c.PTTL(tctx, key).Val(); ttl <= 0 || ttl > time.Hour {
				t.Fatalf("segment TTL %v; want in (0, 1h]", ttl)
			}
		})
	}
}

func TestRedisPruneKeepsRewrittenEntry(t *testing.T) {
	startRedis(t)
	r := newTestRedis(t, redisStandalone.Client(), RedisConfig{Prefix: uniquePrefix(t)})
	c := redisStandalone.Client()
	must(t, c.HSet(tctx, r.segKey(5), blockField(5), "1:0:3,2:0:4").Err())
	// Match saw epoch 2 for 1:0 and 4 for 2:0; 1:0 has since been rewritten.
	r.pruneBatch([]redisPrune{{5, 5, "1:0:2"}, {5, 5, "2:0:4"}, {5, 5, "2:0:4"}})
	got, err := c.HGetAll(tctx, r.segKey(5)).Result()
	must(t, err)
	if len(got) != 1 || got[blockField(5)] != "1:0:3" {
		t.Fatalf("after prune: %v; want only 1:0:3", got)
	}
	if n := r.Counters().Pruned; n != 1 {
		t.Fatalf("Pruned = %d; want 1", n)
	}
	// The last entry gone, the field goes, and Redis drops the empty key.
	r.pruneBatch([]redisPrune{{5, 5, "1:0:3"}})
	if n := c.Exists(tctx, r.segKey(5)).Val(); n != 0 {
		t.Fatalf("segment key left after its last entry was pruned")
	}
}

func TestRedisIgnoresCorruptRegistry(t *testing.T) {
	startRedis(t)
	r := newTestRedis(t, redisStandalone.Client(), RedisConfig{Prefix: uniquePrefix(t)})
	c := redisStandalone.Client()
	must(t, r.Store(tctx, worker(1), kvfleet.TierDevice, ChainBlocks([]uint64{1, 2})))
	must(t, c.HSet(tctx, r.registryKey, "w:x", "a#1", "w:77", "no-rank", "w:78", "ok:1#0", "e:78", "-5", "w:79", "ok:2#0", "a:79", "soon").Err())
	expectMatch(t, r, []uint64{1, 2}, matchMap{worker(1): all(2)})
	if n := r.Counters().RegistryBadRows; n != 4 {
		t.Fatalf("RegistryBadRows = %d; want 4", n)
	}
}

func TestRedisRejectsBadInput(t *testing.T) {
	startRedis(t)
	c := redisStandalone.Client()
	for _, cfg := range []RedisConfig{
		{},
		{Client: c, Prefix: "{tag}:"},
		{Client: c, Prefix: strings.Repeat("p", 200)},
		{Client: c, BlockTTL: time.Millisecond},
		{Client: c, WorkerTTL: time.Millisecond},
		{Client: c, WorkerTTL: time.Second, RegistryStaleness: time.Second},
		{Client: c, RegistryStaleness: -1},
	} {
		if r, err := NewRedis(tctx, cfg); err == nil {
			r.Close()
			t.Errorf("NewRedis(%+v): no error", cfg)
		}
	}
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer dead.Close()
	if _, err := NewRedis(tctx, RedisConfig{Client: dead}); err == nil || !strings.Contains(err.Error(), "redis index: ping") {
		t.Errorf("NewRedis on a dead server: err = %v; want a ping error", err)
	}

	r := newTestRedis(t, c, RedisConfig{Prefix: uniquePrefix(t)})
	if err := r.Store(tctx, worker(1), kvfleet.NumTiers, ChainBlocks([]uint64{1})); err == nil {
		t.Error("Store on tier NumTiers: no error")
	}
	if err := r.Store(tctx, kvfleet.WorkerID{}, kvfleet.TierDevice, ChainBlocks([]uint64{1})); err == nil {
		t.Error("Store for an empty worker id: no error")
	}
	if err := r.Store(tctx, kvfleet.WorkerID{Endpoint: "x:1", DPRank: -1}, kvfleet.TierDevice, ChainBlocks([]uint64{1})); err == nil {
		t.Error("Store for a negative rank: no error")
	}
	if err := r.Store(tctx, worker(1), kvfleet.TierDevice, make([]Block, redisMaxHashesPerCall+1)); err == nil {
		t.Error("Store of too many hashes: no error")
	}
	if _, err := MatchMap(tctx, r, make([]uint64, redisMaxChain+1)); err == nil || !strings.Contains(err.Error(), "redis index: match") {
		t.Errorf("Match of an over-long chain: err = %v", err)
	}
	if m, err := MatchMap(tctx, r, nil); err != nil || len(m) != 0 {
		t.Errorf("Match(nil) = %v, %v; want empty", m, err)
	}
	cctx, cancel := context.WithCancel(tctx)
	cancel()
	if _, err := MatchMap(cctx, r, []uint64{1}); err == nil {
		t.Error("Match with a cancelled context: no error")
	}
}

func TestRedisStatsExactOnSmallKeyspace(t *testing.T) {
	for _, tg := range redisTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			r := newTestRedis(t, tg.client(), RedisConfig{Prefix: uniquePrefix(t)})
			hashes := make([]uint64, 300)
			for i := range hashes {
				hashes[i] = uint64(1000 + i)
			}
			blocks := ChainBlocks(hashes)
			must(t, r.Store(tctx, worker(1), kvfleet.TierDevice, blocks))
			must(t, r.Store(tctx, worker(2), kvfleet.TierDevice, blocks[:100]))
			must(t, r.Store(tctx, worker(2), kvfleet.TierHost, blocks[:50]))
			st, err := r.Stats(tctx)
			must(t, err)
			if st != (Stats{Blocks: 300, Entries: 450, Workers: 2}) {
				t.Fatalf("Stats = %+v; want 300 blocks, 450 entries, 2 workers", st)
			}
		})
	}
}

// TestRedisClusterNoCrossSlot matches a chain whose segments fall in many
// slots on every master: any multi-key command across them would fail.
// Each segment is one key, so a segment's blocks share a slot.
func TestRedisClusterNoCrossSlot(t *testing.T) {
	startRedis(t)
	c := redisCluster.Client().(*redis.ClusterClient)
	r := newTestRedis(t, c, RedisConfig{Prefix: uniquePrefix(t)})
	const segs = 24
	chain := make([]uint64, segs*SegmentBlocks)
	for i := range chain {
		chain[i] = uint64(i)*0x9E3779B97F4A7C15 + 1
	}
	blocks := ChainBlocks(chain)
	must(t, r.Store(tctx, worker(1), kvfleet.TierDevice, blocks))
	must(t, r.Store(tctx, worker(2), kvfleet.TierHost, blocks[:1000]))
	must(t, r.Clear(tctx, worker(3)))
	expectMatch(t, r, chain, matchMap{worker(1): all(len(chain)), worker(2): {0, 1000, 1000, 1000}})
	// The probe reads the first segment, the second round trip the rest:
	// one key per segment.
	if k := r.Counters().MatchKeysRead; k != segs {
		t.Fatalf("read %d keys for %d segments; want %d", k, segs, segs)
	}
	must(t, r.Remove(tctx, worker(1), kvfleet.TierDevice, blocks[750:]))
	expectMatch(t, r, chain, matchMap{worker(1): all(750), worker(2): {0, 1000, 1000, 1000}})

	slots := map[int64]bool{}
	for k := range segs {
		s, err := c.ClusterKeySlot(tctx, r.segKey(chain[k*SegmentBlocks])).Result()
		must(t, err)
		slots[s] = true
	}
	var mu sync.Mutex
	perMaster := map[string]int{}
	must(t, c.ForEachMaster(tctx, func(ctx context.Context, m *redis.Client) error {
		keys, _, err := m.Scan(ctx, 0, r.prefix+"v2:s:*", 10000).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		perMaster[m.Options().Addr] = len(keys)
		mu.Unlock()
		return nil
	}))
	// Blocks 1000.. lost their last entry with the Remove: Redis deletes
	// an emptied hash, so the 16 segments holding blocks 0..999 remain.
	total, holding := 0, 0
	for _, n := range perMaster {
		total += n
		if n > 0 {
			holding++
		}
	}
	if len(perMaster) != 3 || holding < 2 || total != 16 || len(slots) < segs-1 {
		t.Fatalf("keys per master %v (total %d), %d distinct slots; want 3 masters (2 or more holding keys), 16 keys, >= %d slots", perMaster, total, len(slots), segs-1)
	}
}

func TestRedisSegmentKeyAndEntry(t *testing.T) {
	r := &Redis{prefix: "kv:"}
	if got := r.segKey(0xfedcba9876543210); got != "kv:v2:s:{fedcba9876543210}" {
		t.Fatalf("segKey = %q", got)
	}
	if got := blockField(1); got != strings.Repeat("0", 15)+"1" {
		t.Fatalf("blockField(1) = %q", got)
	}
	for _, tc := range []struct {
		e     string
		num   int64
		tier  kvfleet.Tier
		epoch int64
		ok    bool
	}{
		{"12:3:7", 12, 3, 7, true},
		{"1:0:0", 1, 0, 0, true},
		{"0:0:0", 0, 0, 0, false},
		{"-1:0:0", 0, 0, 0, false},
		{"1:4:0", 0, 0, 0, false},
		{"1:0:", 0, 0, 0, false},
		{"1:0:-1", 0, 0, 0, false},
		{"1:0", 0, 0, 0, false},
		{":1:1", 0, 0, 0, false},
		{"1:11:1", 0, 0, 0, false},
		{"x", 0, 0, 0, false},
		{"99999999999999999999:1:1", 0, 0, 0, false},
	} {
		num, tier, epoch, ok := parseEntry(tc.e)
		if ok != tc.ok || (ok && (num != tc.num || tier != tc.tier || epoch != tc.epoch)) {
			t.Errorf("parseEntry(%q) = %d, %d, %d, %v; want %d, %d, %d, %v", tc.e, num, tier, epoch, ok, tc.num, tc.tier, tc.epoch, tc.ok)
		}
	}
	for num := int64(1); num < 3; num++ {
		for tier := kvfleet.Tier(0); tier < kvfleet.NumTiers; tier++ {
			if n, tr, ep, ok := parseEntry(entryHead(num, tier) + "5"); !ok || n != num || tr != tier || ep != 5 {
				t.Errorf("round trip of (%d, %d, 5): %d, %d, %d, %v", num, tier, n, tr, ep, ok)
			}
		}
	}
}

// FuzzRedisApplyBlock feeds arbitrary block values (as another writer or
// a corrupted keyspace could leave them) through Match's interpretation:
// it must not panic, and depths must stay well-formed.
func FuzzRedisApplyBlock(f *testing.F) {
	f.Add("1:0:0,2:3:1", "2:1:1,1:2:0", int64(0))
	f.Add("junk,1:9:0,,", "1:0:notanumber", int64(5))
	f.Fuzz(func(t *testing.T, b0, b1 string, epoch int64) {
		if len(b0)+len(b1) > 4096 {
			return
		}
		r := &Redis{prune: make(chan redisPrune, 8), workerTTL: time.Second}
		reg := &redisRegistry{next: 3, workers: map[int64]redisWorkerState{
			1: {id: worker(1), epoch: epoch, aliveUntil: 1 << 62},
			2: {id: worker(2), aliveUntil: 1 << 62},
			3: {id: worker(3), aliveUntil: 0},
		}}
		m := newRedisMatch(reg, 1000, 0)
		for pos, raw := range []string{b0, b1} {
			r.applyBlock(m, pos, 0, uint64(pos), raw)
		}
		var got Match
		m.result(&got)
		for w, d := range got.All() {
			if w == worker(3) {
				t.Fatalf("expired worker matched: %v", d)
			}
			if d.Max() < 1 || d.Max() > 2 {
				t.Fatalf("worker %v depth %v: want max in 1..2", w, d)
			}
			for i := 1; i < len(d); i++ {
				if d[i] < d[i-1] {
					t.Fatalf("worker %v depths %v decrease", w, d)
				}
			}
		}
	})
}

func TestParseRedisRegistryBounds(t *testing.T) {
	raw := map[string]string{}
	for i := 0; i <= 4*redisMaxRegistryWorkers+1; i++ {
		raw["x"+strconv.Itoa(i)] = ""
	}
	if _, _, err := parseRedisRegistry(raw); err == nil {
		t.Fatal("oversized registry: no error")
	}
}

// TestRedisHeartbeatFollowsRegistry covers what a heartbeat learns: a
// worker that expired (this process stalled past WorkerTTL) comes back with
// a new epoch, hiding blocks stored before; a worker removed by another
// replica is re-registered by the next write.
func TestRedisHeartbeatFollowsRegistry(t *testing.T) {
	startRedis(t)
	c := redisStandalone.Client()
	prefix := uniquePrefix(t)
	// The stall is simulated by rewriting the registry, not by waiting out
	// the TTL, so the TTL is generous: a loaded machine that starves the
	// heartbeat for 600ms must not expire the live workers mid-test.
	cfg := RedisConfig{Prefix: prefix, WorkerTTL: 3 * time.Second, RegistryStaleness: 20 * time.Millisecond}
	a := newTestRedis(t, c, cfg)
	b := newTestRedis(t, c, cfg)
	must(t, a.Store(tctx, worker(1), kvfleet.TierDevice, ChainBlocks([]uint64{1, 2})))
	must(t, a.Store(tctx, worker(2), kvfleet.TierDevice, ChainBlocks([]uint64{1, 2})))

	num, err := c.HGet(tctx, prefix+"workers", "id:"+worker(1).String()).Result()
	must(t, err)
	must(t, c.HSet(tctx, prefix+"workers", "a:"+num, 0).Err()) // as if a stalled
	waitFor(t, "a heartbeat to revive worker 1", func() bool { return a.Counters().WorkersRevived >= 1 })
	must(t, a.Store(tctx, worker(1), kvfleet.TierDevice, ChainBlocks([]uint64{1})))
	expectMatch(t, a, []uint64{1, 2}, matchMap{worker(1): all(1), worker(2): all(2)})

	must(t, b.RemoveWorker(tctx, worker(2)))
	waitFor(t, "a heartbeat to notice worker 2's removal", func() bool { return a.Counters().WorkersRemovedElsewhere >= 1 })
	must(t, a.Store(tctx, worker(2), kvfleet.TierHost, ChainBlocks([]uint64{1})))
	expectMatch(t, a, []uint64{1, 2}, matchMap{worker(1): all(1), worker(2): {0, 1, 1, 1}})
	waitMatch(t, b, []uint64{1, 2}, matchMap{worker(1): all(1), worker(2): {0, 1, 1, 1}})
}

// TestRedisConcurrentWritersAndMatches runs one writer per worker (the
// Index contract) alongside matches; with -race it checks the locking.
func TestRedisConcurrentWritersAndMatches(t *testing.T) {
	startRedis(t)
	r := newTestRedis(t, redisCluster.Client(), RedisConfig{Prefix: uniquePrefix(t)})
	chain := make([]uint64, 40)
	for i := range chain {
		chain[i] = uint64(i + 1)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 1; k <= len(chain); k += 3 {
				if err := r.Store(tctx, worker(w), kvfleet.TierDevice, ChainBlocks(chain[:k])); err != nil {
					errs <- err
					return
				}
			}
			if err := r.Clear(tctx, worker(w)); err != nil {
				errs <- err
				return
			}
			errs <- r.Store(tctx, worker(w), kvfleet.Tier(w), ChainBlocks(chain))
		}()
	}
	for q := 0; q < 20; q++ {
		if _, err := MatchMap(tctx, r, chain); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	want := matchMap{}
	for w := 0; w < 4; w++ {
		var d kvfleet.Depths
		for tier := w; tier < int(kvfleet.NumTiers); tier++ {
			d[tier] = len(chain)
		}
		want[worker(w)] = d
	}
	expectMatch(t, r, chain, want)
}

// When the index's data vanishes (FLUSHALL, a restart without
// persistence; here: this test's keys deleted), Generation changes, and
// the instance's cached worker numbers are dropped: a worker registered
// after the wipe never inherits an old number.
func TestRedisGenerationChangesWhenDataIsLost(t *testing.T) {
	for _, tg := range redisTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			r := newTestRedis(t, tg.client(), RedisConfig{Prefix: prefix})
			c := tg.client()
			g1, err := r.Generation(tctx)
			must(t, err)
			if g, err := r.Generation(tctx); err != nil || g != g1 {
				t.Fatalf("generation moved without a wipe: %q -> %q (%v)", g1, g, err)
			}
			must(t, r.Store(tctx, worker(1), kvfleet.TierDevice, ChainBlocks([]uint64{7})))
			oldNum := r.writers[worker(1)].num
			for _, k := range []string{prefix + "gen", prefix + "workers", prefix + "schema", r.segKey(7)} {
				must(t, c.Del(tctx, k).Err())
			}
			g2, err := r.Generation(tctx)
			must(t, err)
			if g2 == g1 || r.Counters().Wipes != 1 {
				t.Fatalf("generation %q -> %q, wipes %d: want a new token and one wipe", g1, g2, r.Counters().Wipes)
			}
			if len(r.writers) != 0 {
				t.Fatalf("cached writers survived the wipe: %v", r.writers)
			}
			must(t, r.Store(tctx, worker(2), kvfleet.TierDevice, ChainBlocks([]uint64{8})))
			must(t, r.Store(tctx, worker(1), kvfleet.TierDevice, ChainBlocks([]uint64{7})))
			if n1, n2 := r.writers[worker(1)].num, r.writers[worker(2)].num; n2 == oldNum || n1 == n2 {
				t.Fatalf("numbers after the wipe: worker1 %d, worker2 %d, worker1 before %d", n1, n2, oldNum)
			}
			expectMatch(t, r, []uint64{7}, matchMap{worker(1): {1, 1, 1, 1}})
			expectMatch(t, r, []uint64{8}, matchMap{worker(2): {1, 1, 1, 1}})
		})
	}
}
