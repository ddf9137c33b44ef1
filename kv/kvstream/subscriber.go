package kvstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zeebo/xxh3"
)

// Handler receives one engine's batches, in sequence order, each at most
// once.
type Handler interface {
	// HandleBatch applies one batch. An error is counted and logged; the
	// stream goes on (the batch is not retried). payload is not reused by
	// the Subscriber; the Handler may keep it.
	HandleBatch(ctx context.Context, seq uint64, payload []byte) error
	// Reset means everything known about this engine may be wrong: drop
	// it. Called when a gap cannot be repaired or the publisher restarted,
	// before the next batch is delivered.
	Reset(ctx context.Context, reason string) error
}

// Resyncer is an optional Handler interface for handlers that can lose
// state outside the stream (the index backend failed a write and the
// worker's entries had to be dropped). The Subscriber asks NeedsResync
// before each live message and each tail poll; when it answers true, the
// Subscriber forgets its sequence state and replays the publisher's whole
// buffer, so blocks the engine cached before the failure are credited
// again instead of staying missing until the engine stores them anew.
type Resyncer interface {
	NeedsResync(ctx context.Context) bool
}

// Config configures a Subscriber. Zero values take the defaults named.
type Config struct {
	// Endpoint is the engine's PUB socket, tcp://host:port or ipc://path
	// (vLLM --kv-events-config endpoint, default port 5557, offset by the
	// data-parallel rank). Empty with Listener set.
	Endpoint string
	// Listener, instead of Endpoint: bind mode, the engine's PUB connects
	// to this bound socket and its messages are the ones whose topic frame
	// equals Topic exactly (which must then be non-empty and unique on the
	// Listener). DeadAfter does not apply: nothing is dialed.
	Listener *Listener
	// Publishers, with Listener: the networks this engine's PUB connects
	// from (its own address; the indexer takes the worker's endpoint IP).
	// A message under Topic from any other peer is refused and its
	// connection cut, so that no one else can write this engine's blocks
	// or wipe them with a sequence reset. Required in bind mode.
	Publishers []netip.Prefix
	// ReplayEndpoint is the engine's ROUTER replay socket; empty = none,
	// and every gap then costs a Reset.
	ReplayEndpoint string
	// Topic is the subscription prefix; vLLM publishes topic "" by default.
	Topic string
	// ReplayTimeout bounds connecting to the replay endpoint and each wait
	// for its next reply. Default 2s.
	ReplayTimeout time.Duration
	// MaxPayloadBytes bounds one batch payload. Default 8 MiB.
	MaxPayloadBytes int
	// MaxReplayBatches bounds the replies read for one replay request
	// (vLLM buffer_steps defaults to 10,000). Default 100,000.
	MaxReplayBatches int
	// LiveBufferBatches and LiveBufferBytes bound the live messages queued
	// while a replay runs; beyond them the socket is not read, TCP pushes
	// back, and whatever the publisher drops shows up as the next gap.
	// Defaults 4096 batches, 64 MiB.
	LiveBufferBatches int
	LiveBufferBytes   int
	// ReconnectMin and ReconnectMax bound the exponential reconnect
	// backoff (with jitter). Defaults 100ms and 10s.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// DialTimeout bounds TCP connect plus the ZMTP handshake. Default 5s.
	DialTimeout time.Duration
	// TailPoll is how long the live stream may stay silent before the
	// subscriber asks the replay endpoint for anything after the last
	// delivered batch (and how soon after connecting it first asks).
	// A gap is otherwise only noticed when the next live batch arrives:
	// the batches published before the subscription reached the publisher
	// (ZMQ's slow joiner), or a lost final BlockRemoved of an engine that
	// then goes idle, would stay unknown — or stale — for as long as the
	// engine is quiet. Default 1s; negative disables. Needs ReplayEndpoint.
	TailPoll time.Duration
	// DeadAfter: when the engine's event socket has been unreachable this
	// long, the subscriber calls Handler.Reset once, so that a killed
	// engine's blocks leave the index instead of attracting requests; a
	// later reconnect starts from a clean slate. Default 10s; negative
	// disables.
	DeadAfter time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

const (
	defaultReplayTimeout     = 2 * time.Second
	defaultMaxPayloadBytes   = 8 << 20
	defaultMaxReplayBatches  = 100_000
	defaultLiveBufferBatches = 4096
	defaultLiveBufferBytes   = 64 << 20
	defaultReconnectMin      = 100 * time.Millisecond
	defaultReconnectMax      = 10 * time.Second
	defaultDialTimeout       = 5 * time.Second
	defaultTailPoll          = time.Second
	defaultDeadAfter         = 10 * time.Second
	// firstTailPoll gives a fresh subscription time to reach the publisher
	// before the first catch-up, so that little is published in between.
	firstTailPoll = 100 * time.Millisecond
)

func (c Config) withDefaults() (Config, error) {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"ReplayTimeout", int64(c.ReplayTimeout)},
		{"MaxPayloadBytes", int64(c.MaxPayloadBytes)},
		{"MaxReplayBatches", int64(c.MaxReplayBatches)},
		{"LiveBufferBatches", int64(c.LiveBufferBatches)},
		{"LiveBufferBytes", int64(c.LiveBufferBytes)},
		{"ReconnectMin", int64(c.ReconnectMin)},
		{"ReconnectMax", int64(c.ReconnectMax)},
		{"DialTimeout", int64(c.DialTimeout)},
	} {
		if f.v < 0 {
			return c, fmt.Errorf("kvstream config: %s is negative (%d)", f.name, f.v)
		}
	}
	setDefault(&c.ReplayTimeout, defaultReplayTimeout)
	setDefault(&c.MaxPayloadBytes, defaultMaxPayloadBytes)
	setDefault(&c.MaxReplayBatches, defaultMaxReplayBatches)
	setDefault(&c.LiveBufferBatches, defaultLiveBufferBatches)
	setDefault(&c.LiveBufferBytes, defaultLiveBufferBytes)
	setDefault(&c.ReconnectMin, defaultReconnectMin)
	setDefault(&c.ReconnectMax, defaultReconnectMax)
	setDefault(&c.DialTimeout, defaultDialTimeout)
	setDefault(&c.TailPoll, defaultTailPoll)
	setDefault(&c.DeadAfter, defaultDeadAfter)
	if c.ReconnectMax < c.ReconnectMin {
		return c, fmt.Errorf("kvstream config: ReconnectMax %v is below ReconnectMin %v", c.ReconnectMax, c.ReconnectMin)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Subscriber follows one engine's KV-event stream. Create it with
// NewSubscriber, then call Run.
type Subscriber struct {
	cfg        Config
	handler    Handler
	log        *slog.Logger
	dialEP     string // Endpoint rewritten to the guarded transport
	dialReplay string // ReplayEndpoint rewritten; empty = none
	limits     guardLimits
	c          counters
	running    atomic.Bool

	// Sequence state, owned by the Run goroutine.
	haveLast bool
	last     uint64
	// lastHash fingerprints the last delivered payload, so a batch that
	// reappears under the same seq (live duplicate, or the first reply of a
	// replay, which starts at last) proves it comes from the same publisher.
	lastHash uint64
	// delivered fingerprints recently delivered batches by seq (slot
	// seq % len). A tail poll can deliver batches whose live copies are
	// still queued behind it (a starved reader goroutine); when those
	// copies arrive they are duplicates, not evidence of a restart.
	delivered []deliveredBatch
}

// maybeResync replays the publisher's buffer from its start when the
// Handler asks for it (Resyncer). Without a replay endpoint the next live
// message simply starts a new stream.
func (s *Subscriber) maybeResync(ctx context.Context) {
	rs, ok := s.handler.(Resyncer)
	if !ok || !rs.NeedsResync(ctx) {
		return
	}
	s.c.resyncs.Add(1)
	s.log.Info("kv event stream resync: replaying the publisher's buffer from its start")
	s.forgetStream()
	if s.dialReplay != "" {
		s.pollTail(ctx)
	}
}

// forgetStream drops the sequence state: the next message starts a new
// stream (publisher restart, or an engine gone past DeadAfter).
func (s *Subscriber) forgetStream() {
	s.haveLast = false
	s.c.haveLastSeq.Store(false)
	clear(s.delivered)
}

type deliveredBatch struct {
	seq, hash uint64
	ok        bool
}

// deliveredWindow covers the live messages that can be queued behind a
// replay: the live queue (LiveBufferBatches) plus the socket's own buffer.
func deliveredWindow(cfg Config) int { return cfg.LiveBufferBatches + 4096 }

// alreadyDelivered reports whether seq was delivered with this payload
// (known: false when seq is too old to be remembered).
func (s *Subscriber) alreadyDelivered(seq uint64, payload []byte) (known, same bool) {
	d := s.delivered[seq%uint64(len(s.delivered))]
	if !d.ok || d.seq != seq {
		return false, false
	}
	return true, d.hash == xxh3.Hash(payload)
}

// NewSubscriber validates cfg and returns a Subscriber delivering to h.
func NewSubscriber(cfg Config, h Handler) (*Subscriber, error) {
	if h == nil {
		return nil, errors.New("kvstream: nil Handler")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := registerGuardedTransports(); err != nil {
		return nil, fmt.Errorf("kvstream: %w", err)
	}
	s := &Subscriber{cfg: cfg, handler: h, delivered: make([]deliveredBatch, deliveredWindow(cfg))}
	switch {
	case cfg.Listener != nil:
		if cfg.Endpoint != "" {
			return nil, errors.New("kvstream config: Endpoint and Listener are exclusive")
		}
		if cfg.Topic == "" {
			return nil, errors.New("kvstream config: bind mode (Listener) needs the engine's Topic")
		}
		if len(cfg.Publishers) == 0 {
			return nil, errors.New("kvstream config: bind mode (Listener) needs the networks the engine publishes from (Publishers)")
		}
	default:
		if s.dialEP, err = guardedEndpoint(cfg.Endpoint); err != nil {
			return nil, fmt.Errorf("kvstream config Endpoint: %w", err)
		}
	}
	if cfg.ReplayEndpoint != "" {
		if s.dialReplay, err = guardedEndpoint(cfg.ReplayEndpoint); err != nil {
			return nil, fmt.Errorf("kvstream config ReplayEndpoint: %w", err)
		}
	}
	if cfg.Listener != nil {
		s.log = cfg.Logger.With("topic", cfg.Topic)
	} else {
		s.log = cfg.Logger.With("endpoint", cfg.Endpoint)
	}
	s.limits = guardLimits{
		maxFrameBytes:    uint64(max(cfg.MaxPayloadBytes, minGuardFrameBytes)),
		handshakeTimeout: cfg.DialTimeout,
		maxFramesPerMsg:  maxGuardFramesPerMessage,
		onViolation: func(err error) {
			s.malformed(fmt.Errorf("connection cut: %w", err))
		},
	}
	return s, nil
}

// Stats returns a snapshot of the counters; safe to call concurrently
// with Run.
func (s *Subscriber) Stats() Stats { return s.c.snapshot() }

// Run connects, delivers batches to the Handler and reconnects with
// backoff whenever the connection drops, until ctx is cancelled. It
// returns nil once ctx is cancelled and every goroutine it started has
// stopped. The sequence state survives reconnects, so a reconnect to the
// same publisher is repaired like any other gap. Run must not be called
// twice at once.
func (s *Subscriber) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("kvstream: Subscriber.Run is already running")
	}
	defer s.running.Store(false)
	if s.cfg.Listener != nil {
		return s.runAttached(ctx)
	}

	backoff := s.cfg.ReconnectMin
	downSince := time.Now()
	for ctx.Err() == nil {
		gotMessage, err := s.runConnection(ctx)
		if ctx.Err() != nil {
			break
		}
		if s.c.connectedOnce.Swap(false) {
			downSince = time.Now()
		}
		if s.cfg.DeadAfter > 0 && s.haveLast && time.Since(downSince) >= s.cfg.DeadAfter {
			s.c.deadResets.Add(1)
			s.reset(ctx, fmt.Sprintf("engine event socket unreachable for %s", time.Since(downSince).Round(time.Second)))
			s.forgetStream()
		}
		if gotMessage {
			backoff = s.cfg.ReconnectMin
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		s.log.Warn("kv event stream disconnected; reconnecting", "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		backoff = min(backoff*2, s.cfg.ReconnectMax)
	}
	return nil
}

// received is one result of the live reader goroutine.
type received struct {
	frames [][]byte
	err    error
	bytes  int
}

// liveQueue bounds, in bytes, what the reader goroutine may queue ahead of
// the Run goroutine (the channel capacity bounds the count).
type liveQueue struct {
	ch      chan received
	bytes   atomic.Int64
	drained chan struct{} // signalled when bytes go down
	limit   int64
}

// runConnection holds one SUB connection until it drops or ctx ends.
func (s *Subscriber) runConnection(ctx context.Context) (gotMessage bool, err error) {
	sctx, cancel := context.WithCancel(withGuardLimits(ctx, s.limits))
	defer cancel()
	sock := zmq4.NewSub(sctx, s.socketOptions()...)
	defer sock.Close()
	if err := sock.SetOption(zmq4.OptionSubscribe, s.cfg.Topic); err != nil {
		return false, fmt.Errorf("subscribe to topic %q: %w", s.cfg.Topic, err)
	}
	if err := sock.Dial(s.dialEP); err != nil {
		s.c.connectFailures.Add(1)
		return false, fmt.Errorf("dial %s: %w", s.cfg.Endpoint, err)
	}
	s.c.connects.Add(1)
	s.c.connectedOnce.Store(true)
	s.log.Info("kv event stream connected")

	q := s.newLiveQueue()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		readLive(sock, q, stop)
	}()
	defer func() {
		// stop first so a reader blocked on a full queue lets go, then
		// Close so one blocked in Recv returns.
		close(stop)
		sock.Close()
		wg.Wait()
	}()
	return s.serve(ctx, q)
}

func (s *Subscriber) newLiveQueue() *liveQueue {
	return &liveQueue{
		ch:      make(chan received, s.cfg.LiveBufferBatches),
		drained: make(chan struct{}, 1),
		limit:   int64(s.cfg.LiveBufferBytes),
	}
}

// serve runs the stream's state machine on the messages q delivers (from
// this subscriber's own SUB connection, or from a Listener in bind mode)
// until ctx ends or the source fails.
func (s *Subscriber) serve(ctx context.Context, q *liveQueue) (gotMessage bool, err error) {
	var tail <-chan time.Time
	var tailTimer *time.Timer
	if s.dialReplay != "" && s.cfg.TailPoll > 0 {
		tailTimer = time.NewTimer(min(firstTailPoll, s.cfg.TailPoll))
		defer tailTimer.Stop()
		tail = tailTimer.C
	}
	for {
		select {
		case <-ctx.Done():
			return gotMessage, ctx.Err()
		case <-tail:
			s.maybeResync(ctx)
			s.pollTail(ctx)
			tailTimer.Reset(s.cfg.TailPoll)
		case r := <-q.ch:
			s.maybeResync(ctx)
			if tailTimer != nil {
				tailTimer.Reset(s.cfg.TailPoll)
			}
			q.bytes.Add(-int64(r.bytes))
			select {
			case q.drained <- struct{}{}:
			default:
			}
			if r.err != nil {
				s.c.disconnects.Add(1)
				return gotMessage, fmt.Errorf("receive from %s: %w", s.cfg.Endpoint, r.err)
			}
			if s.onLive(ctx, r.frames) {
				gotMessage = true
			}
		}
	}
}

func (s *Subscriber) socketOptions() []zmq4.Option {
	return []zmq4.Option{
		// Reconnecting is ours (with backoff and sequence continuity);
		// zmq4's own retry loop sleeps without watching the context.
		zmq4.WithDialerMaxRetries(0),
		zmq4.WithDialerTimeout(s.cfg.DialTimeout),
		zmq4.WithLogger(slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)),
	}
}

