package kvindex

// Match's server-side read of a segment: runs of equal block values.
//
// The blocks of a shared prefix are, nearly always, held by the same
// workers on the same tiers at the same epochs, so consecutive fields of a
// segment key usually carry the same value, byte for byte (the store
// script rewrites a field's entries in the order it met them). An HMGET of
// the segment returned that value once per block, every holder entry 64
// times over, and the client built a string per field and parsed every
// entry of each (issue 27's profile of a Cluster decision: ~2,800
// allocations and ~0.5 ms of client CPU per ~8k-token decision).
//
// redisSegmentRunsScript reads the segment's fields server-side and
// returns it run-length encoded: {n1, v1, n2, v2, ...}, each v the value of
// n consecutive blocks, ending at the first block nobody holds (a Match
// stops there; what follows cannot extend any prefix). The client parses
// each run's value once and applies its n blocks in one step (applyRun).
// The request is one argument per segment too: the blocks' fields, 16 hex
// digits each, concatenated.
//
// Not a per-worker depth computed on the server: whether an entry counts
// depends on the registry (the worker's epoch and liveness, redis.go),
// which lives in another key, in another Cluster slot, so a script on the
// segment's master cannot read it; the client keeps that judgement, and
// with it the pruning of stale entries and exact equality with the memory
// index (property_test.go). The stored layout is unchanged (no schema
// bump): only the read is new.
//
// One EVALSHA per segment key, not per master: a script may only declare
// keys of one slot in Cluster (CROSSSLOT otherwise), and each segment has
// its own hash tag. So a chain of n blocks costs ceil(n/64) calls, on at
// most min(ceil(n/64), masters) masters, sent in one pipeline (go-redis
// groups it per master and runs the groups in parallel, following MOVED
// and ASK: ClusterClient.processPipeline). EVALSHA rather than a Redis
// Function (FCALL, 7.0+): functions are not propagated between Cluster
// shards, so every master, including one added or promoted later, would
// need a FUNCTION LOAD before its first read, while a script missing from
// a master's cache (restart, failover: the cache is not persisted nor
// replicated) answers NOSCRIPT and is resent whole once with EVAL, which
// caches it again (https://redis.io/docs/latest/develop/interact/programmability/eval-intro/,
// "Script cache"; .../functions-intro/, "Functions in cluster"). Redis 7.0's
// `#!lua flags=no-writes` shebang is left off so that the script runs on
// any Redis the write scripts run on.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// redisSegmentRunsScript: KEYS[1] a segment key, ARGV[1] the fields of the
// blocks to read, 16 bytes each, in chain order. Returns {n1, v1, ...}: the
// values of the leading held blocks, run-length encoded.
//
// A small hash (listpack encoding: hash-max-listpack-entries 128 and
// values of at most hash-max-listpack-value 64 bytes, a block with up to
// about four holders) answers HMGET by a linear scan per field, 64 scans
// of a 64-field segment; its HGETALL is one pass, in insertion order,
// which is chain order when the segment holds one chain's blocks (the
// store script adds a chain's new fields in order; rewriting a field keeps
// its place). So a listpack segment is read whole, and used as read when
// its first fields are exactly the requested ones in order (with, if it
// has fewer, the next requested field absent); anything else (another
// branch's fields first, a hashtable-encoded segment, whose HMGET is a
// lookup per field) takes HMGET. Both give the same values. On a loaded
// 2-core box this took the script's server time per 64-field segment from
// ~35-60 to ~22-35 µs (INFO commandstats; HMGET alone ~17-30 µs).
// (OBJECT ENCODING: https://redis.io/docs/latest/commands/object-encoding/;
// the listpack thresholds: redis.conf of Redis 7.0, "hash-max-listpack-*".)
var redisSegmentRunsScript = redis.NewScript(`
local key, f = KEYS[1], ARGV[1]
local n = #f / 16
if n ~= math.floor(n) or n < 1 or n > 64 then
  return redis.error_reply('ERR segment runs: want 1..64 fields of 16 bytes')
end
local enc = redis.call('OBJECT', 'ENCODING', key)
if not enc then return {} end
local vals
if enc == 'listpack' or enc == 'ziplist' then
  local all = redis.call('HGETALL', key)
  local m = math.min(n, #all / 2)
  local names = {}
  for i = 1, m do names[i] = all[2 * i - 1] end
  if table.concat(names) == string.sub(f, 1, 16 * m) and
      (m == n or redis.call('HEXISTS', key, string.sub(f, 16 * m + 1, 16 * m + 16)) == 0) then
    vals = {}
    for i = 1, m do vals[i] = all[2 * i] end
  end
end
if not vals then
  local fields = {}
  for i = 1, n do fields[i] = string.sub(f, 16 * i - 15, 16 * i) end
  vals = redis.call('HMGET', key, unpack(fields))
end
local out, prev, run = {}, false, 0
for i = 1, n do
  local v = vals[i]
  if not v then break end
  if v == prev then
    run = run + 1
  else
    if prev then out[#out + 1] = run; out[#out + 1] = prev end
    prev, run = v, 1
  end
end
if prev then out[#out + 1] = run; out[#out + 1] = prev end
return out
`)

