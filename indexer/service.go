// Package indexer is the `kvgate indexer` process: it subscribes to every
// configured engine's KV-event stream, decodes each batch, applies it to the
// fleet index and reports what it did on /metrics, /healthz, /readyz and
// /status.
//
// The event path is engine → kvstream (ordering, gap repair) → kvevents
// (decode) → ingest (hashes recomputed from token ids) → kvindex.
package indexer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/indexer/indexerconfig"
	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/kv/indexconfig"
	"github.com/kvgate/kvgate/kv/ingest"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/kv/kvstream"
)

// Service runs one subscription per worker (engine data-parallel rank)
// that publishes KV events. The set may change at run time (SetWorkers,
// fed by discovery).
type Service struct {
	cfg     ServiceConfig
	idx     kvindex.Index
	log     *slog.Logger
	started atomic.Bool

	mu      sync.Mutex
	streams []*stream // in the order they were added
	runCtx  context.Context
	wg      sync.WaitGroup

	// wipes counts the times the index was found to have lost its data
	// (kvindex.Generationer) and every worker was resynced.
	wipes atomic.Uint64

	// listeners are bind mode's bound sockets, one per data-parallel rank
	// (indexer.events_bind port + rank), made when a stream first needs
	// one and closed when Run returns. Guarded by mu.
	listeners map[int]*kvstream.Listener
}

// generationCheck is how often a Generationer index (Redis) is asked
// whether it lost its data: the bound on how long an idle engine's blocks
// stay missing after a FLUSHALL, plus one tail poll for the replay.
const generationCheck = time.Second

// stream is one worker's event path: subscriber → decoder → ingest.
type stream struct {
	worker   kvfleet.WorkerID
	label    string // worker in metrics and /status; "/kvagent" appended for a tier stream
	model    string
	endpoint string
	sub      *kvstream.Subscriber
	ing      *ingest.Worker
	// The subscriber calls the handler from one goroutine, in order, so
	// the decoder (which reuses scratch space) needs no lock.
	dec          *kvevents.Decoder
	decodeErrors atomic.Uint64
	// resyncPending: an index error dropped the worker's entries; they are
	// rebuilt by a whole-buffer replay once the index answers. Owned by
	// the subscriber's goroutine, like dec.
	resyncPending bool
	lastResyncTry time.Time
	// indexWiped is set by the generation watcher (another goroutine):
	// the index lost everything, this worker's entries included.
	indexWiped  atomic.Bool
	lastBatchTS atomic.Uint64 // float64 bits: the engine's timestamp of the last applied batch
	// key identifies the subscription's configuration: a worker whose
	// endpoints change is a new stream.
	key    string
	cancel context.CancelFunc // stops this stream's subscriber (nil until started)
	done   chan struct{}
}

// ServiceConfig is what the indexer reads of the configuration file: the
// index and indexer sections, the models (block size, LoRA names), and the
// workers the engines: list expands to. The caller composes it
// (config.Config.Workers expands the list), so the indexer does not
// depend on the whole file (issue 18).
type ServiceConfig struct {
	Index   indexconfig.Index
	Indexer indexerconfig.Config
	Models  []kvfleet.Model
	// Workers is the worker set at start (SetWorkers replaces it).
	Workers []kvfleet.Worker
}

// New builds the service. It does not start anything until Run.
func New(cfg ServiceConfig, idx kvindex.Index, log *slog.Logger) (*Service, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Service{cfg: cfg, idx: idx, log: log}
	streams, err := s.buildStreams(cfg.Workers)
	if err != nil {
		return nil, err
	}
	s.streams = streams
	return s, nil
}

// buildStreams makes one (unstarted) stream per worker that publishes KV
// events, and one per worker with a kvagent residency stream.
func (s *Service) buildStreams(workers []kvfleet.Worker) ([]*stream, error) {
	var out []*stream
	for _, w := range workers {
		m := kvfleet.FindModel(s.cfg.Models, w.Model)
		if m == nil {
			return nil, fmt.Errorf("engine %s: unknown model %q", w.ID.Endpoint, w.Model)
		}
		var gpu *stream
		if w.Events != "" {
			st, err := s.newStream(w, m)
			if err != nil {
				return nil, fmt.Errorf("engine %s rank %d: %w", w.ID.Endpoint, w.ID.DPRank, err)
			}
			out = append(out, st)
			gpu = st
		}
		// No KV events at all: the extproc routes it in approximate mode.
		if w.TierEvents != "" {
			st, err := s.newTierStream(w, m, gpu)
			if err != nil {
				return nil, fmt.Errorf("engine %s rank %d tier events: %w", w.ID.Endpoint, w.ID.DPRank, err)
			}
			out = append(out, st)
		}
	}
	return out, nil
}

