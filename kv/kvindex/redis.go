package kvindex

// Redis backend: one index shared by several extproc replicas, on a
// standalone Redis or a Redis Cluster through the same code. The block
// layout (segment keys, one read per segment) is in redis_segments.go;
// this file keeps the worker registry, its snapshot, the heartbeat and the
// generation.
//
// Registry:
//
//	<prefix>workers   HASH, the registry (one small key)
//	    next      last number handed out (HINCRBY)
//	    id:<w>    num of worker w (w = WorkerID.String())
//	    w:<num>   w, the reverse mapping read by Match
//	    e:<num>   epoch: Clear bumps it, which makes every entry the worker
//	              wrote before stale at once, with no SCAN
//	    a:<num>   alive-until, unix ms. Each Redis instance refreshes it to
//	              now+WorkerTTL every WorkerTTL/3 for the workers it has
//	              written for; a worker past it is invisible to Match, so
//	              the blocks of a worker whose indexer died disappear
//	              without a keyspace SCAN.
//	    Registry changes are single-key Lua scripts (atomic, Cluster-safe).
//	    RemoveWorker deletes the worker's four fields; its number is never
//	    reused, so its block entries can never be mistaken for another's.
//	    A worker registered again after its alive-until passed gets a new
//	    epoch: the events it sent while declared dead were lost with its
//	    indexer, so its old blocks must not come back.
//
// A block entry is live when its num is in the registry, the worker's
// alive-until has not passed, and its epoch is at least the registry's.
// Match reads the registry through a local snapshot at most
// RegistryStaleness old (this instance's own Clear, RemoveWorker and new
// registrations invalidate it at once), so another replica's Clear or
// RemoveWorker shows here within RegistryStaleness. Epochs only grow, so an
// entry's epoch above the snapshot's is live (written after a Clear this
// snapshot has not seen). The snapshot is reloaded in the background once
// half that old, so a Match waits for the registry only after this
// instance's own registry change or a failed background reload.
//
// Stale entries met by Match (older epoch, removed worker, worker dead for
// more than WorkerTTL, malformed) are deleted lazily by a background pruner
// through a bounded queue, each with a compare-and-delete script, so an
// entry rewritten in between is never lost.
//
// Clocks: alive-until is written and read with each instance's own clock;
// replicas need clocks in sync to well within WorkerTTL (NTP is plenty).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/kv/indexconfig"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// RedisConfig configures NewRedis.
type RedisConfig struct {
	// Client is used by the index; Close closes it only when OwnClient is
	// set (indexer.OpenIndex hands over the one it creates).
	Client    redis.UniversalClient
	OwnClient bool
	// Prefix starts every key (indexconfig.DefaultRedisPrefix when empty). It may not contain
	// '{' or '}': a hash tag would put the whole index in one slot.
	Prefix string
	// BlockTTL bounds how long a block key lives after its last store
	// (indexconfig.DefaultRedisBlockTTL when zero).
	BlockTTL time.Duration
	// WorkerTTL is how long a worker stays visible after the last
	// heartbeat from an instance writing for it
	// (indexconfig.DefaultRedisWorkerTTL when zero).
	WorkerTTL time.Duration
	// RegistryStaleness bounds how old Match's registry snapshot may be
	// (250ms, or WorkerTTL/4 if smaller, when zero). At most WorkerTTL/3.
	RegistryStaleness time.Duration
}

const (
	// The prefix and TTL defaults are the index.redis options' own
	// (indexerconfig); a zero field here takes them.
	defaultRedisStaleness   = 250 * time.Millisecond
	redisMaxPrefix          = 128
	redisMaxChain           = 1 << 16 // blocks per Match: 1M tokens at 16 per block
	redisMaxHashesPerCall   = 1 << 16 // hashes per Store/Remove
	redisWriteBatch         = 512     // blocks per pipeline round trip
	redisMaxRegistryWorkers = 1 << 16 // refuse a registry larger than this
	redisPruneQueue         = 4096
	redisPruneBatch         = 256
	redisHeartbeatBatch     = 256 // workers per heartbeat script call
	redisStatsExactKeys     = 4096
	redisStatsSamples       = 64
)