// readLive moves messages from the socket to the queue until the socket
// fails or stop closes. It never blocks on the queue once stop is closed.
func readLive(sock zmq4.Socket, q *liveQueue, stop <-chan struct{}) {
	for {
		msg, err := sock.Recv()
		if err == nil && msg.Type == zmq4.CmdMsg {
			continue // ZMTP commands (PING and the like) carry no batch
		}
		n := 0
		for _, f := range msg.Frames {
			n += len(f)
		}
		for q.bytes.Load() > 0 && q.bytes.Load()+int64(n) > q.limit {
			select {
			case <-q.drained:
			case <-stop:
				return
			}
		}
		q.bytes.Add(int64(n))
		select {
		case q.ch <- received{frames: msg.Frames, err: err, bytes: n}:
		case <-stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// onLive handles one live message; it reports whether it was well-formed.
func (s *Subscriber) onLive(ctx context.Context, frames [][]byte) bool {
	m, err := parseLive(frames, s.cfg.Topic, s.cfg.MaxPayloadBytes)
	if err != nil {
		s.malformed(err)
		return false
	}
	s.c.lastMessageNanos.Store(time.Now().UnixNano())
	switch {
	case !s.haveLast:
		s.catchUp(ctx, m)
	case m.seq == s.last+1:
		s.deliver(ctx, m.seq, m.payload, false)
	case m.seq == s.last && xxh3.Hash(m.payload) == s.lastHash:
		s.c.duplicatesDropped.Add(1)
	case m.seq == s.last:
		s.restarted(ctx, fmt.Sprintf("publisher restarted: seq %d arrived again with a different payload", m.seq), m)
	case m.seq < s.last:
		if known, same := s.alreadyDelivered(m.seq, m.payload); known && same {
			s.c.duplicatesDropped.Add(1) // delivered by a replay before its live copy arrived
			return true
		}
		s.restarted(ctx, fmt.Sprintf("publisher restarted: seq went back from %d to %d", s.last, m.seq), m)
	default:
		s.c.gapsDetected.Add(1)
		s.repair(ctx, m)
	}
	return true
}

// restarted handles evidence of a new publisher behind the endpoint
// (vLLM's counter starts at 0 per publisher, and a restarted engine's cache
// starts empty): Reset, then treat m as the first message of a new stream.
func (s *Subscriber) restarted(ctx context.Context, reason string, m liveMessage) {
	s.c.publisherRestarts.Add(1)
	s.reset(ctx, reason)
	s.forgetStream()
	s.catchUp(ctx, m)
}

// catchUp handles the first message of a stream (after start or a
// publisher restart). If it is not seq 0 we joined late; with a replay
// endpoint we fetch 0..seq-1 first. Whatever the buffer no longer holds is
// counted as an unrepaired gap but costs no Reset: nothing was delivered
// for this stream yet, so nothing known can be stale.
func (s *Subscriber) catchUp(ctx context.Context, m liveMessage) {
	// Whatever path it takes, the first message has been caught up with as
	// far as the publisher allows.
	defer s.c.synced.Store(true)
	if m.seq == 0 {
		s.deliver(ctx, m.seq, m.payload, false)
		return
	}
	s.c.gapsDetected.Add(1)
	if s.dialReplay == "" {
		s.c.gapsUnrepaired.Add(1)
		s.log.Info("joined the kv event stream late and no replay endpoint is configured", "first_seq", m.seq)
		s.deliver(ctx, m.seq, m.payload, false)
		return
	}
	s.repair(ctx, m)
}

// repair fills the batches before live message m from the replay endpoint
// and then delivers m. Replayed batches are delivered as they arrive (the
// publisher's buffer can hold 10,000 of them); any discontinuity found on
// the way, while something is already known, costs a Reset before the
// next batch, so the Handler is never left with stale state.
//
// The replay starts at the last delivered seq, not after it: if that batch
// comes back different, the publisher restarted and has already counted
// past where we were (a plain seq comparison cannot see that), and
// splicing its batches onto the old state would leave it stale.
func (s *Subscriber) repair(ctx context.Context, m liveMessage) {
	if s.dialReplay == "" {
		s.c.gapsUnrepaired.Add(1)
		s.reset(ctx, fmt.Sprintf("gap: batches %d..%d missed and no replay endpoint is configured", s.last+1, m.seq-1))
		s.deliver(ctx, m.seq, m.payload, false)
		return
	}
	from := uint64(0)
	if s.haveLast {
		from = s.last
	}
	s.c.replaysRequested.Add(1)
	holes, restarted := false, false
	err := s.replay(ctx, from, func(seq uint64, payload []byte) {
		if restarted {
			return
		}
		if s.haveLast && seq == s.last && xxh3.Hash(payload) != s.lastHash {
			restarted = true
			return
		}
		if seq >= m.seq || (s.haveLast && seq <= s.last) {
			return // the live stream has it, or it is already delivered
		}
		expected := uint64(0)
		if s.haveLast {
			expected = s.last + 1
		}
		if seq != expected {
			holes = true
			if s.haveLast {
				s.reset(ctx, fmt.Sprintf("gap: replay is missing batches %d..%d (no longer in the publisher's buffer)", expected, seq-1))
			}
		}
		s.deliver(ctx, seq, payload, true)
	})
	if err != nil {
		s.c.replayFailures.Add(1)
		s.log.Warn("kv event replay failed", "from", from, "live_seq", m.seq, "err", err)
	}
	if restarted {
		s.restarted(ctx, fmt.Sprintf("publisher restarted: replayed seq %d differs from the batch delivered as seq %d", s.last, s.last), m)
		return
	}
	if !holes && s.haveLast && s.last == m.seq-1 {
		s.c.gapsRepaired.Add(1)
	} else {
		s.c.gapsUnrepaired.Add(1)
		if s.haveLast && s.last < m.seq-1 {
			reason := fmt.Sprintf("gap: batches %d..%d could not be replayed", s.last+1, m.seq-1)
			if err != nil {
				reason += ": " + err.Error()
			}
			s.reset(ctx, reason)
		}
	}
	s.deliver(ctx, m.seq, m.payload, false)
}

// pollTail asks the replay endpoint for whatever follows the last
// delivered batch while the live stream is silent. Anything it returns was
// missed live: it is delivered like a repaired gap.
func (s *Subscriber) pollTail(ctx context.Context) {
	from := uint64(0)
	if s.haveLast {
		from = s.last
	}
	s.c.tailPolls.Add(1)
	found, holes, restarted, sawLast := false, false, false, false
	err := s.replay(ctx, from, func(seq uint64, payload []byte) {
		if restarted {
			return
		}
		if s.haveLast && seq == s.last {
			sawLast = true
			if xxh3.Hash(payload) != s.lastHash {
				restarted = true
				return
			}
		}
		if s.haveLast && seq <= s.last {
			return
		}
		if !found {
			found = true
			s.c.gapsDetected.Add(1)
		}
		if s.haveLast && seq != s.last+1 {
			holes = true
			s.reset(ctx, fmt.Sprintf("gap: replay is missing batches %d..%d (no longer in the publisher's buffer)", s.last+1, seq-1))
		}
		s.deliver(ctx, seq, payload, true)
	})
	// The publisher that delivered seq last still buffers it, or newer
	// batches that pushed it out. A replay holding neither comes from a
	// new publisher that has not yet counted up to last (a restarted
	// kvagent or engine whose first batches this subscriber missed live):
	// without this, its batches would be ignored until it passed last.
	if err == nil && s.haveLast && !sawLast && !found {
		restarted = true
	}
	if err == nil && !restarted {
		s.c.synced.Store(true)
	}
	switch {
	case err != nil:
		// Warn, rate-limited: a tail poll that keeps failing means late
		// joins, lost final removals and restarts go unnoticed.
		if n := s.c.replayFailures.Add(1); n&(n-1) == 0 {
			s.log.Warn("kv event tail poll failed", "from", from, "err", err, "replay_failures_total", n)
		}
	case restarted:
		// A new publisher is behind the endpoint: forget the old stream;
		// the next poll or live message catches up from its start.
		s.c.publisherRestarts.Add(1)
		reason := fmt.Sprintf("publisher restarted: replayed seq %d differs from the batch delivered as seq %d", s.last, s.last)
		if !sawLast {
			reason = fmt.Sprintf("publisher restarted: its replay buffer holds neither seq %d, the last delivered, nor anything after it", s.last)
		}
		s.reset(ctx, reason)
		s.forgetStream()
	case found && holes:
		s.c.gapsUnrepaired.Add(1)
	case found:
		s.c.gapsRepaired.Add(1)
	}
}

// deliver hands one batch to the Handler. The counters move first, so
// Stats already includes a batch while the Handler works on it.
func (s *Subscriber) deliver(ctx context.Context, seq uint64, payload []byte, replayed bool) {
	s.haveLast, s.last, s.lastHash = true, seq, xxh3.Hash(payload)
	s.delivered[seq%uint64(len(s.delivered))] = deliveredBatch{seq: seq, hash: s.lastHash, ok: true}
	s.c.lastSeq.Store(seq)
	s.c.haveLastSeq.Store(true)
	s.c.batchesDelivered.Add(1)
	if replayed {
		s.c.batchesReplayed.Add(1)
	}
	if err := s.handler.HandleBatch(ctx, seq, payload); err != nil {
		s.c.handlerErrors.Add(1)
		s.log.Error("kv event batch handler failed", "seq", seq, "err", err)
	}
}

func (s *Subscriber) reset(ctx context.Context, reason string) {
	s.c.resets.Add(1)
	s.log.Warn("kv event stream reset", "reason", reason)
	if err := s.handler.Reset(ctx, reason); err != nil {
		s.c.handlerErrors.Add(1)
		s.log.Error("kv event reset handler failed", "reason", reason, "err", err)
	}
}

// malformed counts a dropped message; it logs the 1st, 2nd, 4th, 8th…
// so a misbehaving peer cannot flood the log.
func (s *Subscriber) malformed(err error) {
	n := s.c.malformedDropped.Add(1)
	if bits.OnesCount64(n) == 1 {
		s.log.Warn("dropped malformed kv event message", "err", err, "malformed_total", n)
	}
}