// SetWorkers replaces the subscribed workers (discovery calls it on every
// change): new ones are subscribed, unchanged ones keep their stream, and
// the entries of workers that left are removed from the kvindex.
func (s *Service) SetWorkers(ctx context.Context, workers []kvfleet.Worker) error {
	next, err := s.buildStreams(workers)
	if err != nil {
		return err
	}
	s.mu.Lock()
	old := map[string]*stream{}
	for _, st := range s.streams {
		old[st.key] = st
	}
	var keep []*stream
	for _, st := range next {
		if cur, ok := old[st.key]; ok {
			keep = append(keep, cur)
			delete(old, st.key)
			continue
		}
		keep = append(keep, st)
		s.startLocked(st)
	}
	s.streams = keep
	s.mu.Unlock()
	for _, st := range old {
		if st.cancel != nil {
			st.cancel()
			<-st.done
		}
		if err := s.idx.RemoveWorker(ctx, st.worker); err != nil {
			s.log.Warn("removing a departed worker from the index", "worker", st.worker.String(), "err", err)
		}
	}
	return nil
}

// startLocked runs st's subscriber if the service runs; s.mu is held.
func (s *Service) startLocked(st *stream) {
	if s.runCtx == nil || s.runCtx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(s.runCtx)
	st.cancel, st.done = cancel, make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(st.done)
		if err := st.sub.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Error("subscription ended", "worker", st.worker.String(), "err", err)
		}
	}()
}

// snapshot returns the current streams.
func (s *Service) snapshot() []*stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*stream(nil), s.streams...)
}

func (s *Service) newStream(w kvfleet.Worker, m *kvfleet.Model) (*stream, error) {
	events := w.Events
	var listener *kvstream.Listener
	var publishers []netip.Prefix
	if w.Events == kvfleet.EventsBindMode {
		// The engine's batches must come from the engine: its endpoint's
		// address, which is where its PUB connects from in a pod or on a
		// host without NAT (kvstream.Listener binds the topic to it).
		ap, err := netip.ParseAddrPort(w.ID.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("worker %s: bind mode needs the engine's address: %w", w.ID, err)
		}
		publishers = []netip.Prefix{netip.PrefixFrom(ap.Addr().Unmap(), ap.Addr().Unmap().BitLen())}
		if listener, err = s.listener(w.ID.DPRank); err != nil {
			return nil, err
		}
		events = "bind:" + listener.Addr().String() + "/" + w.Topic
	}
	// With a kvagent stream beside it, each stream's reset must remove only
	// its own entries (ingest.Config.ScopedClear).
	ing := ingest.NewWorker(w.ID, s.idx, ingest.Config{BlockSize: m.BlockSize, Namespace: m.Namespace, ScopedClear: w.TierEvents != ""})
	st, err := s.subscribe(w.ID, m, ing, strings.Join([]string{w.ID.String(), m.Name, w.Kind, events, w.Replay, w.Topic, w.TierEvents}, "|"), events, listener, publishers, w.Replay, w.Topic, "")
	if err != nil {
		return nil, err
	}
	// The engine kind picks its events' wire format (TensorRT-LLM's own
	// list or vLLM's EventBatch); the kvagent's tier stream is always the latter.
	format, err := kvevents.FormatOf(w.Kind)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", w.ID, err)
	}
	st.dec = kvevents.NewFormatDecoder(format, kvevents.DefaultLimits())
	return st, nil
}

// listener returns the bound socket of bind mode for a data-parallel rank,
// binding it on first use: vLLM's connecting publisher of rank r dials the
// configured port plus r (ZmqEventPublisher.offset_endpoint_port).
func (s *Service) listener(rank int) (*kvstream.Listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.listeners[rank]; l != nil {
		return l, nil
	}
	ep, _, err := confaddr.ZMQEndpoint(s.cfg.Indexer.EventsBind, rank)
	if err != nil {
		return nil, fmt.Errorf("indexer.events_bind rank %d: %w", rank, err)
	}
	allow, err := s.cfg.Indexer.EventsBindAllowPrefixes()
	if err != nil {
		return nil, err
	}
	l, err := kvstream.NewListener(kvstream.ListenerConfig{Endpoint: ep, Allow: allow, Logger: s.log})
	if err != nil {
		return nil, err
	}
	if s.listeners == nil {
		s.listeners = map[int]*kvstream.Listener{}
	}
	s.listeners[rank] = l
	return l, nil
}

