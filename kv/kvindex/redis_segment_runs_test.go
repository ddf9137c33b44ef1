package kvindex

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// The script's reply for a segment: the leading held blocks' values, each
// run of equal values once with its length, ending at the first block
// nobody holds.
func TestRedisSegmentRunsReply(t *testing.T) {
	startRedis(t)
	client := redisStandalone.Client()
	prefix := uniquePrefix(t)
	r := newTestRedis(t, client, RedisConfig{Prefix: prefix})
	t.Cleanup(func() { dropPrefix(t, client, prefix) })
	chain := make([]uint64, SegmentBlocks)
	for i := range chain {
		chain[i] = uint64(i+1) << 8
	}
	blocks := ChainBlocks(chain)
	must(t, r.Store(tctx, worker(1), kvfleet.TierDevice, blocks[:40]))
	must(t, r.Store(tctx, worker(2), kvfleet.TierHost, blocks[:20]))
	num1, ep1, err := r.writer(tctx, worker(1))
	must(t, err)
	num2, ep2, err := r.writer(tctx, worker(2))
	must(t, err)
	e1 := entryHead(num1, kvfleet.TierDevice) + strconv.FormatInt(ep1, 10)
	e2 := entryHead(num2, kvfleet.TierHost) + strconv.FormatInt(ep2, 10)

	read := func(fields []uint64) []any {
		t.Helper()
		reply, err := redisSegmentRunsScript.Run(tctx, client, []string{r.segKey(chain[0])}, string(segmentFieldsArg(nil, fields))).Result()
		must(t, err)
		runs, err := segmentRuns(reply, len(fields))
		must(t, err)
		return runs
	}
	want := []any{int64(20), e1 + "," + e2, int64(20), e1}
	if got := read(chain); !equalRuns(got, want) {
		t.Fatalf("runs of the segment: %q; want %q", got, want)
	}
	// A block nobody holds ends the reply, even with held blocks after it.
	if got := read([]uint64{chain[0], 12345, chain[1]}); !equalRuns(got, []any{int64(1), e1 + "," + e2}) {
		t.Fatalf("runs with a gap at block 1: %q", got)
	}
	if got := read([]uint64{99}); len(got) != 0 {
		t.Fatalf("runs of an unheld block: %q; want none", got)
	}
	// Arguments the client never sends are refused, not misread.
	for _, arg := range []string{"", strings.Repeat("0", 15), strings.Repeat("0", 16*(SegmentBlocks+1))} {
		if err := redisSegmentRunsScript.Run(tctx, client, []string{r.segKey(chain[0])}, arg).Err(); err == nil {
			t.Errorf("fields argument of %d bytes: no error", len(arg))
		}
	}
}

