package extproc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/extproc/loadview"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

// Shared load between extproc replicas (extprocconfig.SharedLoad).
//
// Each replica counts only the requests it routed itself (loadview). Behind
// one Envoy with several replicas, a burst of requests for the same prefix
// lands on all of them at once and each sends its share to the same "best"
// worker (Dynamo #589). So every Interval each replica publishes its
// per-worker load to Redis and reads the others' latest snapshots; the
// picker sees its own live load plus the peers' load, extrapolated from
// their last snapshot by this replica's own change since (loadview/
// peers.go: between reads every replica would otherwise act on the same
// stale figures and pile onto the same worker). The request path only
// reads an atomic pointer: no Redis round trip is added to it.
//
// Keys (single-key commands only, no hash tags: works on Redis Cluster):
//
//	<prefix>load:<replica>   STRING, the replica's snapshot (JSON below),
//	                         SET with PX = TTL at every publish, so a dead
//	                         replica's load vanishes TTL after its last one.
//	<prefix>load-replicas    HASH, field <replica> = unix ms of its last
//	                         publish: how peers find each other without SCAN.
//	                         A field whose key has expired is deleted by the
//	                         first reader that finds the key gone.
//
// Snapshot: {"v":1,"at":<unix ms>,"routed":<n>,"workers":[["<endpoint>#<rank>",inflight,prefill_tokens,decode_blocks],…]}
// Only workers with something in flight are listed. routed is how many
// requests the replica has routed since it started (peers derive its share
// of the traffic from it); optional, so that replicas without it (older
// builds) still interoperate: their share is taken as 1.

const (
	sharedLoadVersion = 1
	// maxSnapshotBytes bounds one peer's snapshot (about 60 bytes a
	// worker: 64k workers).
	maxSnapshotBytes = 4 << 20
	maxSnapshotItems = 1 << 16
	// maxPeers bounds the replicas read per round.
	maxPeers = 1024
	// maxSharedAmount bounds one peer's count for one worker, as loadview
	// bounds a ticket: sums over every peer cannot overflow.
	maxSharedAmount = 1 << 40
)

// loadSnapshot is one replica's published load.
type loadSnapshot struct {
	At      time.Time
	Workers map[kvfleet.WorkerID]picker.Load
	Routed  uint64
	// HaveRouted: the snapshot carried routed (a replica of this version).
	HaveRouted bool
}

type snapshotWire struct {
	V       int                 `json:"v"`
	At      int64               `json:"at"`
	Routed  *uint64             `json:"routed,omitempty"`
	Workers [][]json.RawMessage `json:"workers"`
}

func encodeLoadSnapshot(at time.Time, routed uint64, loads map[kvfleet.WorkerID]picker.Load) ([]byte, error) {
	w := snapshotWire{V: sharedLoadVersion, At: at.UnixMilli(), Routed: &routed, Workers: make([][]json.RawMessage, 0, len(loads))}
	for id, l := range loads {
		if l.InflightRequests == 0 && l.PrefillTokens == 0 && l.DecodeBlocks == 0 {
			continue
		}
		name, _ := json.Marshal(id.String())
		w.Workers = append(w.Workers, []json.RawMessage{name,
			json.RawMessage(strconv.Itoa(l.InflightRequests)),
			json.RawMessage(strconv.FormatInt(l.PrefillTokens, 10)),
			json.RawMessage(strconv.FormatInt(l.DecodeBlocks, 10))})
	}
	return json.Marshal(w)
}

