package kvindex

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// The property: every backend gives identical Match results for the same
// event stream. Memory is the reference; Redis runs standalone and on a
// 3-master Cluster. Streams are seeded; KVGATE_PROPERTY_SEED and
// KVGATE_PROPERTY_OPS run one other seed, or a longer stream, by hand.

const (
	propWorkers    = 12
	propRoots      = 5                    // independent conversations
	propChains     = 20                   // chains, each sharing a prefix with a root
	propChainLen   = 2*SegmentBlocks + 20 // three segments: chains cross segment keys
	propMatchEvery = 4
)

func TestPropertyBackendsAgree(t *testing.T) {
	startRedis(t)
	seeds := []int64{1, 2, 3, 4, 5}
	ops := 400
	if s := os.Getenv("KVGATE_PROPERTY_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("KVGATE_PROPERTY_SEED=%q: %v", s, err)
		}
		seeds = []int64{seed}
	}
	if s := os.Getenv("KVGATE_PROPERTY_OPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("KVGATE_PROPERTY_OPS=%q: want a positive integer", s)
		}
		ops = n
	}
	for _, seed := range seeds {
		t.Run("seed="+strconv.FormatInt(seed, 10), func(t *testing.T) {
			runProperty(t, seed, ops)
		})
	}
}

type propBackend struct {
	name string
	idx  Index
}

type propOp struct {
	kind   string // store, remove, clear, removeWorker
	worker int
	tier   kvfleet.Tier
	blocks []Block
}

func (o propOp) String() string {
	hashes := make([]uint64, len(o.blocks))
	for i, b := range o.blocks {
		hashes[i] = b.Hash
	}
	return fmt.Sprintf("%s(w%d, %v, %d hashes %x)", o.kind, o.worker, o.tier, len(hashes), hashes)
}

func runProperty(t *testing.T, seed int64, ops int) {
	rng := rand.New(rand.NewSource(seed))
	backends := []propBackend{{"memory", NewMemory(MemoryConfig{})}}
	for _, tg := range redisTargets(t) {
		prefix := uniquePrefix(t)
		client := tg.client()
		r := newTestRedis(t, client, RedisConfig{Prefix: prefix})
		backends = append(backends, propBackend{"redis-" + tg.name, r})
		t.Cleanup(func() { dropPrefix(t, client, prefix) })
	}

	chains := propChainSet(rng)
	var log []propOp
	fail := func(format string, args ...any) {
		t.Helper()
		tail := log[max(0, len(log)-8):]
		var b strings.Builder
		for _, o := range tail {
			b.WriteString("\n  " + o.String())
		}
		t.Fatalf("seed %d after %d ops: %s\nlast ops:%s", seed, len(log), fmt.Sprintf(format, args...), b.String())
	}
	// Coverage of the comparisons, so a stream that matches nothing cannot
	// pass vacuously.
	var queries, nonEmpty, mixedTiers, multiWorker int
	// One result buffer per backend, reused by every query as the request
	// path reuses its own: a stale entry left by the previous query would
	// show as a difference.
	bufs := make([]Match, len(backends))
	matchInto := func(k int, chain []uint64) (matchMap, error) {
		if err := backends[k].idx.Match(tctx, chain, &bufs[k]); err != nil {
			return nil, err
		}
		return bufs[k].Map(), nil
	}
	for i := 0; i < ops; i++ {
		op := propNextOp(rng, chains)
		log = append(log, op)
		for _, b := range backends {
			if err := propApply(b.idx, op); err != nil {
				fail("%s: %v: %v", b.name, op, err)
			}
		}
		if i%propMatchEvery != propMatchEvery-1 {
			continue
		}
		for q := 0; q < 3; q++ {
			chain := propQuery(rng, chains)
			want, err := matchInto(0, chain)
			if err != nil {
				fail("%s: match: %v", backends[0].name, err)
			}
			queries++
			if len(want) > 0 {
				nonEmpty++
			}
			if len(want) > 1 {
				multiWorker++
			}
			for _, d := range want {
				if d[kvfleet.TierDevice] != d.Max() {
					mixedTiers++
					break
				}
			}
			for k, b := range backends[1:] {
				got, err := matchInto(k+1, chain)
				if err != nil {
					fail("%s: match: %v", b.name, err)
				}
				if !sameMatch(got, want) {
					fail("Match(%x):\n %s: %v\n %s: %v", chain, backends[0].name, want, b.name, got)
				}
			}
		}
	}
	t.Logf("seed %d: %d ops, %d queries: %d non-empty, %d with several workers, %d with tier-dependent depths",
		seed, ops, queries, nonEmpty, multiWorker, mixedTiers)
	if ops >= 100 && (nonEmpty < queries/3 || multiWorker == 0 || mixedTiers == 0) {
		t.Fatalf("seed %d: stream too weak to compare backends: %d/%d non-empty, %d multi-worker, %d tier-dependent",
			seed, nonEmpty, queries, multiWorker, mixedTiers)
	}
}