// Redis is the Redis-backed Index. See the schema comment above.
type Redis struct {
	client      redis.UniversalClient
	ownClient   bool
	prefix      string
	registryKey string
	blockTTL    time.Duration
	workerTTL   time.Duration
	staleness   time.Duration
	firstHeld   redisFirstHeld

	// writers are the workers this instance writes for (and heartbeats).
	writersMu sync.Mutex
	writers   map[kvfleet.WorkerID]*redisWriter

	regMu    sync.Mutex // serialises registry reloads
	reg      atomic.Pointer[redisRegistry]
	regDirty atomic.Uint64 // bumped by this instance's own registry changes
	// regAhead asks registryLoop to reload the snapshot before it is too
	// old for Match, so that Match does not wait for the reload.
	regAhead chan struct{}
	now      func() time.Time // the registry's clock; tests move it

	prune chan redisPrune
	// bg scopes the background goroutines' calls; Close cancels it.
	bg     context.Context
	stopBG context.CancelFunc
	closed atomic.Bool
	once   sync.Once
	wg     sync.WaitGroup

	counters redisCounters

	genMu sync.Mutex
	gen   string // last Generation seen; "" before the first call
}

var (
	_ Index        = (*Redis)(nil)
	_ Generationer = (*Redis)(nil)
	_ Shared       = (*Redis)(nil)
)

// redisWriter is a worker this instance writes for: its registry number
// and the epoch its stores carry.
type redisWriter struct {
	num   int64
	epoch int64
}

// RedisCounters are cumulative counts since NewRedis.
type RedisCounters struct {
	Matches                 int64 // Match calls that reached Redis
	MatchRoundTrips         int64 // pipelined round trips issued by Match
	MatchBlocksRead         int64 // blocks (segment fields) read by Match
	MatchKeysRead           int64 // segment keys read by Match
	RegistryReloads         int64
	RegistryWaits           int64 // reloads a Match or Stats call waited for (the rest ran ahead, in the background)
	RegistryBadRows         int64 // registry fields that failed to parse (ignored)
	PruneQueued             int64 // stale fields queued for deletion
	PruneDropped            int64 // stale fields not queued: queue full
	Pruned                  int64 // stale fields deleted
	PruneErrors             int64
	Heartbeats              int64 // heartbeat rounds completed
	HeartbeatErrors         int64
	WorkersRevived          int64 // heartbeats that found a worker already expired
	WorkersRemovedElsewhere int64 // workers removed by another instance, noticed by heartbeat
	StoreRoundTrips         int64
	RemoveRoundTrips        int64
	Wipes                   int64 // generation changes seen: the index lost its data
}

type redisCounters struct {
	matches, matchRoundTrips, matchBlocksRead    atomic.Int64
	matchKeysRead                                atomic.Int64
	registryReloads, registryBadRows             atomic.Int64
	registryWaits                                atomic.Int64
	pruneQueued, pruneDropped, pruned, pruneErrs atomic.Int64
	heartbeats, heartbeatErrs                    atomic.Int64
	workersRevived, workersRemovedElsewhere      atomic.Int64
	storeRoundTrips, removeRoundTrips            atomic.Int64
	wipes                                        atomic.Int64
}

// Counters returns a snapshot of the cumulative counters, for metrics.
func (r *Redis) Counters() RedisCounters {
	c := &r.counters
	return RedisCounters{
		Matches:                 c.matches.Load(),
		MatchRoundTrips:         c.matchRoundTrips.Load(),
		MatchBlocksRead:         c.matchBlocksRead.Load(),
		MatchKeysRead:           c.matchKeysRead.Load(),
		RegistryReloads:         c.registryReloads.Load(),
		RegistryWaits:           c.registryWaits.Load(),
		RegistryBadRows:         c.registryBadRows.Load(),
		PruneQueued:             c.pruneQueued.Load(),
		PruneDropped:            c.pruneDropped.Load(),
		Pruned:                  c.pruned.Load(),
		PruneErrors:             c.pruneErrs.Load(),
		Heartbeats:              c.heartbeats.Load(),
		HeartbeatErrors:         c.heartbeatErrs.Load(),
		WorkersRevived:          c.workersRevived.Load(),
		WorkersRemovedElsewhere: c.workersRemovedElsewhere.Load(),
		StoreRoundTrips:         c.storeRoundTrips.Load(),
		RemoveRoundTrips:        c.removeRoundTrips.Load(),
		Wipes:                   c.wipes.Load(),
	}
}