// decodeLoadSnapshot parses a peer's snapshot. Whatever is in Redis is
// input: sizes, counts and amounts are bounded and errors say where.
func decodeLoadSnapshot(b []byte) (loadSnapshot, error) {
	if len(b) > maxSnapshotBytes {
		return loadSnapshot{}, fmt.Errorf("load snapshot: %d bytes, more than %d", len(b), maxSnapshotBytes)
	}
	var w snapshotWire
	if err := json.Unmarshal(b, &w); err != nil {
		return loadSnapshot{}, fmt.Errorf("load snapshot: %w", err)
	}
	if w.V != sharedLoadVersion {
		return loadSnapshot{}, fmt.Errorf("load snapshot: version %d, want %d", w.V, sharedLoadVersion)
	}
	if w.At <= 0 {
		return loadSnapshot{}, fmt.Errorf("load snapshot: at %d is not a unix time in ms", w.At)
	}
	if len(w.Workers) > maxSnapshotItems {
		return loadSnapshot{}, fmt.Errorf("load snapshot: %d workers, more than %d", len(w.Workers), maxSnapshotItems)
	}
	out := loadSnapshot{At: time.UnixMilli(w.At), Workers: make(map[kvfleet.WorkerID]picker.Load, len(w.Workers))}
	if w.Routed != nil {
		out.Routed, out.HaveRouted = *w.Routed, true
	}
	for i, item := range w.Workers {
		if len(item) != 4 {
			return loadSnapshot{}, fmt.Errorf("load snapshot: workers[%d]: %d fields, want 4", i, len(item))
		}
		var name string
		if err := json.Unmarshal(item[0], &name); err != nil {
			return loadSnapshot{}, fmt.Errorf("load snapshot: workers[%d][0]: want a worker id string", i)
		}
		id, err := kvfleet.ParseWorkerID(name)
		if err != nil {
			return loadSnapshot{}, fmt.Errorf("load snapshot: workers[%d][0]: %w", i, err)
		}
		var n [3]int64
		for j := range n {
			v, err := strconv.ParseInt(string(item[j+1]), 10, 64)
			if err != nil || v < 0 || v > maxSharedAmount {
				return loadSnapshot{}, fmt.Errorf("load snapshot: workers[%d][%d]: %q is not an integer in [0, 2^40]", i, j+1, item[j+1])
			}
			n[j] = v
		}
		if _, dup := out.Workers[id]; dup {
			return loadSnapshot{}, fmt.Errorf("load snapshot: workers[%d]: %s listed twice", i, id)
		}
		out.Workers[id] = picker.Load{InflightRequests: int(n[0]), PrefillTokens: n[1], DecodeBlocks: n[2]}
	}
	return out, nil
}

// sharedLoad runs the publish/read loop of one replica.
type sharedLoad struct {
	client      redis.UniversalClient
	registryKey string
	keyPrefix   string
	replica     string
	interval    time.Duration
	ttl         time.Duration
	own         func() map[kvfleet.WorkerID]picker.Load
	routed      func() uint64 // requests this replica has routed; nil = none
	now         func() time.Time
	log         *slog.Logger

	peers    atomic.Pointer[loadview.PeerView]
	lastRead atomic.Int64 // unix ns of the last successful read

	// Owned by the publish/read loop (run, or a test calling round).
	history *loadview.OwnHistory
	shares  map[string]*loadview.ShareTracker // per peer replica

	staleness prometheus.Gauge
	peersSeen prometheus.Gauge
	shareSum  prometheus.Gauge
	errors    *prometheus.CounterVec
	rounds    prometheus.Counter
}

// defaultReplicaID is unique per process start: a restarted replica must
// not adopt the snapshot its predecessor left behind.
func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "extproc"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	clean := make([]byte, 0, len(id))
	for i := 0; i < len(id) && len(clean) < 128; i++ {
		c := id[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			clean = append(clean, c)
		}
	}
	return string(clean)
}

// maxOwnSamples bounds the own-load history kept for extrapolation.
const maxOwnSamples = 256

