//go:build unix

package kvindex

import (
	"context"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/lab/testkit/redistest"
)

// BenchmarkRedisMatch measures Match latency against real servers over
// loopback: a fleet of 16 workers holding prefixes (on mixed tiers) of a
// few shared chains, queried with full chains. Per-op p50/p99 are reported
// in microseconds because the tail, not the mean, bounds routing latency.
// CPU per op, this process's and the Redis servers' (INFO cpu, summed over
// masters), is reported too: on a shared machine wall times swing with the
// load, CPU per match much less.
func BenchmarkRedisMatch(b *testing.B) {
	for _, tg := range redisTargets(b) {
		for _, chainLen := range []int{32, 128, 512} {
			name := tg.name + "/chain=" + strconv.Itoa(chainLen)
			b.Run(name, func(b *testing.B) { benchRedisMatch(b, tg.client(), chainLen, false) })
		}
		b.Run(tg.name+"/miss/chain=128", func(b *testing.B) { benchRedisMatch(b, tg.client(), 128, true) })
	}
}

func benchRedisMatch(b *testing.B, client redis.UniversalClient, chainLen int, miss bool) {
	prefix := uniquePrefix(b)
	r := newTestRedis(b, client, RedisConfig{Prefix: prefix})
	b.Cleanup(func() { dropPrefix(b, client, prefix) })
	rng := rand.New(rand.NewSource(1))
	chains := make([][]uint64, 4)
	for i := range chains {
		chains[i] = propHashes(rng, chainLen)
	}
	for w := 0; w < 16; w++ {
		c := chains[w%len(chains)]
		held := chainLen/2 + rng.Intn(chainLen/2+1)
		blocks := ChainBlocks(c[:held])
		must(b, r.Store(tctx, worker(w), kvfleet.TierDevice, blocks[:held/2]))
		must(b, r.Store(tctx, worker(w), kvfleet.Tier(1+w%3), blocks[held/2:]))
	}
	queries := chains
	if miss {
		queries = [][]uint64{propHashes(rng, chainLen)}
	}
	lat := make([]time.Duration, 0, b.N)
	server0 := serverCPU(b, client)
	client0 := processCPU()
	var m Match
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		err := r.Match(tctx, queries[i%len(queries)], &m)
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if !miss && m.Len() == 0 {
			b.Fatal("empty match on a stored chain")
		}
	}
	b.StopTimer()
	b.ReportMetric((processCPU()-client0).Seconds()*1e6/float64(b.N), "client-cpu-µs/op")
	b.ReportMetric((serverCPU(b, client)-server0).Seconds()*1e6/float64(b.N), "server-cpu-µs/op")
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	c := r.Counters()
	b.ReportMetric(float64(c.MatchRoundTrips)/float64(max(c.Matches, 1)), "roundtrips/op")
}

// BenchmarkRedisStore measures storing a 32-block event batch.
func BenchmarkRedisStore(b *testing.B) {
	for _, tg := range redisTargets(b) {
		b.Run(tg.name, func(b *testing.B) {
			prefix := uniquePrefix(b)
			client := tg.client()
			r := newTestRedis(b, client, RedisConfig{Prefix: prefix})
			b.Cleanup(func() { dropPrefix(b, client, prefix) })
			rng := rand.New(rand.NewSource(2))
			batch := ChainBlocks(propHashes(rng, 32))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				batch[0] = Block{Hash: uint64(i), Seg: uint64(i)} // mostly rewrites, one new segment per op
				must(b, r.Store(tctx, worker(i%8), kvfleet.TierDevice, batch))
			}
		})
	}
}

// processCPU is this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU sums used_cpu_user and used_cpu_sys from INFO cpu over every
// master (the one server when standalone).
func serverCPU(b *testing.B, c redis.UniversalClient) time.Duration {
	var mu sync.Mutex
	var total float64
	each := func(ctx context.Context, n *redis.Client) error {
		info, err := n.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return err
				}
				mu.Lock()
				total += f
				mu.Unlock()
			}
		}
		return nil
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(tctx, each)
	case *redis.Client:
		err = each(tctx, c)
	}
	if err != nil {
		b.Fatalf("INFO cpu: %v", err)
	}
	return time.Duration(total * 1e9)
}

// BenchmarkRedisBytesPerBlock reports the Redis memory one indexed block
// costs with one worker on one tier (issue 27's figure): chains of 512
// blocks (8k tokens at 16 per block) stored through the index into a
// Redis of their own, measured as the sum of MEMORY USAGE (SAMPLES 0:
// exact) over the keys and as the used_memory delta (INFO memory, which
// also counts the keyspace's dict and expiry entries). The baseline is
// key schema 1 written as that layout did (one HASH per block, field
// "<num>:<tier>" = epoch, a TTL), into the same server, so both figures
// come from one run.
func BenchmarkRedisBytesPerBlock(b *testing.B) {
	const chains, chainLen = 16, 512
	srv, err := redistest.StartStandalone(context.Background(), redistest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	c := srv.Client()
	rng := rand.New(rand.NewSource(3))
	all := make([][]uint64, chains)
	for i := range all {
		all[i] = propHashes(rng, chainLen)
	}
	measure := func(prefix string, write func()) (usage, used float64) {
		must(b, c.FlushAll(tctx).Err())
		before := usedMemory(b, c)
		write()
		after := usedMemory(b, c)
		keys, err := c.Keys(tctx, escapeGlob(prefix)+"*").Result()
		must(b, err)
		var sum int64
		for _, k := range keys {
			n, err := c.MemoryUsage(tctx, k, 0).Result()
			must(b, err)
			sum += n
		}
		blocks := float64(chains * chainLen)
		return float64(sum) / blocks, float64(after-before) / blocks
	}
	var v2usage, v2used, v1usage, v1used float64
	for b.Loop() {
		v2usage, v2used = measure("v2:", func() {
			r := newTestRedis(b, c, RedisConfig{Prefix: "v2:"})
			for _, chain := range all {
				must(b, r.Store(tctx, worker(1), kvfleet.TierDevice, ChainBlocks(chain)))
			}
			must(b, r.Close())
		})
		v1usage, v1used = measure("v1:", func() {
			// What schema 1's Store sent: HSET + PEXPIRE per block, field
			// "<num>:<tier>" with a number from a random base as its
			// registry handed out.
			num := redisNumberBase() + 1
			pipe := c.Pipeline()
			for _, chain := range all {
				for _, h := range chain {
					key := "v1:b:" + blockField(h)
					pipe.HSet(tctx, key, strconv.FormatInt(num, 10)+":0", "0")
					pipe.PExpire(tctx, key, time.Hour)
				}
			}
			_, err := pipe.Exec(tctx)
			must(b, err)
		})
	}
	b.ReportMetric(v2usage, "v2-usage-B/block")
	b.ReportMetric(v2used, "v2-used-B/block")
	b.ReportMetric(v1usage, "v1-usage-B/block")
	b.ReportMetric(v1used, "v1-used-B/block")
}

func usedMemory(b *testing.B, c redis.UniversalClient) int64 {
	info, err := c.Info(tctx, "memory").Result()
	must(b, err)
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			must(b, err)
			return n
		}
	}
	b.Fatal("INFO memory: no used_memory")
	return 0
}