// propChainSet builds chains that share prefixes the way conversations
// do: each starts with part of a root (a shared system prompt or an
// earlier turn) and continues with its own blocks.
func propChainSet(rng *rand.Rand) [][]uint64 {
	roots := make([][]uint64, propRoots)
	for i := range roots {
		roots[i] = propHashes(rng, propChainLen)
	}
	chains := append([][]uint64{}, roots...)
	for len(chains) < propChains {
		root := roots[rng.Intn(len(roots))]
		k := 1 + rng.Intn(len(root)-1)
		c := append(append([]uint64{}, root[:k]...), propHashes(rng, propChainLen-k)...)
		chains = append(chains, c)
	}
	return chains
}

func propHashes(rng *rand.Rand, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = rng.Uint64()
	}
	return out
}

func propNextOp(rng *rand.Rand, chains [][]uint64) propOp {
	op := propOp{worker: rng.Intn(propWorkers), tier: kvfleet.Tier(rng.Intn(int(kvfleet.NumTiers)))}
	chain := ChainBlocks(chains[rng.Intn(len(chains))])
	// A range [a, b) of the chain; engines mostly store from the start.
	a := 0
	if rng.Intn(3) == 0 {
		a = rng.Intn(len(chain))
	}
	b := a + 1 + rng.Intn(len(chain)-a)
	switch p := rng.Intn(100); {
	case p < 55:
		op.kind, op.blocks = "store", chain[a:b]
	case p < 65:
		// Scattered blocks: holes in the middle of chains.
		op.kind = "store"
		for _, b := range chain {
			if rng.Intn(3) == 0 {
				op.blocks = append(op.blocks, b)
			}
		}
	case p < 88:
		op.kind, op.blocks = "remove", chain[a:b]
	case p < 94:
		op.kind = "clear"
	default:
		op.kind = "removeWorker"
	}
	return op
}

func propApply(idx Index, op propOp) error {
	w := worker(op.worker)
	switch op.kind {
	case "store":
		return idx.Store(tctx, w, op.tier, op.blocks)
	case "remove":
		return idx.Remove(tctx, w, op.tier, op.blocks)
	case "clear":
		return idx.Clear(tctx, w)
	case "removeWorker":
		return idx.RemoveWorker(tctx, w)
	}
	return fmt.Errorf("unknown op %q", op.kind)
}

// propQuery returns a prefix of a known chain (sometimes extended with an
// unknown block, sometimes with one block swapped) or an unknown chain.
func propQuery(rng *rand.Rand, chains [][]uint64) []uint64 {
	chain := chains[rng.Intn(len(chains))]
	q := append([]uint64{}, chain[:1+rng.Intn(len(chain))]...)
	switch rng.Intn(6) {
	case 0:
		return propHashes(rng, 1+rng.Intn(8))
	case 1:
		q = append(q, rng.Uint64())
	case 2:
		q[rng.Intn(len(q))] = rng.Uint64()
	}
	return q
}

// dropPrefix deletes every key under prefix on every master, so that
// later tests see a small keyspace.
func dropPrefix(t testing.TB, c redis.UniversalClient, prefix string) {
	drop := func(ctx context.Context, n redis.Cmdable) error {
		iter := n.Scan(ctx, 0, escapeGlob(prefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := n.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(tctx, func(ctx context.Context, m *redis.Client) error { return drop(ctx, m) })
	} else {
		err = drop(tctx, c)
	}
	if err != nil {
		t.Errorf("drop keys under %s: %v", prefix, err)
	}
}