func equalRuns(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A reply this version's script cannot send is an error, never an index
// out of range or a depth past the chain.
func TestSegmentRunsRejectsMalformedReply(t *testing.T) {
	for _, reply := range []any{
		"x",
		[]any{int64(1)},
		[]any{"1", "1:0:0"},
		[]any{int64(0), "1:0:0"},
		[]any{int64(-1), "1:0:0"},
		[]any{int64(3), "1:0:0"},
		[]any{int64(2), "1:0:0", int64(1), "1:0:0"},
		[]any{int64(1), int64(1)},
	} {
		if _, err := segmentRuns(reply, 2); !errors.Is(err, errSegmentRunsReply) {
			t.Errorf("segmentRuns(%#v, 2): err %v; want %v", reply, err, errSegmentRunsReply)
		}
	}
	if runs, err := segmentRuns([]any{int64(1), "1:0:0", int64(1), ""}, 2); err != nil || len(runs) != 4 {
		t.Errorf("well-formed reply: %v, %v", runs, err)
	}
}

// A master that lost its script cache (a restart, a failover's promoted
// replica: the cache is neither persisted nor replicated) answers NOSCRIPT;
// Match resends the round trip with the script's body once and answers
// the same.
func TestRedisMatchAfterScriptFlush(t *testing.T) {
	for _, tg := range redisTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			client := tg.client()
			prefix := uniquePrefix(t)
			r := newTestRedis(t, client, RedisConfig{Prefix: prefix})
			t.Cleanup(func() { dropPrefix(t, client, prefix) })
			chain := make([]uint64, 5*SegmentBlocks)
			for i := range chain {
				chain[i] = uint64(i+7) * 0x9E3779B97F4A7C15
			}
			must(t, r.Store(tctx, worker(1), kvfleet.TierDevice, ChainBlocks(chain)))
			want := matchMap{worker(1): all(len(chain))}
			expectMatch(t, r, chain, want)
			expectMatch(t, r, chain, want)
			before := r.Counters().MatchRoundTrips
			flush := func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }
			switch c := client.(type) {
			case *redis.ClusterClient:
				must(t, c.ForEachMaster(tctx, flush))
			case *redis.Client:
				must(t, flush(tctx, c))
			}
			expectMatch(t, r, chain, want)
			if rt := r.Counters().MatchRoundTrips - before; rt != 2 {
				t.Fatalf("match after SCRIPT FLUSH: %d round trips; want 2 (NOSCRIPT, then the body)", rt)
			}
			expectMatch(t, r, chain, want)
			if rt := r.Counters().MatchRoundTrips - before; rt != 3 {
				t.Fatalf("next match: %d round trips in all; want 3 (the script is cached again)", rt)
			}
		})
	}
}

// FuzzRedisApplyRun: applying a run of n equal blocks at once gives the
// same depths and queues the same prunes as applying its blocks one by
// one, whatever the values (stale, malformed, mixed tiers).
func FuzzRedisApplyRun(f *testing.F) {
	f.Add("1:0:0,2:3:1", "2:1:1,1:2:0", uint8(3), uint8(2), int64(0))
	f.Add("1:2:0,2:0:1", "1:0:0", uint8(1), uint8(5), int64(1))
	f.Add("junk,1:9:0,,", "1:0:notanumber,9:0:0", uint8(4), uint8(4), int64(5))
	f.Fuzz(func(t *testing.T, v0, v1 string, n0, n1 uint8, epoch int64) {
		if len(v0)+len(v1) > 4096 {
			return
		}
		a, b := 1+int(n0)%SegmentBlocks, 1+int(n1)%SegmentBlocks
		chain := make([]uint64, a+b)
		for i := range chain {
			chain[i] = uint64(i)
		}
		reg := &redisRegistry{next: 4, workers: map[int64]redisWorkerState{
			1: {id: worker(1), epoch: epoch, aliveUntil: 1 << 62},
			2: {id: worker(2), aliveUntil: 1 << 62},
			3: {id: worker(3), aliveUntil: 0},
		}}
		apply := func(byRun bool) (map[kvfleet.WorkerID]kvfleet.Depths, int64) {
			r := &Redis{prune: make(chan redisPrune, 4*SegmentBlocks), workerTTL: time.Second}
			m := newRedisMatch(reg, 1000, 0)
			for _, run := range []struct {
				lo, n int
				v     string
			}{{0, a, v0}, {a, b, v1}} {
				if byRun {
					r.applyRun(m, run.lo, run.n, 0, chain, run.v)
				} else {
					for pos := run.lo; pos < run.lo+run.n; pos++ {
						r.applyBlock(m, pos, 0, chain, run.v)
						if m.active == 0 {
							break
						}
					}
				}
				if m.active == 0 {
					break
				}
			}
			var got Match
			m.result(&got)
			return got.Map(), r.counters.pruneQueued.Load()
		}
		byRun, prunedByRun := apply(true)
		byBlock, prunedByBlock := apply(false)
		if !sameMatch(byRun, byBlock) || prunedByRun != prunedByBlock {
			t.Fatalf("runs of %d and %d blocks (%q, %q): by run %v, %d prunes; block by block %v, %d prunes", a, b, v0, v1, byRun, prunedByRun, byBlock, prunedByBlock)
		}
		for w, d := range byRun {
			if w == worker(3) {
				t.Fatalf("expired worker matched: %v", d)
			}
			if d.Max() < 1 || d.Max() > a+b {
				t.Fatalf("worker %v depth %v: want max in 1..%d", w, d, a+b)
			}
		}
	})
}