// segmentFieldsArg is the script's ARGV[1] for blocks: their fields
// concatenated (appendHex16), in b, which is returned for reuse.
func segmentFieldsArg(b []byte, blocks []uint64) []byte {
	b = b[:0]
	for _, h := range blocks {
		b = appendHex16(b, h)
	}
	return b
}

// errSegmentRunsReply is a reply this version's script cannot have sent.
var errSegmentRunsReply = errors.New("malformed segment runs reply")

// segmentRuns checks a script reply for blocks fields: pairs of a positive
// count and a string, the counts summing to at most blocks.
func segmentRuns(reply any, blocks int) ([]any, error) {
	runs, ok := reply.([]any)
	if !ok || len(runs)%2 != 0 {
		return nil, fmt.Errorf("%w: %T of %d elements", errSegmentRunsReply, reply, len(runs))
	}
	total := 0
	for i := 0; i < len(runs); i += 2 {
		n, ok := runs[i].(int64)
		if _, isStr := runs[i+1].(string); !ok || !isStr || n < 1 || n > int64(blocks-total) {
			return nil, fmt.Errorf("%w: run %d of %d blocks", errSegmentRunsReply, i/2, blocks)
		}
		total += int(n)
	}
	return runs, nil
}

// redisRunEntry is one live entry of a run's value: its worker number and
// tier.
type redisRunEntry struct {
	num  int64
	tier kvfleet.Tier
}

// applyRun applies blocks lo..lo+n-1 of chain, which all have value (the
// field's raw entries) in segment seg, as n applyBlock calls in order
// would: the value is parsed once. After the run's first block, every
// worker still matching was seen on that block with the entries of this
// value, so each further block sees it again on the same fastest tier;
// the rest of the run only moves the depths of those workers (extendRun).
// Stale entries are queued for pruning once per block, as a walk block by
// block would.
func (r *Redis) applyRun(m *redisMatch, lo, n int, seg uint64, chain []uint64, value string) {
	m.runSee, m.runPrune = m.runSee[:0], m.runPrune[:0]
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
			m.runPrune = append(m.runPrune, e)
			continue
		}
		ws, known := m.reg.workers[num]
		switch {
		case !known:
			// Numbers are never reused, so one at or below the snapshot's
			// "next" that is not registered belonged to a removed worker.
			// A higher one was registered after the snapshot was taken.
			if num <= m.reg.next {
				m.runPrune = append(m.runPrune, e)
			}
			continue
		case epoch < ws.epoch || ws.aliveUntil < m.deadBefore:
			m.runPrune = append(m.runPrune, e)
			continue
		case ws.aliveUntil < m.now:
			continue // expired; pruned once dead a full TTL (see above)
		}
		m.runSee = append(m.runSee, redisRunEntry{num, tier})
	}
	for pos := lo; pos < lo+n; pos++ {
		for _, e := range m.runPrune {
			r.queuePrune(seg, chain[pos], e)
		}
		if pos == lo {
			for _, e := range m.runSee {
				m.see(e.num, e.tier, pos)
			}
			m.advance(pos)
			if m.active == 0 {
				return
			}
		}
	}
	if n > 1 {
		m.extendRun(lo + n - 1)
	}
}

// extendRun moves every worker still matching to depth last+1 on the
// tiers it reached at the run's first block: what advance would do on
// each block up to last when each is seen again exactly as that one.
func (m *redisMatch) extendRun(last int) {
	for i := range m.states {
		st := &m.states[i]
		if st.done {
			continue
		}
		st.seenAt = last + 1
		for t := st.slowest; t < kvfleet.NumTiers; t++ {
			st.depths[t] = last + 1
		}
	}
}

// applyBlock applies block pos of chain, with value in segment seg: a run
// of one.
func (r *Redis) applyBlock(m *redisMatch, pos int, seg uint64, chain []uint64, value string) {
	r.applyRun(m, pos, 1, seg, chain, value)
}
