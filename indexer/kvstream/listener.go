package kvstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Bind mode: one central SUB socket that engines' PUB sockets connect to,
// as llm-d deploys it (its indexer binds tcp://*:5557 and every model
// server dials in). vLLM's ZmqEventPublisher connects instead of binding
// when its endpoint has no wildcard ("bind stable, connect volatile",
// vllm/distributed/kv_events.py _socket_setup), and offsets the port by
// its data-parallel rank (offset_endpoint_port), so rank r dials port+r.
// The engines are told apart by their topic (llm-d's kv@<pod>@<model>):
// each Subscriber attached to a Listener receives the messages whose topic
// frame equals its Config.Topic, and keeps its own sequence state and
// replay endpoint exactly as a dialing Subscriber does.

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	// Endpoint is bound: tcp://host:port ("*" or 0.0.0.0 for every
	// interface; port 0 picks one, see Addr) or ipc://path.
	Endpoint string
	// Allow lists the peer networks accepted besides loopback. A TCP peer
	// outside them is disconnected before anything it sends is read.
	Allow []netip.Prefix
	// MaxPayloadBytes bounds one batch payload. Default 8 MiB.
	MaxPayloadBytes int
	// HandshakeTimeout bounds a new peer's ZMTP handshake. Default 5s.
	HandshakeTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// ListenerStats counts what a Listener saw. Counters only grow.
type ListenerStats struct {
	Messages       uint64 // messages read from the socket
	UnknownTopic   uint64 // messages whose topic no attached Subscriber has
	QueueFull      uint64 // messages dropped because the Subscriber's queue was full (its gap is repaired by replay)
	Malformed      uint64 // messages without a topic frame, or connections cut by the frame guard
	RejectedPeers  uint64 // connections refused: not loopback, not allowed
	AttachedTopics int    // gauge
}

// Listener is the bound SUB socket of bind mode.
type Listener struct {
	cfg    ListenerConfig
	log    *slog.Logger
	sock   zmq4.Socket
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	routes map[string]*liveQueue

	messages, unknownTopic, queueFull, malformed, rejectedPeers atomic.Uint64
}

// NewListener binds the socket and starts reading it.
func NewListener(cfg ListenerConfig) (*Listener, error) {
	if cfg.MaxPayloadBytes < 0 || cfg.HandshakeTimeout < 0 {
		return nil, errors.New("kvstream listener config: negative limit")
	}
	setDefault(&cfg.MaxPayloadBytes, defaultMaxPayloadBytes)
	setDefault(&cfg.HandshakeTimeout, defaultDialTimeout)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ep, err := listenEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("kvstream listener config Endpoint: %w", err)
	}
	if err := registerGuardedTransports(); err != nil {
		return nil, fmt.Errorf("kvstream: %w", err)
	}
	l := &Listener{cfg: cfg, log: cfg.Logger.With("bind", cfg.Endpoint), routes: map[string]*liveQueue{}, done: make(chan struct{})}
	limits := guardLimits{
		maxFrameBytes:    uint64(max(cfg.MaxPayloadBytes, minGuardFrameBytes)),
		handshakeTimeout: cfg.HandshakeTimeout,
		maxFramesPerMsg:  maxGuardFramesPerMessage,
		onViolation: func(err error) {
			if n := l.malformed.Add(1); bits.OnesCount64(n) == 1 {
				l.log.Warn("kv event peer cut by the frame guard", "err", err, "malformed_total", n)
			}
		},
		allow: cfg.Allow,
		onReject: func(peer net.Addr) {
			if n := l.rejectedPeers.Add(1); bits.OnesCount64(n) == 1 {
				l.log.Warn("refused a kv event publisher that is neither loopback nor allowed", "peer", peer.String(), "rejected_total", n)
			}
		},
	}
	ctx, cancel := context.WithCancel(withGuardLimits(context.Background(), limits))
	l.ctx, l.cancel = ctx, cancel
	l.sock = zmq4.NewSub(ctx, zmq4.WithLogger(slog.NewLogLogger(l.log.Handler(), slog.LevelDebug)))
	// Everything: routing is by exact topic, below.
	if err := l.sock.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		cancel()
		return nil, fmt.Errorf("kvstream listener: subscribe: %w", err)
	}
	if err := l.sock.Listen(ep); err != nil {
		cancel()
		l.sock.Close()
		return nil, fmt.Errorf("kvstream listener: bind %s: %w", cfg.Endpoint, err)
	}
	go l.read()
	return l, nil
}