// NewRedis checks the configuration, pings Redis and starts the heartbeat
// and pruner goroutines; Close stops them.
func NewRedis(ctx context.Context, cfg RedisConfig) (*Redis, error) {
	if cfg.Client == nil {
		return nil, errors.New("redis index: config: Client is nil")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = indexconfig.DefaultRedisPrefix
	}
	if len(cfg.Prefix) > redisMaxPrefix || strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("redis index: config: prefix %q: want at most %d bytes and no '{' or '}' (a hash tag would put every key in one Cluster slot)", cfg.Prefix, redisMaxPrefix)
	}
	if cfg.BlockTTL == 0 {
		cfg.BlockTTL = indexconfig.DefaultRedisBlockTTL
	}
	if cfg.WorkerTTL == 0 {
		cfg.WorkerTTL = indexconfig.DefaultRedisWorkerTTL
	}
	if cfg.BlockTTL < time.Second {
		return nil, fmt.Errorf("redis index: config: block TTL %v: want at least 1s", cfg.BlockTTL)
	}
	if cfg.WorkerTTL < 100*time.Millisecond {
		return nil, fmt.Errorf("redis index: config: worker TTL %v: want at least 100ms", cfg.WorkerTTL)
	}
	if cfg.RegistryStaleness == 0 {
		cfg.RegistryStaleness = min(defaultRedisStaleness, cfg.WorkerTTL/4)
	}
	// A snapshot older than the heartbeat slack (WorkerTTL - WorkerTTL/3)
	// could show a live worker as expired.
	if cfg.RegistryStaleness < 0 || cfg.RegistryStaleness > cfg.WorkerTTL/3 {
		return nil, fmt.Errorf("redis index: config: registry staleness %v: want 0..%v (worker TTL / 3)", cfg.RegistryStaleness, cfg.WorkerTTL/3)
	}
	if err := cfg.Client.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis index: ping: %w", err)
	}
	r := &Redis{
		client:      cfg.Client,
		ownClient:   cfg.OwnClient,
		prefix:      cfg.Prefix,
		registryKey: cfg.Prefix + "workers",
		blockTTL:    cfg.BlockTTL,
		workerTTL:   cfg.WorkerTTL,
		staleness:   cfg.RegistryStaleness,
		writers:     make(map[kvfleet.WorkerID]*redisWriter),
		prune:       make(chan redisPrune, redisPruneQueue),
		regAhead:    make(chan struct{}, 1),
		now:         time.Now,
	}
	if err := r.checkSchema(ctx); err != nil {
		return nil, err
	}
	r.bg, r.stopBG = context.WithCancel(context.Background())
	r.wg.Add(3)
	go r.heartbeatLoop()
	go r.pruneLoop()
	go r.registryLoop()
	return r, nil
}

// redisNumberBase picks where a fresh registry's worker numbers start: a
// random multiple of 2^20 below 2^40, so two registries' ranges overlap
// with probability about 2^-20 (numbers stay short in field names).
func redisNumberBase() int64 {
	return rand.Int64N(1<<20) << 20
}

