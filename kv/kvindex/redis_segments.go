package kvindex

// Redis block layout, key schema 2: one key per chain segment.
//
//	<prefix>schema                     STRING "2": the layout this file writes
//	<prefix>v2:s:{<seg, 16 hex>}       HASH, one per segment (Block.Seg)
//	    field  <block hash, 16 lowercase hex>
//	    value  "<num>:<tier>:<epoch>" entries joined by ','
//	    num is the worker's registry number (redis.go), tier the Tier value,
//	    epoch the worker's epoch when it stored the block.
//
// The segment's hash is the key's Cluster hash tag, so a segment's blocks
// share one slot: a Match reads one HMGET per segment (64 blocks, 1,024
// tokens at block size 16) instead of one HGETALL per block, all segments
// in one pipelined round trip. A chain of n blocks touches ceil(n/64) keys,
// hence at most that many masters; segments start at different hashes, so
// the keys of different chains (and of one chain's segments) spread over
// the slots. Schema 1 kept one key per block (<prefix>b:<hash>), and a
// chain's lookups fanned out to every master, one command per block.
//
// Writes are one Lua script per segment (single key: Cluster-safe): Store
// replaces the worker's entry for the tier in each block's value, or adds
// it, and sets the key's TTL to BlockTTL, so a segment nobody stores to
// any more vanishes on its own (the TTL is the segment's, not the block's:
// Redis 7.0 has no per-field expiry); Remove drops the entry and the field
// when it was the last. Scripts are sent by SHA in a pipeline and resent
// whole on NOSCRIPT (a Cluster master promoted by failover has an empty
// script cache); both are idempotent, so a resend is safe.
//
// Upgrading from schema 1: the registry and the generation key are
// unchanged, the block keys are not read across versions. NewRedis writes
// the schema key when it is missing and logs, at Warn, the schema-1 block
// keys it finds under the prefix: they expire within BlockTTL of their
// last store, or can be deleted (redis-cli --scan --pattern
// '<prefix>b:*' | xargs redis-cli del; on Cluster, per master). A schema
// key naming another version stops NewRedis: upgrade every indexer and
// extproc sharing a prefix together, or give the new ones a new prefix.
//
// Stats: Workers is the number of live registered workers. Blocks and
// Entries are read per master: exact (SCAN of the segment keys, then
// their values) when a master holds at most redisStatsExactKeys keys,
// else estimated from DBSIZE and redisStatsSamples RANDOMKEY samples.
// Entries counts stale entries not yet pruned or expired.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

const (
	// redisSchema versions the key layout (this file's comment).
	redisSchema = "2"
	// redisMaxMatchSegments bounds the segment keys one Match round trip
	// reads: 4,096 blocks, 64k tokens at block size 16.
	redisMaxMatchSegments = 64
	// redisSchema1Scan bounds the SCAN pages NewRedis reads per master
	// looking for schema-1 keys to report.
	redisSchema1Scan = 8
)

// segKey is <prefix>v2:s:{<16 lowercase hex digits>}.
func (r *Redis) segKey(seg uint64) string {
	b := make([]byte, 0, len(r.prefix)+len("v2:s:{}")+16)
	b = append(b, r.prefix...)
	b = append(b, "v2:s:{"...)
	b = appendHex16(b, seg)
	return string(append(b, '}'))
}

// blockField is a block's field in its segment key: 16 lowercase hex
// digits.
func blockField(h uint64) string { return string(appendHex16(make([]byte, 0, 16), h)) }

func appendHex16(b []byte, h uint64) []byte {
	const hexDigits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, hexDigits[(h>>uint(shift))&0xf])
	}
	return b
}

// entryHead is the start of a worker's entry for a tier: "<num>:<tier>:".
// The scripts replace and remove entries by it; the digits end at the
// colon, so one number's head is never a prefix of another's.
func entryHead(num int64, tier kvfleet.Tier) string {
	return strconv.FormatInt(num, 10) + ":" + strconv.Itoa(int(tier)) + ":"
}

// parseEntry is the inverse of entryHead + epoch; ok is false for anything
// this version did not write.
func parseEntry(e string) (num int64, tier kvfleet.Tier, epoch int64, ok bool) {
	i := strings.IndexByte(e, ':')
	if i <= 0 || i+2 >= len(e) || e[i+2] != ':' {
		return 0, 0, 0, false
	}
	n, err := strconv.ParseInt(e[:i], 10, 64)
	if err != nil || n <= 0 {
		return 0, 0, 0, false
	}
	t := e[i+1] - '0'
	if t >= uint8(kvfleet.NumTiers) {
		return 0, 0, 0, false
	}
	ep, err := strconv.ParseInt(e[i+3:], 10, 64)
	if err != nil || ep < 0 {
		return 0, 0, 0, false
	}
	return n, kvfleet.Tier(t), ep, true
}