// listenEndpoint validates a bind endpoint and rewrites it to the guarded
// transport. "*" (vLLM's wildcard spelling) becomes every interface.
func listenEndpoint(ep string) (string, error) {
	return rewriteEndpoint(ep, func(host string, port int) (string, error) {
		if host == "*" {
			host = ""
		}
		return net.JoinHostPort(host, strconv.Itoa(port)), nil
	})
}

// Addr is the bound address (useful with port 0).
func (l *Listener) Addr() net.Addr { return l.sock.Addr() }

// Stats returns the counters.
func (l *Listener) Stats() ListenerStats {
	l.mu.Lock()
	n := len(l.routes)
	l.mu.Unlock()
	return ListenerStats{
		Messages: l.messages.Load(), UnknownTopic: l.unknownTopic.Load(), QueueFull: l.queueFull.Load(),
		Malformed: l.malformed.Load(), RejectedPeers: l.rejectedPeers.Load(), AttachedTopics: n,
	}
}

// attach routes topic's messages to q until detach.
func (l *Listener) attach(topic string, q *liveQueue) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.routes[topic]; ok {
		return fmt.Errorf("kvstream listener %s: topic %q is already attached", l.cfg.Endpoint, topic)
	}
	l.routes[topic] = q
	return nil
}

func (l *Listener) detach(topic string, q *liveQueue) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.routes[topic] == q {
		delete(l.routes, topic)
	}
}

func (l *Listener) read() {
	defer close(l.done)
	for {
		msg, err := l.sock.Recv()
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			// A peer's connection broke; the socket goes on with the others.
			l.log.Debug("kv event listener receive", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if msg.Type == zmq4.CmdMsg {
			continue
		}
		l.messages.Add(1)
		if len(msg.Frames) == 0 {
			l.malformed.Add(1)
			continue
		}
		l.mu.Lock()
		q := l.routes[string(msg.Frames[0])] // no allocation for the lookup
		l.mu.Unlock()
		if q == nil {
			if n := l.unknownTopic.Add(1); bits.OnesCount64(n) == 1 {
				l.log.Warn("kv event batch with a topic no engine is configured for", "topic", truncateForLog(msg.Frames[0]), "unknown_topic_total", n)
			}
			continue
		}
		if !q.offer(msg.Frames) {
			// Never block the socket for one slow stream: the dropped
			// batch is a gap its Subscriber repairs by replay.
			l.queueFull.Add(1)
		}
	}
}

// Close stops reading and closes the socket; attached Subscribers see no
// more messages.
func (l *Listener) Close() error {
	l.cancel()
	err := l.sock.Close()
	<-l.done
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// offer queues frames without blocking; false when the queue is full.
func (q *liveQueue) offer(frames [][]byte) bool {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	if b := q.bytes.Load(); b > 0 && b+int64(n) > q.limit {
		return false
	}
	q.bytes.Add(int64(n))
	select {
	case q.ch <- received{frames: frames, bytes: n}:
		return true
	default:
		q.bytes.Add(-int64(n))
		return false
	}
}

// runAttached is Run's loop in bind mode: no connection of its own, the
// Listener delivers.
func (s *Subscriber) runAttached(ctx context.Context) error {
	q := s.newLiveQueue()
	if err := s.cfg.Listener.attach(s.cfg.Topic, q); err != nil {
		return err
	}
	defer s.cfg.Listener.detach(s.cfg.Topic, q)
	s.c.connects.Add(1)
	// s.log already carries the topic (NewSubscriber: Logger.With("topic")):
	// naming it again writes the key twice in one JSON object.
	s.log.Info("kv event stream attached to the bound socket")
	_, err := s.serve(ctx, q)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