// Generation identifies the current contents of the Redis index. It is a
// random token kept at <prefix>gen; when the key is missing the data was
// lost outside kvgate (FLUSHALL, a restart without persistence, an
// eviction), a new token is written and returned. A caller that sees the
// token change must rebuild what it wrote (the indexer resyncs every worker
// from its engine's replay buffer). Any change also drops this instance's
// cached worker numbers, which may now belong to nobody.
func (r *Redis) Generation(ctx context.Context) (string, error) {
	key := r.prefix + "gen"
	tok, err := r.client.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		// Another instance may write its token first; everyone then reads
		// the same one.
		if err := r.client.SetNX(ctx, key, strconv.FormatUint(rand.Uint64(), 36), 0).Err(); err != nil {
			r.noteErr(err)
			return "", fmt.Errorf("redis index: generation: %w", err)
		}
		tok, err = r.client.Get(ctx, key).Result()
	}
	if err != nil {
		r.noteErr(err)
		return "", fmt.Errorf("redis index: generation: %w", err)
	}
	r.genMu.Lock()
	changed := r.gen != "" && r.gen != tok
	r.gen = tok
	r.genMu.Unlock()
	if changed {
		r.writersMu.Lock()
		clear(r.writers)
		r.writersMu.Unlock()
		r.regDirty.Add(1)
		r.counters.wipes.Add(1)
		slog.Warn("redis index: the index's data was lost (generation key gone); writers re-register", "prefix", r.prefix)
	}
	return tok, nil
}

// Close stops the heartbeat and pruner, and closes the client if the
// index owns it (RedisConfig.OwnClient). Workers this instance wrote for
// expire WorkerTTL after its last heartbeat unless another instance writes
// for them.
func (r *Redis) Close() error {
	var err error
	r.once.Do(func() {
		r.closed.Store(true)
		r.stopBG()
		r.wg.Wait()
		if r.ownClient {
			err = r.client.Close()
		}
	})
	return err
}

// LoadStore implements Shared: the extproc replicas' shared load rides on
// the index's client and prefix.
func (r *Redis) LoadStore() (redis.UniversalClient, string) { return r.client, r.prefix }

var errRedisClosed = errors.New("index closed")

// noteErr asks a Cluster client to reload its slot map after a network
// error: go-redis reloads on MOVED, but a dead master sends none, so
// without this the client keeps dialling it until its periodic reload.
func (r *Redis) noteErr(err error) {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return // Redis answered
	}
	if cc, ok := r.client.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// ---- registry scripts (each touches the registry key only) ----

// redisRegisterScript returns {num, epoch} for ARGV[1], registering it when
// unknown. ARGV[2]=now ms, ARGV[3]=alive-until ms, ARGV[4]="1" to bump the
// epoch (Clear). A known worker whose alive-until passed is bumped too.
// ARGV[5] is where numbering starts in a registry that has none yet: a
// random base, so that after the registry is lost (FLUSHALL, a restart
// without persistence) new numbers never reuse the ones an instance may
// still hold in its cache until it notices the wipe (Generation).
var redisRegisterScript = redis.NewScript(`
local reg = KEYS[1]
if redis.call('HEXISTS', reg, 'next') == 0 then
  redis.call('HSET', reg, 'next', ARGV[5])
end
local n = redis.call('HGET', reg, 'id:' .. ARGV[1])
local bump = ARGV[4] == '1'
if not n then
  n = tostring(redis.call('HINCRBY', reg, 'next', 1))
  redis.call('HSET', reg, 'id:' .. ARGV[1], n, 'w:' .. n, ARGV[1], 'e:' .. n, '0')
  bump = false
elseif tonumber(redis.call('HGET', reg, 'a:' .. n) or '0') < tonumber(ARGV[2]) then
  bump = true
end
local e
if bump then
  e = redis.call('HINCRBY', reg, 'e:' .. n, 1)
else
  e = tonumber(redis.call('HGET', reg, 'e:' .. n) or '0')
end
redis.call('HSET', reg, 'a:' .. n, ARGV[3])
return {tonumber(n), e}
`)