func newSharedLoad(client redis.UniversalClient, prefix string, cfg extprocconfig.SharedLoad, own func() map[kvfleet.WorkerID]picker.Load, routed func() uint64, log *slog.Logger) *sharedLoad {
	replica := cfg.ReplicaID
	if replica == "" {
		replica = defaultReplicaID()
	}
	// The history covers the oldest snapshot still counted (TTL), plus a
	// margin: a baseline is looked up at each peer's publish time.
	samples := min(maxOwnSamples, int(cfg.TTL.D()/max(cfg.Interval.D(), time.Millisecond))+2)
	s := &sharedLoad{
		client: client, registryKey: prefix + "load-replicas", keyPrefix: prefix + "load:", replica: replica,
		interval: cfg.Interval.D(), ttl: cfg.TTL.D(), own: own, routed: routed, now: time.Now, log: log,
		history: loadview.NewOwnHistory(samples), shares: map[string]*loadview.ShareTracker{},
		staleness: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvgate_extproc_shared_load_staleness_seconds",
			Help: "Age of the oldest peer replica snapshot the picker is using (publish to read)."}),
		peersSeen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvgate_extproc_shared_load_peers",
			Help: "Other extproc replicas whose load this replica adds to its own."}),
		shareSum: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvgate_extproc_shared_load_peer_share_ratio",
			Help: "Sum over live peers of their recent routed requests relative to this replica's: the factor this replica's own load change is extrapolated by between reads (about the number of peers when Envoy spreads evenly)."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_extproc_shared_load_errors_total",
			Help: "Shared-load failures by operation (publish, read, decode)."}, []string{"op"}),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvgate_extproc_shared_load_rounds_total",
			Help: "Publish-and-read rounds completed."}),
	}
	for _, op := range []string{"publish", "read", "decode"} {
		s.errors.WithLabelValues(op)
	}
	s.peers.Store(&loadview.PeerView{})
	return s
}

func (s *sharedLoad) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.staleness, s.peersSeen, s.shareSum, s.errors, s.rounds}
}

// peerEstimate is the other replicas' likely load on w now: their last
// publish, moved by this replica's own change on w since (own is this
// replica's load on w now), scaled by their share of the traffic.
func (s *sharedLoad) peerEstimate(w kvfleet.WorkerID, own picker.Load) picker.Load {
	if s == nil {
		return picker.Load{}
	}
	return s.peers.Load().Estimate(w, own)
}

func (s *sharedLoad) routedCount() uint64 {
	if s.routed == nil {
		return 0
	}
	return s.routed()
}

// run publishes and reads every interval until ctx ends, then withdraws
// this replica's snapshot so peers stop counting it at once.
func (s *sharedLoad) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.round(ctx)
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.Background(), time.Second)
			s.withdraw(wctx)
			cancel()
			return
		case <-t.C:
		}
	}
}

// round is one publish and one read, each bounded by the interval so a
// slow Redis delays nothing but the next round.
func (s *sharedLoad) round(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, max(s.interval, 100*time.Millisecond))
	defer cancel()
	if err := s.publish(rctx); err != nil && ctx.Err() == nil {
		s.errors.WithLabelValues("publish").Inc()
		s.log.Debug("shared load publish failed", "err", err)
	}
	if err := s.read(rctx); err != nil && ctx.Err() == nil {
		s.errors.WithLabelValues("read").Inc()
		s.log.Debug("shared load read failed", "err", err)
	}
	s.rounds.Inc()
}

func (s *sharedLoad) publish(ctx context.Context) error {
	now := s.now()
	routed := s.routedCount()
	own := s.own()
	// Recorded whether or not the SET succeeds: the history is this
	// replica's own load over time, the baseline peers' snapshots are
	// extrapolated from.
	s.history.Add(loadview.OwnSample{At: now, Loads: own, Routed: routed})
	b, err := encodeLoadSnapshot(now, routed, own)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	// The key first: a reader that finds the registry field finds the key.
	pipe := s.client.Pipeline()
	pipe.Set(ctx, s.keyPrefix+s.replica, b, s.ttl)
	pipe.HSet(ctx, s.registryKey, s.replica, strconv.FormatInt(now.UnixMilli(), 10))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("publish %s: %w", s.keyPrefix+s.replica, err)
	}
	return nil
}