// listenerStats sums bind mode's sockets' counters; false when there is
// none.
func (s *Service) listenerStats() (kvstream.ListenerStats, bool) {
	s.mu.Lock()
	ls := make([]*kvstream.Listener, 0, len(s.listeners))
	for _, l := range s.listeners {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	var sum kvstream.ListenerStats
	for _, l := range ls {
		st := l.Stats()
		sum.Messages += st.Messages
		sum.UnknownTopic += st.UnknownTopic
		sum.QueueFull += st.QueueFull
		sum.Malformed += st.Malformed
		sum.RejectedPeers += st.RejectedPeers
		sum.ForeignTopic += st.ForeignTopic
		sum.AttachedTopics += st.AttachedTopics
	}
	return sum, len(ls) > 0
}

// closeListeners closes bind mode's sockets (Run's end).
func (s *Service) closeListeners() {
	s.mu.Lock()
	ls := s.listeners
	s.listeners = nil
	s.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
}

// tierStreamSuffix marks a kvagent stream in metrics and /status: the
// worker label reads "ip:port#rank/kvagent", so the engine's and the
// kvagent's series of one worker stay distinct without a new label.
const tierStreamSuffix = "/kvagent"

// newTierStream subscribes to the kvagent residency stream credited to
// worker w: host and disk tiers only, resets scoped to what that
// stream stored, parents resolved through the engine stream (gpu, may be
// nil) when the kvagent does not hold them.
func (s *Service) newTierStream(w kvfleet.Worker, m *kvfleet.Model, gpu *stream) (*stream, error) {
	icfg := ingest.Config{
		BlockSize:   m.BlockSize,
		Namespace:   m.Namespace,
		Tiers:       1<<kvfleet.TierHost | 1<<kvfleet.TierDisk,
		ScopedClear: true,
	}
	if gpu != nil {
		icfg.ParentSeq = gpu.ing.SeqOf
	}
	key := strings.Join([]string{w.ID.String() + tierStreamSuffix, m.Name, w.TierEvents, w.TierReplay, w.Events}, "|")
	return s.subscribe(w.ID, m, ingest.NewWorker(w.ID, s.idx, icfg), key, w.TierEvents, nil, nil, w.TierReplay, "", tierStreamSuffix)
}

// subscribe makes the stream's subscriber: dialing events, or attached to
// listener (bind mode, events is then only a label) for the batches
// publishers send.
func (s *Service) subscribe(w kvfleet.WorkerID, m *kvfleet.Model, ing *ingest.Worker, key, events string, listener *kvstream.Listener, publishers []netip.Prefix, replay, topic, suffix string) (*stream, error) {
	st := &stream{
		key:      key,
		worker:   w,
		label:    w.String() + suffix,
		model:    m.Name,
		endpoint: events,
		ing:      ing,
		dec:      kvevents.NewDecoder(kvevents.DefaultLimits()),
	}
	var err error
	dial := events
	if listener != nil {
		dial = ""
	}
	st.sub, err = kvstream.NewSubscriber(kvstream.Config{
		Endpoint:       dial,
		Listener:       listener,
		Publishers:     publishers,
		ReplayEndpoint: replay,
		Topic:          topic,
		ReplayTimeout:  s.cfg.Indexer.ReplayTimeout.D(),
		DeadAfter:      s.cfg.Indexer.EngineDeadAfter.D(),
		Logger:         s.log.With("worker", st.label),
	}, st)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// HandleBatch decodes and applies one batch. A batch that does not
// decode may have carried removals, so the worker's entries are reset and
// rebuilt from the events that follow: the index may miss a credit for a
// while but is never stale. An index error likewise leaves the worker's
// state unknown and resets it.
func (st *stream) HandleBatch(ctx context.Context, seq uint64, payload []byte) error {
	b, err := st.dec.Decode(payload)
	if err != nil {
		st.decodeErrors.Add(1)
		return st.resetAfter(ctx, fmt.Errorf("batch %d: %w", seq, err))
	}
	if st.resyncPending {
		return fmt.Errorf("batch %d: dropped while the index is failing; the worker is rebuilt from the engine's replay buffer once it answers", seq)
	}
	if err := st.ing.Apply(ctx, b); err != nil {
		if errors.Is(err, ingest.ErrNeedsReset) {
			// The index failed mid-batch (a Redis failover, say): the
			// worker's entries are dropped and, once the index answers
			// again, rebuilt from the engine's whole replay buffer
			// (NeedsResync), not only from events yet to come, which
			// would leave the blocks cached before the failure uncredited.
			st.resyncPending = true
			return fmt.Errorf("batch %d: %w", seq, err)
		}
		return fmt.Errorf("batch %d: %w", seq, err)
	}
	st.lastBatchTS.Store(math.Float64bits(b.TS))
	return nil
}

func (st *stream) resetAfter(ctx context.Context, cause error) error {
	if err := st.ing.Reset(ctx); err != nil {
		return errors.Join(cause, fmt.Errorf("reset: %w", err))
	}
	return cause
}

// resyncRetry spaces the index probes of a worker waiting for a resync,
// so a failing index costs one command per interval, not one per batch.
const resyncRetry = 500 * time.Millisecond

// NeedsResync implements kvstream.Resyncer: after an index error it resets
// the worker (which succeeds only once the index answers again) and then
// asks the subscriber to replay the engine's buffer from its start.
func (st *stream) NeedsResync(ctx context.Context) bool {
	if st.indexWiped.Swap(false) {
		// Nothing this worker stored is left: rebuild it from the engine's
		// replay buffer now, even if the engine is idle.
		st.resyncPending, st.lastResyncTry = true, time.Time{}
	}
	if !st.resyncPending || time.Since(st.lastResyncTry) < resyncRetry {
		return false
	}
	st.lastResyncTry = time.Now()
	if err := st.ing.Reset(ctx); err != nil {
		return false
	}
	st.resyncPending = false
	return true
}

// Reset drops what the index holds for the worker: its stream lost events
// that could not be replayed, or the engine restarted.
func (st *stream) Reset(ctx context.Context, reason string) error {
	return st.ing.Reset(ctx)
}

// Run starts every subscription and blocks until ctx is cancelled.
func (s *Service) Run(ctx context.Context) error {
	// The index's generation is read before any stream writes, so a wipe
	// at any time after (even within the first watch interval) is seen.
	gen, hasGen := s.idx.(kvindex.Generationer)
	first := ""
	if hasGen {
		cctx, cancel := context.WithTimeout(ctx, generationCheck)
		first, _ = gen.Generation(cctx)
		cancel()
	}
	s.mu.Lock()
	s.runCtx = ctx
	for _, st := range s.streams {
		s.startLocked(st)
	}
	n := len(s.streams)
	s.mu.Unlock()
	s.started.Store(true)
	s.log.Info("indexer running", "streams", n, "backend", s.cfg.Index.Backend)
	if hasGen {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.watchGeneration(ctx, gen, first)
		}()
	}
	<-ctx.Done()
	s.wg.Wait()
	s.closeListeners()
	return nil
}

// watchGeneration notices an index that lost its data outside kvgate (Redis
// FLUSHALL, a restart without persistence) and has every worker rebuilt
// from its engine's replay buffer. Without it, an idle engine's blocks
// would stay missing (its stream sends nothing that could notice) while
// the worker's gauges still counted them.
func (s *Service) watchGeneration(ctx context.Context, g kvindex.Generationer, last string) {
	t := time.NewTicker(generationCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, generationCheck)
		tok, err := g.Generation(cctx)
		cancel()
		if err != nil {
			continue // the index is down; the next answer tells
		}
		if last != "" && tok != last {
			s.wipes.Add(1)
			streams := s.snapshot()
			s.log.Warn("the index lost its data; resyncing every worker from its engine's replay buffer", "workers", len(streams))
			for _, st := range streams {
				st.indexWiped.Store(true)
			}
		}
		last = tok
	}
}

// Ready reports whether the service has started its subscriptions and the
// index answers. A subscription still connecting does not make the indexer
// unready: engines come and go, and the index stays useful for the others.
func (s *Service) Ready(ctx context.Context) error {
	if !s.started.Load() {
		return errors.New("subscriptions not started")
	}
	if _, err := s.idx.Stats(ctx); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	return nil
}