// redisHeartbeatScript refreshes alive-until (ARGV[2]) for each (worker,
// num) pair in ARGV[3:], returning per pair the current epoch, or -1 when
// the worker was removed or renumbered by another instance. A worker found
// expired (alive-until < ARGV[1]) gets a new epoch, as on registration.
var redisHeartbeatScript = redis.NewScript(`
local reg = KEYS[1]
local now = tonumber(ARGV[1])
local out = {}
for i = 3, #ARGV, 2 do
  local n = ARGV[i + 1]
  if redis.call('HGET', reg, 'id:' .. ARGV[i]) == n then
    local e
    if tonumber(redis.call('HGET', reg, 'a:' .. n) or '0') < now then
      e = -2 - redis.call('HINCRBY', reg, 'e:' .. n, 1)
    else
      e = tonumber(redis.call('HGET', reg, 'e:' .. n) or '0')
    end
    redis.call('HSET', reg, 'a:' .. n, ARGV[2])
    out[#out + 1] = e
  else
    out[#out + 1] = -1
  end
end
return out
`)

// redisRemoveWorkerScript deletes ARGV[1]'s registry fields.
var redisRemoveWorkerScript = redis.NewScript(`
local reg = KEYS[1]
local n = redis.call('HGET', reg, 'id:' .. ARGV[1])
if not n then return 0 end
redis.call('HDEL', reg, 'id:' .. ARGV[1], 'w:' .. n, 'e:' .. n, 'a:' .. n)
return 1
`)

// writer returns w's registry number and store epoch, registering w on
// first use by this instance.
func (r *Redis) writer(ctx context.Context, w kvfleet.WorkerID) (num, epoch int64, err error) {
	if r.closed.Load() {
		return 0, 0, errRedisClosed
	}
	r.writersMu.Lock()
	ws, ok := r.writers[w]
	if ok {
		num, epoch = ws.num, ws.epoch
	}
	r.writersMu.Unlock()
	if ok {
		return num, epoch, nil
	}
	return r.register(ctx, w, false)
}

// register runs the register script (bumping the epoch when clear is set)
// and records the result as this instance's view of w.
func (r *Redis) register(ctx context.Context, w kvfleet.WorkerID, clear bool) (num, epoch int64, err error) {
	if err := validWorker(w); err != nil {
		return 0, 0, err
	}
	now := time.Now()
	bump := "0"
	if clear {
		bump = "1"
	}
	res, err := redisRegisterScript.Run(ctx, r.client, []string{r.registryKey},
		w.String(), now.UnixMilli(), now.Add(r.workerTTL).UnixMilli(), bump, redisNumberBase()).Int64Slice()
	if err != nil {
		r.noteErr(err)
		return 0, 0, fmt.Errorf("register worker %s: %w", w, err)
	}
	if len(res) != 2 || res[0] <= 0 || res[1] < 0 {
		return 0, 0, fmt.Errorf("register worker %s: unexpected reply %v", w, res)
	}
	num, epoch = res[0], res[1]
	r.writersMu.Lock()
	r.writers[w] = &redisWriter{num: num, epoch: epoch}
	r.writersMu.Unlock()
	r.regDirty.Add(1)
	return num, epoch, nil
}

func (r *Redis) checkWrite(tier kvfleet.Tier, n int) error {
	if err := validTier(tier); err != nil {
		return err
	}
	if n > redisMaxHashesPerCall {
		return fmt.Errorf("%d blocks in one call: want at most %d", n, redisMaxHashesPerCall)
	}
	return nil
}

// Clear implements Index: one epoch bump makes every field w wrote stale.
func (r *Redis) Clear(ctx context.Context, w kvfleet.WorkerID) error {
	if r.closed.Load() {
		return fmt.Errorf("redis index: clear %s: %w", w, errRedisClosed)
	}
	if _, _, err := r.register(ctx, w, true); err != nil {
		return fmt.Errorf("redis index: clear: %w", err)
	}
	return nil
}