func (s *sharedLoad) withdraw(ctx context.Context) {
	pipe := s.client.Pipeline()
	pipe.Del(ctx, s.keyPrefix+s.replica)
	pipe.HDel(ctx, s.registryKey, s.replica)
	if _, err := pipe.Exec(ctx); err != nil {
		s.log.Warn("shared load: withdrawing this replica's snapshot failed; it expires on its TTL", "err", err)
	}
}

// read replaces the peers' view. On failure the previous view is kept
// until it is older than the TTL, then dropped: a partition must not pin
// phantom load for longer than a dead replica's would last.
func (s *sharedLoad) read(ctx context.Context) error {
	err := s.readPeers(ctx)
	if err != nil {
		if cur := s.peers.Load(); cur.Replicas > 0 && s.now().Sub(time.Unix(0, s.lastRead.Load())) > s.ttl {
			s.peers.Store(&loadview.PeerView{})
			s.peersSeen.Set(0)
			s.shareSum.Set(0)
		}
	}
	return err
}

func (s *sharedLoad) readPeers(ctx context.Context) error {
	reg, err := s.client.HGetAll(ctx, s.registryKey).Result()
	if err != nil {
		return fmt.Errorf("read %s: %w", s.registryKey, err)
	}
	names := make([]string, 0, len(reg))
	for name := range reg {
		if name == s.replica {
			continue
		}
		if len(names) == maxPeers {
			s.errors.WithLabelValues("decode").Inc()
			break
		}
		names = append(names, name)
	}
	var snaps []loadview.PeerSnapshot
	now := s.now()
	ownRouted := s.routedCount()
	oldest := time.Duration(0)
	seen := make(map[string]bool, len(names))
	if len(names) > 0 {
		pipe := s.client.Pipeline()
		cmds := make([]*redis.StringCmd, len(names))
		for i, name := range names {
			cmds[i] = pipe.Get(ctx, s.keyPrefix+name)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("read peer snapshots: %w", err)
		}
		var gone []string
		for i, cmd := range cmds {
			b, err := cmd.Bytes()
			if errors.Is(err, redis.Nil) {
				gone = append(gone, names[i])
				continue
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", s.keyPrefix+names[i], err)
			}
			snap, err := decodeLoadSnapshot(b)
			if err != nil {
				s.errors.WithLabelValues("decode").Inc()
				s.log.Warn("shared load: ignoring a peer's snapshot", "replica", names[i], "err", err)
				continue
			}
			oldest = max(oldest, now.Sub(snap.At))
			share := 1.0 // a peer that does not say: assume Envoy's even spread
			if snap.HaveRouted {
				tr := s.shares[names[i]]
				if tr == nil {
					tr = &loadview.ShareTracker{}
					s.shares[names[i]] = tr
				}
				tr.Observe(snap.Routed, ownRouted, now)
				share = tr.Share()
				seen[names[i]] = true
			}
			snaps = append(snaps, loadview.PeerSnapshot{At: snap.At, Workers: snap.Workers, Share: share})
		}
		if len(gone) > 0 {
			// Their keys expired: those replicas stopped publishing.
			if err := s.client.HDel(ctx, s.registryKey, gone...).Err(); err != nil {
				s.log.Debug("shared load: pruning the replica registry", "err", err)
			}
		}
	}
	for name := range s.shares {
		if !seen[name] {
			delete(s.shares, name) // gone, or no longer says: start afresh if it returns
		}
	}
	next := loadview.NewPeerView(snaps, s.history)
	s.peers.Store(next)
	s.lastRead.Store(now.UnixNano())
	s.peersSeen.Set(float64(next.Replicas))
	shareSum := 0.0
	for _, p := range snaps {
		shareSum += p.Share
	}
	s.shareSum.Set(shareSum)
	s.staleness.Set(max(oldest, 0).Seconds())
	return nil
}
