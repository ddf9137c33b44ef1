// Package indexer is the `kvgate indexer` process: it subscribes to every
// configured engine's KV-event stream, decodes each batch, applies it to the
// fleet index and reports what it did on /metrics, /healthz, /readyz and
// /status.
//
// The event path is engine → kvstream (ordering, gap repair) → kvevents
// (decode) → ingest (hashes recomputed from token ids) → index.
package indexer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/indexer/index"
	"github.com/kvgate/kvgate/indexer/ingest"
	"github.com/kvgate/kvgate/indexer/kvevents"
	"github.com/kvgate/kvgate/indexer/kvstream"
)

// Service runs one subscription per engine data-parallel rank.
type Service struct {
	cfg     config.Config
	idx     index.Index
	log     *slog.Logger
	streams []*stream
	started atomic.Bool
}

// stream is one worker's event path: subscriber → decoder → ingest.
type stream struct {
	worker   index.WorkerID
	model    string
	endpoint string
	sub      *kvstream.Subscriber
	ing      *ingest.Worker
	// The subscriber calls the handler from one goroutine, in order, so
	// the decoder (which reuses scratch space) needs no lock.
	dec          *kvevents.Decoder
	decodeErrors atomic.Uint64
	lastBatchTS  atomic.Uint64 // float64 bits: the engine's timestamp of the last applied batch
}

// New builds the service. It does not start anything until Run.
func New(cfg config.Config, idx index.Index, log *slog.Logger) (*Service, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Service{cfg: cfg, idx: idx, log: log}
	for _, e := range cfg.Engines {
		m := cfg.Model(e.Model)
		if m == nil {
			return nil, fmt.Errorf("engine %s: unknown model %q", e.Endpoint, e.Model)
		}
		if e.Events == "" {
			continue // no KV events: the extproc routes it in approximate mode
		}
		for rank := 0; rank < e.DPRanks; rank++ {
			st, err := s.newStream(e, m, rank)
			if err != nil {
				return nil, fmt.Errorf("engine %s rank %d: %w", e.Endpoint, rank, err)
			}
			s.streams = append(s.streams, st)
		}
	}
	return s, nil
}

func (s *Service) newStream(e config.Engine, m *config.Model, rank int) (*stream, error) {
	events, _, err := config.ZMQEndpoint(e.Events, rank)
	if err != nil {
		return nil, err
	}
	replay := ""
	if e.Replay != "" {
		if replay, _, err = config.ZMQEndpoint(e.Replay, rank); err != nil {
			return nil, err
		}
	}
	w := index.WorkerID{Endpoint: e.Endpoint, DPRank: rank}
	st := &stream{
		worker:   w,
		model:    m.Name,
		endpoint: events,
		ing:      ingest.NewWorker(w, s.idx, ingest.Config{BlockSize: m.BlockSize, Namespace: m.Namespace}),
		dec:      kvevents.NewDecoder(kvevents.DefaultLimits()),
	}
	st.sub, err = kvstream.NewSubscriber(kvstream.Config{
		Endpoint:       events,
		ReplayEndpoint: replay,
		Topic:          e.Topic,
		ReplayTimeout:  s.cfg.Indexer.ReplayTimeout.D(),
		DeadAfter:      s.cfg.Indexer.EngineDeadAfter.D(),
		Logger:         s.log.With("worker", w.String()),
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
	if err := st.ing.Apply(ctx, b); err != nil {
		if errors.Is(err, ingest.ErrNeedsReset) {
			return st.resetAfter(ctx, fmt.Errorf("batch %d: %w", seq, err))
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

// Reset drops what the index holds for the worker: its stream lost events
// that could not be replayed, or the engine restarted.
func (st *stream) Reset(ctx context.Context, reason string) error {
	return st.ing.Reset(ctx)
}

// Run starts every subscription and blocks until ctx is cancelled.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, st := range s.streams {
		wg.Add(1)
		go func(st *stream) {
			defer wg.Done()
			if err := st.sub.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				s.log.Error("subscription ended", "worker", st.worker.String(), "err", err)
			}
		}(st)
	}
	s.started.Store(true)
	s.log.Info("indexer running", "streams", len(s.streams), "backend", s.cfg.Index.Backend)
	<-ctx.Done()
	wg.Wait()
	return nil
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