// RemoveWorker implements Index.
func (r *Redis) RemoveWorker(ctx context.Context, w kvfleet.WorkerID) error {
	if r.closed.Load() {
		return fmt.Errorf("redis index: remove worker %s: %w", w, errRedisClosed)
	}
	if err := validWorker(w); err != nil {
		return fmt.Errorf("redis index: remove worker: %w", err)
	}
	// Forget locally first so a concurrent heartbeat cannot renew w.
	r.writersMu.Lock()
	delete(r.writers, w)
	r.writersMu.Unlock()
	err := redisRemoveWorkerScript.Run(ctx, r.client, []string{r.registryKey}, w.String()).Err()
	r.regDirty.Add(1)
	if err != nil {
		r.noteErr(err)
		return fmt.Errorf("redis index: remove worker %s: %w", w, err)
	}
	return nil
}

// ---- heartbeat ----

func (r *Redis) heartbeatLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.workerTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-r.bg.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(r.bg, r.workerTTL/3)
		err := r.heartbeat(ctx)
		cancel()
		if err != nil {
			if r.bg.Err() != nil {
				return
			}
			r.counters.heartbeatErrs.Add(1)
			slog.Warn("redis index: heartbeat failed; workers expire if this persists", "err", err, "worker_ttl", r.workerTTL)
			continue
		}
		r.counters.heartbeats.Add(1)
	}
}

// heartbeat renews alive-until for every worker this instance writes for,
// and picks up epoch changes made by the script (expired workers) or
// removals made by another instance.
func (r *Redis) heartbeat(ctx context.Context) error {
	type entry struct {
		w   kvfleet.WorkerID
		num int64
	}
	r.writersMu.Lock()
	all := make([]entry, 0, len(r.writers))
	for w, ws := range r.writers {
		all = append(all, entry{w, ws.num})
	}
	r.writersMu.Unlock()
	for start := 0; start < len(all); start += redisHeartbeatBatch {
		batch := all[start:min(start+redisHeartbeatBatch, len(all))]
		now := time.Now()
		args := make([]any, 0, 2+2*len(batch))
		args = append(args, now.UnixMilli(), now.Add(r.workerTTL).UnixMilli())
		for _, e := range batch {
			args = append(args, e.w.String(), e.num)
		}
		res, err := redisHeartbeatScript.Run(ctx, r.client, []string{r.registryKey}, args...).Int64Slice()
		if err != nil {
			r.noteErr(err)
			return fmt.Errorf("redis index: heartbeat: %w", err)
		}
		if len(res) != len(batch) {
			return fmt.Errorf("redis index: heartbeat: %d replies for %d workers", len(res), len(batch))
		}
		changed := false
		r.writersMu.Lock()
		for i, e := range batch {
			ws, ok := r.writers[e.w]
			if !ok || ws.num != e.num {
				continue // removed or re-registered here meanwhile
			}
			switch epoch := res[i]; {
			case epoch == -1:
				// Removed by another instance: the next write registers anew.
				delete(r.writers, e.w)
				r.counters.workersRemovedElsewhere.Add(1)
				changed = true
			case epoch <= -2:
				ws.epoch = max(ws.epoch, -2-epoch)
				r.counters.workersRevived.Add(1)
				changed = true
			default:
				// max: a Clear here may have raised the epoch after the
				// script read it.
				ws.epoch = max(ws.epoch, epoch)
			}
		}
		r.writersMu.Unlock()
		if changed {
			r.regDirty.Add(1)
		}
	}
	return nil
}

// ---- registry snapshot ----

type redisRegistry struct {
	loadedAt time.Time
	dirtyGen uint64
	next     int64 // numbers above it were handed out after this snapshot
	workers  map[int64]redisWorkerState
}

type redisWorkerState struct {
	id         kvfleet.WorkerID
	epoch      int64
	aliveUntil int64 // unix ms
}

