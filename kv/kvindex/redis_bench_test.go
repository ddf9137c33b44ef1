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
			// 0 is the default: a chain whose first block was last found
			// held is read whole in one round trip, any other probed with
			// 16 blocks first. 16 growing 4x per round trip was the
			// default before issue 19.
			for _, chunk := range []int{0, 16} {
				name := tg.name + "/chain=" + strconv.Itoa(chainLen) + "/chunk=" + chunkName(chunk)
				b.Run(name, func(b *testing.B) { benchRedisMatch(b, tg.client(), chainLen, chunk, false) })
			}
		}
		for _, chunk := range []int{0, 16} {
			b.Run(tg.name+"/miss/chain=128/chunk="+chunkName(chunk), func(b *testing.B) { benchRedisMatch(b, tg.client(), 128, chunk, true) })
		}
	}
}

func chunkName(chunk int) string {
	if chunk == 0 {
		return "auto"
	}
	return strconv.Itoa(chunk)
}

func benchRedisMatch(b *testing.B, client redis.UniversalClient, chainLen, chunk int, miss bool) {
	prefix := uniquePrefix(b)
	r := newTestRedis(b, client, RedisConfig{Prefix: prefix, MatchChunk: chunk})
	b.Cleanup(func() { dropPrefix(b, client, prefix) })
	rng := rand.New(rand.NewSource(1))
	chains := make([][]uint64, 4)
	for i := range chains {
		chains[i] = propHashes(rng, chainLen)
	}
	for w := 0; w < 16; w++ {
		c := chains[w%len(chains)]
		held := chainLen/2 + rng.Intn(chainLen/2+1)
		must(b, r.Store(tctx, worker(w), kvfleet.TierDevice, c[:held/2]))
		must(b, r.Store(tctx, worker(w), kvfleet.Tier(1+w%3), c[held/2:held]))
	}
	queries := chains
	if miss {
		queries = [][]uint64{propHashes(rng, chainLen)}
	}
	lat := make([]time.Duration, 0, b.N)
	server0 := serverCPU(b, client)
	client0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		m, err := r.Match(tctx, queries[i%len(queries)])
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if !miss && len(m) == 0 {
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
			batch := propHashes(rng, 32)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				batch[0] = uint64(i) // mostly rewrites, one new key per op
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