// The script's two reads of a segment (HGETALL in insertion order for a
// listpack-encoded hash, HMGET otherwise) answer what HMGET answers, run-
// length encoded up to the first absent block, whatever the segment's
// encoding and field order: the reference here is the client's own HMGET.
func TestRedisSegmentRunsMatchHMGET(t *testing.T) {
	startRedis(t)
	client := redisStandalone.Client()
	key := uniquePrefix(t) + "v2:s:{0000000000000001}"
	t.Cleanup(func() { client.Del(tctx, key) })
	field := func(i int) string { return string(appendHex16(nil, uint64(i)*0x9E3779B97F4A7C15+1)) }
	ids := func(is ...int) []uint64 {
		out := make([]uint64, len(is))
		for j, i := range is {
			out[j] = uint64(i)*0x9E3779B97F4A7C15 + 1
		}
		return out
	}
	seq := func(lo, hi int) []int {
		var out []int
		for i := lo; i < hi; i++ {
			out = append(out, i)
		}
		return out
	}
	short := func(i int) string { return "1:0:0,2:" + strconv.Itoa(i/10%3) + ":0" }
	long := func(i int) string { return strings.Repeat("9:1:0,", 12) + short(i) } // > 64 bytes: hashtable
	for _, tc := range []struct {
		name   string
		stored []int // fields, in insertion order
		value  func(int) string
		query  []int
	}{
		{"listpack, in order, whole", seq(0, 64), short, seq(0, 64)},
		{"listpack, in order, held prefix", seq(0, 40), short, seq(0, 64)},
		{"listpack, more fields than asked", seq(0, 64), short, seq(0, 30)},
		{"listpack, reversed", append(seq(32, 64), seq(0, 32)...), short, seq(0, 64)},
		{"listpack, another branch first", append(seq(100, 110), seq(0, 20)...), short, seq(0, 20)},
		{"listpack, gap", append(seq(0, 10), seq(11, 30)...), short, seq(0, 30)},
		{"listpack, a field asked twice", seq(0, 2), short, []int{0, 1, 0}},
		{"hashtable", seq(0, 64), long, seq(0, 64)},
		{"hashtable, held prefix", seq(0, 50), long, seq(0, 64)},
		{"absent key", nil, short, seq(0, 64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			must(t, client.Del(tctx, key).Err())
			for _, i := range tc.stored {
				must(t, client.HSet(tctx, key, field(i), tc.value(i)).Err())
			}
			if kind, _, _ := strings.Cut(tc.name, ","); kind != "absent key" {
				// The case is the encoding it names (Redis 7.0 defaults).
				if enc, err := client.ObjectEncoding(tctx, key).Result(); err != nil || enc != kind {
					t.Fatalf("segment encoding %q (%v); the case wants %q", enc, err, kind)
				}
			}
			fields := make([]string, len(tc.query))
			for j, i := range tc.query {
				fields[j] = field(i)
			}
			ref, err := client.HMGet(tctx, key, fields...).Result()
			must(t, err)
			var want []any
			for _, v := range ref {
				s, ok := v.(string)
				if !ok {
					break
				}
				if n := len(want); n > 0 && want[n-1] == s {
					want[n-2] = want[n-2].(int64) + 1
					continue
				}
				want = append(want, int64(1), s)
			}
			reply, err := redisSegmentRunsScript.Run(tctx, client, []string{key}, string(segmentFieldsArg(nil, ids(tc.query...)))).Result()
			must(t, err)
			got, err := segmentRuns(reply, len(tc.query))
			must(t, err)
			if !equalRuns(got, want) {
				enc, _ := client.ObjectEncoding(tctx, key).Result()
				t.Fatalf("%s segment: runs %q; HMGET gives %q", enc, got, want)
			}
		})
	}
}