// registry returns a snapshot no older than the staleness bound and newer
// than this instance's last own registry change. A snapshot past half the
// bound is still returned, and reloaded in the background for the next
// caller: the reload is a round trip of its own, and a Match that waited
// for it (once per RegistryStaleness: about one decision in a hundred at
// c=1, 8k tokens) set the p99 (issue 19). Only a dirty snapshot, or one
// the background reload failed to renew in time, is reloaded while the
// caller waits.
func (r *Redis) registry(ctx context.Context) (*redisRegistry, error) {
	if s := r.reg.Load(); s != nil && s.dirtyGen == r.regDirty.Load() {
		age := r.now().Sub(s.loadedAt)
		if age <= r.staleness {
			if age > r.staleness/2 {
				select {
				case r.regAhead <- struct{}{}:
				default: // a reload is already asked for
				}
			}
			return s, nil
		}
	}
	return r.reloadRegistry(ctx, r.staleness, true)
}

// registryLoop runs the reloads registry asks for ahead of need.
func (r *Redis) registryLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.bg.Done():
			return
		case <-r.regAhead:
		}
		ctx, cancel := context.WithTimeout(r.bg, r.staleness)
		_, err := r.reloadRegistry(ctx, r.staleness/2, false)
		cancel()
		if err != nil && r.bg.Err() == nil {
			// The next Match past the bound reloads, and reports, itself.
			slog.Debug("redis index: background registry reload", "err", err)
		}
	}
}

// reloadRegistry reads the registry unless another caller reloaded it
// while this one waited for the lock (a snapshot at most maxAge old and
// not dirty is kept). wait says whether a Match or Stats call waits.
func (r *Redis) reloadRegistry(ctx context.Context, maxAge time.Duration, wait bool) (*redisRegistry, error) {
	r.regMu.Lock()
	defer r.regMu.Unlock()
	if s := r.reg.Load(); s != nil && s.dirtyGen == r.regDirty.Load() && r.now().Sub(s.loadedAt) <= maxAge {
		return s, nil // another caller reloaded it
	}
	gen := r.regDirty.Load()
	start := r.now()
	raw, err := r.client.HGetAll(ctx, r.registryKey).Result()
	if err != nil {
		r.noteErr(err)
		return nil, fmt.Errorf("read registry %s: %w", r.registryKey, err)
	}
	s, bad, err := parseRedisRegistry(raw)
	if err != nil {
		return nil, fmt.Errorf("read registry %s: %w", r.registryKey, err)
	}
	s.loadedAt, s.dirtyGen = start, gen
	r.counters.registryReloads.Add(1)
	if wait {
		r.counters.registryWaits.Add(1)
	}
	r.counters.registryBadRows.Add(int64(bad))
	r.reg.Store(s)
	return s, nil
}

// parseRedisRegistry builds a snapshot from the registry hash. Fields it
// cannot parse are counted and skipped: a stray field must not take Match
// down. A worker missing its epoch or alive-until reads as expired.
func parseRedisRegistry(raw map[string]string) (*redisRegistry, int, error) {
	if len(raw) > 4*redisMaxRegistryWorkers+1 {
		return nil, 0, fmt.Errorf("%d fields: more than %d workers' worth", len(raw), redisMaxRegistryWorkers)
	}
	s := &redisRegistry{workers: make(map[int64]redisWorkerState)}
	bad := 0
	if v, ok := raw["next"]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			bad++
		} else {
			s.next = n
		}
	}
	for f, v := range raw {
		if len(f) < 3 || f[1] != ':' || f[0] != 'w' {
			continue
		}
		num, err := strconv.ParseInt(f[2:], 10, 64)
		if err != nil || num <= 0 {
			bad++
			continue
		}
		id, err := kvfleet.ParseWorkerID(v)
		if err != nil {
			bad++
			continue
		}
		ws := redisWorkerState{id: id}
		n := strconv.FormatInt(num, 10)
		if e, ok := raw["e:"+n]; ok {
			if ws.epoch, err = strconv.ParseInt(e, 10, 64); err != nil || ws.epoch < 0 {
				bad++
				continue
			}
		}
		if a, ok := raw["a:"+n]; ok {
			if ws.aliveUntil, err = strconv.ParseInt(a, 10, 64); err != nil {
				bad++
				continue
			}
		}
		s.workers[num] = ws
	}
	return s, bad, nil
}

// ---- Match ----