// ---- write scripts (each touches one segment key) ----

// redisStoreScript puts entry ARGV[2]..ARGV[3] (head, epoch) into the
// value of each field ARGV[4:], replacing the one with the same head, and
// sets the key's TTL to ARGV[1] ms.
var redisStoreScript = redis.NewScript(`
local key, head = KEYS[1], ARGV[2]
local ent = head .. ARGV[3]
for i = 4, #ARGV do
  local f = ARGV[i]
  local v = redis.call('HGET', key, f)
  if not v then
    redis.call('HSET', key, f, ent)
  else
    local out = {}
    for e in string.gmatch(v, '[^,]+') do
      if string.sub(e, 1, #head) ~= head then out[#out + 1] = e end
    end
    out[#out + 1] = ent
    redis.call('HSET', key, f, table.concat(out, ','))
  end
end
redis.call('PEXPIRE', key, ARGV[1])
return 0
`)

// redisRemoveScript drops the entry with head ARGV[1] from each field
// ARGV[2:], and the field when no entry is left.
var redisRemoveScript = redis.NewScript(`
local key, head = KEYS[1], ARGV[1]
for i = 2, #ARGV do
  local f = ARGV[i]
  local v = redis.call('HGET', key, f)
  if v then
    local out, hit = {}, false
    for e in string.gmatch(v, '[^,]+') do
      if string.sub(e, 1, #head) == head then hit = true else out[#out + 1] = e end
    end
    if hit then
      if #out == 0 then
        redis.call('HDEL', key, f)
      else
        redis.call('HSET', key, f, table.concat(out, ','))
      end
    end
  end
end
return 0
`)

