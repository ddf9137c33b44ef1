// Package residency publishes the kvagent's tier residency as vLLM KV
// events (kv/kvevents, shared/notes/wire-formats.md §2) over
// kv/kvstream's ZMQ PUB socket with a replay ROUTER, so that
// `kvgate indexer` credits the node's host and disk tiers to its engine
// (config engines[].tier_events): medium "CPU" for the host arena, "DISK"
// for the disk tier.
//
// The store reports changes synchronously on its offload path; Publisher
// queues them and a goroutine turns them into batches, so the engine's
// Commit never waits on a subscriber's socket. Changes are never dropped:
// a dropped BlockRemoved would leave the index stale without a gap any
// subscriber could see. When the queue is full the store's caller waits.
package residency

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvstream"
	"github.com/kvgate/kvgate/kvagent/store"
)

// Medium names, as Dynamo's StorageTier::from_kv_medium reads them.
const (
	MediumHost = "CPU"
	MediumDisk = "DISK"
)

// MediumOf is the KV-event medium of a store tier.
func MediumOf(t store.Tier) (string, error) {
	switch t {
	case store.TierHost:
		return MediumHost, nil
	case store.TierDisk:
		return MediumDisk, nil
	}
	return "", fmt.Errorf("residency: tier %d has no KV medium", t)
}

// Config configures a Publisher.
type Config struct {
	// Endpoint (tcp://host:port) and ReplayEndpoint (optional) are bound.
	Endpoint       string
	ReplayEndpoint string
	// Encoding of the batches (default array, as vLLM before the map form).
	Encoding kvevents.Encoding
	// Queue bounds changes waiting to be published (default 4096).
	Queue int
	// MaxBatchEvents bounds the events coalesced into one batch (default 512).
	MaxBatchEvents int
	Logger         *slog.Logger
	// Registerer, when set, exports the publisher's counters
	// (kvgate_kvagent_residency_*, metrics.go); Close unregisters them.
	Registerer prometheus.Registerer
}

// Publisher turns store changes into published KV-event batches.
type Publisher struct {
	cfg  Config
	pub  *kvstream.Publisher
	log  *slog.Logger
	q    chan store.Change
	done chan struct{}

	closeOnce sync.Once
	mu        sync.RWMutex // held (read) while enqueueing; Close takes it to stop enqueues
	closed    bool

	batches, events, failures atomic.Uint64
	collector                 *collector // nil without Config.Registerer
}

// New binds the sockets and starts publishing.
func New(cfg Config) (*Publisher, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("residency: no events endpoint")
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 4096
	}
	if cfg.MaxBatchEvents <= 0 {
		cfg.MaxBatchEvents = 512
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	pub, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: cfg.Endpoint, ReplayEndpoint: cfg.ReplayEndpoint, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("residency: %w", err)
	}
	p := &Publisher{cfg: cfg, pub: pub, log: cfg.Logger, q: make(chan store.Change, cfg.Queue), done: make(chan struct{})}
	if cfg.Registerer != nil {
		p.collector = newCollector(p)
		if err := cfg.Registerer.Register(p.collector); err != nil {
			_ = pub.Close()
			return nil, fmt.Errorf("residency: metrics: %w", err)
		}
	}
	go p.run()
	return p, nil
}

// Endpoint is the bound PUB address as tcp://host:port (port 0 resolved).
func (p *Publisher) Endpoint() string { return "tcp://" + p.pub.Addr().String() }

// ReplayEndpoint is the bound replay address, "" without one.
func (p *Publisher) ReplayEndpoint() string {
	if a := p.pub.ReplayAddr(); a != nil {
		return "tcp://" + a.String()
	}
	return ""
}

// OnChange is the store's Config.OnChange. It copies nothing the store may
// reuse: the store hands over fresh slices (contract: called in order).
func (p *Publisher) OnChange(c store.Change) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return
	}
	p.q <- c
}

// Stats: batches and events published, failed publishes (the
// kvgate_kvagent_residency_* counters).
func (p *Publisher) Stats() (batches, events, failures uint64) {
	return p.batches.Load(), p.events.Load(), p.failures.Load()
}

// Close publishes what is queued, then closes the sockets.
func (p *Publisher) Close() error {
	var err error
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		close(p.q)
		p.mu.Unlock()
		<-p.done
		err = p.pub.Close()
		if p.collector != nil {
			p.cfg.Registerer.Unregister(p.collector)
		}
	})
	return err
}

func (p *Publisher) run() {
	defer close(p.done)
	var pending []store.Change
	for c := range p.q {
		pending = append(pending[:0], c)
		// Coalesce what is already queued into one batch.
	drain:
		for n := countEvents(c); n < p.cfg.MaxBatchEvents; {
			select {
			case c, ok := <-p.q:
				if !ok {
					break drain
				}
				pending = append(pending, c)
				n += countEvents(c)
			default:
				break drain
			}
		}
		p.publish(pending)
	}
}

func countEvents(c store.Change) int { return max(1, len(c.Hashes)) }

func (p *Publisher) publish(cs []store.Change) {
	evs, err := Events(cs)
	if err != nil {
		// A change the store should never produce; the batch is still
		// published without it, and the error is loud.
		p.log.Error("residency: change not publishable", "err", err)
	}
	if len(evs) == 0 {
		return
	}
	payload, err := kvevents.Encode(kvevents.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: evs}, p.cfg.Encoding)
	if err == nil {
		_, err = p.pub.Publish(payload)
	}
	if err != nil {
		p.failures.Add(1)
		p.log.Warn("residency: publishing KV events", "err", err)
		return
	}
	p.batches.Add(1)
	p.events.Add(uint64(len(evs)))
}