// redisMatchState is one candidate worker's progress along the chain.
type redisMatchState struct {
	num     int64
	slowest kvfleet.Tier // slowest of the per-block fastest tiers so far
	depths  kvfleet.Depths
	done    bool // missed a block: depths are final
	// fastest is the fastest live tier on the block being applied, valid
	// when seenAt is that block's position + 1.
	fastest kvfleet.Tier
	seenAt  int
}

// redisMatch is one Match call's working state. Candidates live in a
// slice indexed through a map, rather than in maps keyed by number that
// every block ranged over twice: the per-block work is then one map
// lookup per field and a slice walk (issue 19's profile had the map
// ranges at a third of applyBlock).
type redisMatch struct {
	reg        *redisRegistry
	now        int64         // unix ms
	deadBefore int64         // alive-until below this: dead a full TTL, prune
	index      map[int64]int // number -> position in states
	states     []redisMatchState
	active     int // states not done
}

func newRedisMatch(reg *redisRegistry, now, deadBefore int64) *redisMatch {
	return &redisMatch{reg: reg, now: now, deadBefore: deadBefore, index: map[int64]int{}}
}

// redisFirstHeld remembers the first blocks of chains this instance's last
// Match found held by some worker (len(m.states) > 0 means some worker
// held block 0). A chain starting with one is read whole in one round
// trip; any other is probed with its first segment first, so that a miss
// at block 0 (a prompt nobody has cached) reads one key, not the whole
// chain (with one key per block, such a miss read whole cost 2.6-4x the
// CPU on loopback: BenchmarkRedisMatch, miss). The memory is only a hint
// about how much to read: a wrong entry costs a round trip or extra reads,
// never a wrong match. Chat requests share their first block (the template and system
// prompt), so in a serving fleet nearly every chain starts with a
// remembered one.
type redisFirstHeld struct {
	mu   sync.Mutex
	held map[uint64]struct{}
}

const redisFirstHeldKeep = 1 << 14 // entries; all are dropped when full

func (f *redisFirstHeld) seen(h uint64) bool {
	f.mu.Lock()
	_, ok := f.held[h]
	f.mu.Unlock()
	return ok
}

func (f *redisFirstHeld) note(h uint64, held bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !held {
		delete(f.held, h)
		return
	}
	if f.held == nil || len(f.held) >= redisFirstHeldKeep {
		// Bounded without an LRU's bookkeeping: a flush costs each chain
		// one extra round trip the next time it is matched.
		f.held = make(map[uint64]struct{})
	}
	f.held[h] = struct{}{}
}

// result appends the per-number depths to into, one entry per worker: a
// worker registered under several numbers keeps its deepest match.
func (m *redisMatch) result(into *Match) {
	for i := range m.states {
		st := &m.states[i]
		id := m.reg.workers[st.num].id
		if prev, ok := into.Lookup(id); !ok || prev.Max() < st.depths.Max() {
			into.Set(id, st.depths)
		}
	}
}

// ---- Stats ----

// Stats implements Index; see redis_segments.go for what is exact.
func (r *Redis) Stats(ctx context.Context) (Stats, error) {
	reg, err := r.registry(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("redis index: stats: %w", err)
	}
	var st Stats
	now := time.Now().UnixMilli()
	for _, w := range reg.workers {
		if w.aliveUntil >= now {
			st.Workers++
		}
	}
	var mu sync.Mutex
	each := func(ctx context.Context, c redis.Cmdable) error {
		blocks, entries, err := r.countBlocks(ctx, c)
		if err != nil {
			return err
		}
		mu.Lock()
		st.Blocks += blocks
		st.Entries += entries
		mu.Unlock()
		return nil
	}
	if err := r.forEachNode(ctx, each); err != nil {
		r.noteErr(err)
		return Stats{}, fmt.Errorf("redis index: stats: %w", err)
	}
	return st, nil
}

// escapeGlob escapes SCAN MATCH metacharacters in a literal prefix.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if strings.IndexByte(`*?[]\`, c) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}