// redisPruneScript drops entry ARGV[2] from field ARGV[1] only if the
// entry is still exactly that: the worker may have stored the block again
// (a new epoch) since Match read it. Returns the entries dropped.
var redisPruneScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local out, n = {}, 0
for e in string.gmatch(v, '[^,]+') do
  if e == ARGV[2] then n = n + 1 else out[#out + 1] = e end
end
if n == 0 then return 0 end
if #out == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], table.concat(out, ','))
end
return n
`)

// runScripts runs one script call per segment run of blocks, redisWriteBatch
// blocks per pipelined round trip. argv gives a call's arguments before
// the fields.
func (r *Redis) runScripts(ctx context.Context, script *redis.Script, blocks []Block, argv []any, roundTrips *int64) error {
	for start := 0; start < len(blocks); start += redisWriteBatch {
		batch := blocks[start:min(start+redisWriteBatch, len(blocks))]
		type call struct {
			key  string
			args []any
		}
		var calls []call
		for i := 0; i < len(batch); {
			// One call per run of blocks with the same segment: ingest
			// passes a BlockStored event's blocks in chain order.
			j := i + 1
			for j < len(batch) && batch[j].Seg == batch[i].Seg {
				j++
			}
			args := append(make([]any, 0, len(argv)+j-i), argv...)
			for _, b := range batch[i:j] {
				args = append(args, blockField(b.Hash))
			}
			calls = append(calls, call{r.segKey(batch[i].Seg), args})
			i = j
		}
		exec := func(bySHA bool) ([]*redis.Cmd, error) {
			pipe := r.client.Pipeline()
			cmds := make([]*redis.Cmd, len(calls))
			for i, c := range calls {
				if bySHA {
					cmds[i] = script.EvalSha(ctx, pipe, []string{c.key}, c.args...)
				} else {
					cmds[i] = script.Eval(ctx, pipe, []string{c.key}, c.args...)
				}
			}
			_, err := pipe.Exec(ctx)
			return cmds, err
		}
		if roundTrips != nil {
			*roundTrips++
		}
		cmds, err := exec(true)
		if err != nil && noScript(cmds) {
			if roundTrips != nil {
				*roundTrips++
			}
			_, err = exec(false)
		}
		if err != nil {
			r.noteErr(err)
			return err
		}
	}
	return nil
}

func noScript(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if err := c.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			return true
		}
	}
	return false
}

// Store implements Index.
func (r *Redis) Store(ctx context.Context, w kvfleet.WorkerID, tier kvfleet.Tier, blocks []Block) error {
	if err := r.checkWrite(tier, len(blocks)); err != nil {
		return fmt.Errorf("redis index: store for %s: %w", w, err)
	}
	num, epoch, err := r.writer(ctx, w)
	if err != nil {
		return fmt.Errorf("redis index: store: %w", err)
	}
	var trips int64
	err = r.runScripts(ctx, redisStoreScript, blocks, []any{r.blockTTL.Milliseconds(), entryHead(num, tier), epoch}, &trips)
	r.counters.storeRoundTrips.Add(trips)
	if err != nil {
		return fmt.Errorf("redis index: store for %s: %w", w, err)
	}
	return nil
}

// Remove implements Index.
func (r *Redis) Remove(ctx context.Context, w kvfleet.WorkerID, tier kvfleet.Tier, blocks []Block) error {
	if err := r.checkWrite(tier, len(blocks)); err != nil {
		return fmt.Errorf("redis index: remove for %s: %w", w, err)
	}
	num, _, err := r.writer(ctx, w)
	if err != nil {
		return fmt.Errorf("redis index: remove: %w", err)
	}
	var trips int64
	err = r.runScripts(ctx, redisRemoveScript, blocks, []any{entryHead(num, tier)}, &trips)
	r.counters.removeRoundTrips.Add(trips)
	if err != nil {
		return fmt.Errorf("redis index: remove for %s: %w", w, err)
	}
	return nil
}

// ---- Match ----

// Match implements Index. It reads the chain's segments, one HMGET of the
// chain's blocks per segment key, in one pipeline (go-redis splits it per
// master and runs those in parallel, so on Cluster too this is one network
// round trip), and applies the blocks in order, stopping as soon as no
// worker still matching holds the next block. A chain whose first block
// was never seen held here reads its first segment alone first, and the
// rest in a second round trip if that hits; so does a chain beyond
// redisMaxMatchSegments segments.
func (r *Redis) Match(ctx context.Context, chain []uint64, into *Match) error {
	into.Reset()
	if len(chain) > redisMaxChain {
		return fmt.Errorf("redis index: match: chain of %d blocks: want at most %d", len(chain), redisMaxChain)
	}
	if len(chain) == 0 {
		return nil
	}
	if r.closed.Load() {
		return fmt.Errorf("redis index: match: %w", errRedisClosed)
	}
	r.counters.matches.Add(1)
	reg, err := r.registry(ctx)
	if err != nil {
		return fmt.Errorf("redis index: match: %w", err)
	}
	now := time.Now().UnixMilli()
	m := newRedisMatch(reg, now, now-r.workerTTL.Milliseconds())
	segs := redisMaxMatchSegments
	if !r.firstHeld.seen(chain[0]) {
		segs = 1
	}
	if err := r.readChain(ctx, m, chain, segs); err != nil {
		return err
	}
	r.firstHeld.note(chain[0], len(m.states) > 0)
	m.result(into)
	return nil
}

// readChain applies chain's blocks to m, segs segments in the first round
// trip, until no worker is left matching.
func (r *Redis) readChain(ctx context.Context, m *redisMatch, chain []uint64, segs int) error {
	nseg := (len(chain) + SegmentBlocks - 1) / SegmentBlocks
	cmds := make([]*redis.SliceCmd, 0, min(segs, nseg))
	for k := 0; k < nseg; {
		end := min(k+segs, nseg)
		pipe := r.client.Pipeline()
		cmds = cmds[:0]
		for s := k; s < end; s++ {
			lo, hi := s*SegmentBlocks, min((s+1)*SegmentBlocks, len(chain))
			fields := make([]string, hi-lo)
			for i, h := range chain[lo:hi] {
				fields[i] = blockField(h)
			}
			cmds = append(cmds, pipe.HMGet(ctx, r.segKey(chain[lo]), fields...))
		}
		r.counters.matchRoundTrips.Add(1)
		r.counters.matchBlocksRead.Add(int64(min(end*SegmentBlocks, len(chain)) - k*SegmentBlocks))
		r.counters.matchKeysRead.Add(int64(end - k))
		if _, err := pipe.Exec(ctx); err != nil {
			r.noteErr(err)
			return fmt.Errorf("redis index: match: read segments %d..%d of %d: %w", k, end-1, nseg, err)
		}
		for i, cmd := range cmds {
			lo := (k + i) * SegmentBlocks
			for j, v := range cmd.Val() {
				value, _ := v.(string) // nil: nobody holds the block
				pos := lo + j
				r.applyBlock(m, pos, chain[lo], chain[pos], value)
				if m.active == 0 {
					return nil
				}
			}
		}
		k = end
		segs = redisMaxMatchSegments
	}
	return nil
}

// applyBlock advances every active worker past block pos (admitting
// workers at pos 0) and finishes those that lack it on every tier. Blocks
// must be applied in order, each once. value is the block's field in its
// segment key seg.
func (r *Redis) applyBlock(m *redisMatch, pos int, seg, h uint64, value string) {
	for value != "" {
		e := value
		if i := strings.IndexByte(value, ','); i >= 0 {
			e, value = value[:i], value[i+1:]
		} else {
			value = ""
		}
		if e == "" {
			continue
		}
		num, tier, epoch, ok := parseEntry(e)
		if !ok {
			r.queuePrune(seg, h, e)
			continue
		}
		ws, known := m.reg.workers[num]
		switch {
		case !known:
			// Numbers are never reused, so one at or below the snapshot's
			// "next" that is not registered belonged to a removed worker.
			// A higher one was registered after the snapshot was taken.
			if num <= m.reg.next {
				r.queuePrune(seg, h, e)
			}
			continue
		case epoch < ws.epoch || ws.aliveUntil < m.deadBefore:
			r.queuePrune(seg, h, e)
			continue
		case ws.aliveUntil < m.now:
			continue // expired; pruned once dead a full TTL (see above)
		}
		m.see(num, tier, pos)
	}
	m.advance(pos)
}

// see notes that worker num holds block pos on tier.
func (m *redisMatch) see(num int64, tier kvfleet.Tier, pos int) {
	i, ok := m.index[num]
	if !ok {
		if pos > 0 {
			return // missed an earlier block: no prefix match
		}
		i = len(m.states)
		m.index[num] = i
		m.states = append(m.states, redisMatchState{num: num})
		m.active++
	}
	st := &m.states[i]
	if st.done {
		return // missed an earlier block
	}
	if st.seenAt != pos+1 || tier < st.fastest {
		st.fastest, st.seenAt = tier, pos+1
	}
}

// advance moves every active worker that was seen on block pos past it
// and finishes the others.
func (m *redisMatch) advance(pos int) {
	for i := range m.states {
		st := &m.states[i]
		if st.done {
			continue
		}
		if st.seenAt != pos+1 {
			st.done = true
			m.active--
			continue
		}
		// Tier t reaches pos+1 iff every block so far, this one included,
		// is held on t or faster: iff t >= the slowest per-block fastest.
		st.slowest = max(st.slowest, st.fastest)
		for t := st.slowest; t < kvfleet.NumTiers; t++ {
			st.depths[t] = pos + 1
		}
	}
}

// ---- pruner ----

type redisPrune struct {
	seg, hash uint64
	entry     string
}

func (r *Redis) queuePrune(seg, h uint64, entry string) {
	select {
	case r.prune <- redisPrune{seg: seg, hash: h, entry: entry}:
		r.counters.pruneQueued.Add(1)
	default:
		r.counters.pruneDropped.Add(1)
	}
}

func (r *Redis) pruneLoop() {
	defer r.wg.Done()
	batch := make([]redisPrune, 0, redisPruneBatch)
	for {
		batch = batch[:0]
		select {
		case <-r.bg.Done():
			return
		case p := <-r.prune:
			batch = append(batch, p)
		}
	fill:
		for len(batch) < redisPruneBatch {
			select {
			case p := <-r.prune:
				batch = append(batch, p)
			default:
				break fill
			}
		}
		r.pruneBatch(batch)
	}
}

// pruneBatch deletes a batch of stale entries, duplicates removed, in one
// pipelined round trip of compare-and-delete scripts. EVAL, not EVALSHA:
// a Cluster master promoted by failover has an empty script cache.
func (r *Redis) pruneBatch(batch []redisPrune) {
	ctx, cancel := context.WithTimeout(r.bg, 5*time.Second)
	defer cancel()
	seen := make(map[redisPrune]bool, len(batch))
	pipe := r.client.Pipeline()
	var cmds []*redis.Cmd
	for _, p := range batch {
		if seen[p] {
			continue
		}
		seen[p] = true
		cmds = append(cmds, redisPruneScript.Eval(ctx, pipe, []string{r.segKey(p.seg)}, blockField(p.hash), p.entry))
	}
	_, err := pipe.Exec(ctx)
	for _, c := range cmds {
		if n, cerr := c.Int64(); cerr == nil {
			r.counters.pruned.Add(n)
		} else {
			r.counters.pruneErrs.Add(1)
		}
	}
	if err != nil {
		r.noteErr(err)
		slog.Debug("redis index: prune stale entries", "err", err)
	}
}

// ---- schema ----

// checkSchema writes the schema key when it is missing and refuses one
// naming another layout. Finding none, it reports schema-1 block keys
// left under the prefix (see the comment at the top of this file).
func (r *Redis) checkSchema(ctx context.Context) error {
	key := r.prefix + "schema"
	fresh, err := r.client.SetNX(ctx, key, redisSchema, 0).Result()
	if err != nil {
		return fmt.Errorf("redis index: schema key %s: %w", key, err)
	}
	if !fresh {
		v, err := r.client.Get(ctx, key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("redis index: schema key %s: %w", key, err)
		}
		if err == nil && v != redisSchema {
			return fmt.Errorf("redis index: %s is %q: the index under prefix %q was written in another key layout than this kvgate's (%s); upgrade every indexer and extproc on this prefix together, or use a new prefix", key, v, r.prefix, redisSchema)
		}
		return nil
	}
	found, err := r.findSchema1(ctx)
	if err != nil {
		// Only a report: the index works without it.
		slog.Warn("redis index: could not look for schema-1 block keys", "prefix", r.prefix, "err", err)
		return nil
	}
	if found {
		slog.Warn("redis index: block keys of key schema 1 found; this version does not read them: they expire within block_ttl of their last store, or delete them (on Cluster, on every master), and upgrade every indexer and extproc on this prefix together",
			"prefix", r.prefix, "pattern", r.prefix+"b:*", "flush", "redis-cli --scan --pattern '"+r.prefix+"b:*' | xargs redis-cli del", "block_ttl", r.blockTTL)
	}
	return nil
}

// findSchema1 reads a few SCAN pages per master for <prefix>b:* keys.
func (r *Redis) findSchema1(ctx context.Context) (bool, error) {
	pattern := escapeGlob(r.prefix) + "b:*"
	found := false
	look := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for range redisSchema1Scan {
			keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				found = true // a race between masters only sets true
				return nil
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
		return nil
	}
	return found, r.forEachNode(ctx, look)
}

// forEachNode runs f on every master (Cluster, Ring) or on the one server.
func (r *Redis) forEachNode(ctx context.Context, f func(context.Context, redis.Cmdable) error) error {
	switch c := r.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return f(ctx, m) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, s *redis.Client) error { return f(ctx, s) })
	default:
		return f(ctx, r.client)
	}
}

// ---- Stats ----

// countBlocks counts blocks and entries on one node: exactly on a small
// node, else from DBSIZE and a RANDOMKEY sample.
func (r *Redis) countBlocks(ctx context.Context, c redis.Cmdable) (blocks, entries int64, err error) {
	size, err := c.DBSize(ctx).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("DBSIZE: %w", err)
	}
	segPrefix := r.prefix + "v2:s:"
	if size <= redisStatsExactKeys {
		var keys []string
		iter := c.Scan(ctx, 0, escapeGlob(segPrefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
			if len(keys) > 2*redisStatsExactKeys {
				break // keys arrived since DBSIZE; good enough
			}
		}
		if err := iter.Err(); err != nil {
			return 0, 0, fmt.Errorf("SCAN: %w", err)
		}
		return r.countSegments(ctx, c, keys)
	}
	pipe := c.Pipeline()
	samples := make([]*redis.StringCmd, redisStatsSamples)
	for i := range samples {
		samples[i] = pipe.RandomKey(ctx)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, fmt.Errorf("RANDOMKEY: %w", err)
	}
	var keys []string
	for _, s := range samples {
		if k, err := s.Result(); err == nil && strings.HasPrefix(k, segPrefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return 0, 0, nil
	}
	fields, ents, err := r.countSegments(ctx, c, keys)
	if err != nil {
		return 0, 0, err
	}
	segs := float64(size) * float64(len(keys)) / float64(redisStatsSamples)
	return int64(math.Round(segs * float64(fields) / float64(len(keys)))), int64(math.Round(segs * float64(ents) / float64(len(keys)))), nil
}

// countSegments sums the fields (blocks) and entries of segment keys.
func (r *Redis) countSegments(ctx context.Context, c redis.Cmdable, keys []string) (blocks, entries int64, err error) {
	if len(keys) == 0 {
		return 0, 0, nil
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HVals(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, 0, fmt.Errorf("HVALS: %w", err)
	}
	for _, cmd := range cmds {
		for _, v := range cmd.Val() {
			blocks++
			entries += int64(strings.Count(v, ",") + 1)
		}
	}
	return blocks, entries, nil
}
