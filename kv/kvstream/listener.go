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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
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
//
// The topic is only a label the sender chooses, so it is bound to a
// sender: each attached topic names the networks its engine publishes
// from (Config.Publishers, the engine's own address), and a message under
// that topic from any other peer is refused and its connection cut. That
// needs to know which connection each message came from, which zmq4's
// SUB socket does not say (Socket.Recv merges every connection's
// messages; Msg has no peer): the Listener therefore accepts the
// connections itself and runs each one's ZMTP session with zmq4's
// exported per-connection API (zmq4.Open, Conn.RecvMsg), as zmq4's own
// socket does in socket.accept and qreader.listen, and subscribes each to
// everything as SUB does on a new connection (socket.addConn sends
// [0x01 + topic], here the empty topic). vLLM's publisher offers no
// authentication (ZmqEventPublisher sets no CURVE or PLAIN options), so
// the address is the strongest binding an unmodified engine allows;
// processes sharing an engine's address (its pod, or the host for a
// loopback engine) are indistinguishable from it.

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
	Messages     uint64 // messages read from the socket
	UnknownTopic uint64 // messages whose topic no attached Subscriber has
	QueueFull    uint64 // messages dropped because the Subscriber's queue was full (its gap is repaired by replay)
	Malformed    uint64 // messages without a topic frame, or connections cut by the frame guard
	// RejectedPeers counts connections refused: not loopback, not allowed.
	RejectedPeers uint64
	// ForeignTopic counts messages under an attached topic from a peer
	// outside that topic's Publishers: dropped, and the connection cut.
	ForeignTopic   uint64
	AttachedTopics int // gauge
}

// Listener is the bound SUB socket of bind mode.
type Listener struct {
	cfg    ListenerConfig
	log    *slog.Logger
	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	routes map[string]listenerRoute
	conns  map[net.Conn]struct{}

	messages, unknownTopic, queueFull, malformed, rejectedPeers, foreignTopic atomic.Uint64
}

// listenerRoute is one attached topic: where its messages go and who may
// send them.
type listenerRoute struct {
	q          *liveQueue
	publishers []netip.Prefix
}

// NewListener binds the socket and starts accepting engines.
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
	l := &Listener{cfg: cfg, log: cfg.Logger.With("bind", cfg.Endpoint), routes: map[string]listenerRoute{}, conns: map[net.Conn]struct{}{}}
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
	scheme, addr, _ := strings.Cut(ep, "://")
	tr := guardedTransport{network: "tcp"}
	if scheme == guardedIPC {
		tr.network = "unix"
	}
	ctx, cancel := context.WithCancel(withGuardLimits(context.Background(), limits))
	l.ctx, l.cancel = ctx, cancel
	if l.ln, err = tr.Listen(ctx, addr); err != nil {
		cancel()
		return nil, fmt.Errorf("kvstream listener: bind %s: %w", cfg.Endpoint, err)
	}
	l.wg.Add(1)
	go l.accept()
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
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Stats returns the counters.
func (l *Listener) Stats() ListenerStats {
	l.mu.Lock()
	n := len(l.routes)
	l.mu.Unlock()
	return ListenerStats{
		Messages: l.messages.Load(), UnknownTopic: l.unknownTopic.Load(), QueueFull: l.queueFull.Load(),
		Malformed: l.malformed.Load(), RejectedPeers: l.rejectedPeers.Load(), ForeignTopic: l.foreignTopic.Load(),
		AttachedTopics: n,
	}
}

// attach routes topic's messages from publishers to q until detach.
func (l *Listener) attach(topic string, publishers []netip.Prefix, q *liveQueue) error {
	if len(publishers) == 0 {
		return fmt.Errorf("kvstream listener %s: topic %q attached without the networks its engine publishes from", l.cfg.Endpoint, topic)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.routes[topic]; ok {
		return fmt.Errorf("kvstream listener %s: topic %q is already attached", l.cfg.Endpoint, topic)
	}
	l.routes[topic] = listenerRoute{q: q, publishers: publishers}
	return nil
}

func (l *Listener) detach(topic string, q *liveQueue) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.routes[topic].q == q {
		delete(l.routes, topic)
	}
}

// accept hands each admitted connection (loopback or allowed, frame
// guarded: guardedListener.Accept) to its own session, so that a slow
// handshake holds up no other engine.
func (l *Listener) accept() {
	defer l.wg.Done()
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			// A transient failure (out of file descriptors): pause rather
			// than spin.
			l.log.Debug("kv event listener accept", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		l.mu.Lock()
		if l.ctx.Err() != nil {
			l.mu.Unlock()
			conn.Close()
			return
		}
		l.conns[conn] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go l.session(conn)
	}
}

// session runs one publisher's connection: the ZMTP handshake as a SUB,
// a subscription to everything (routing is by exact topic, below), then
// each message, attributed to this peer.
func (l *Listener) session(conn net.Conn) {
	defer l.wg.Done()
	defer func() {
		l.mu.Lock()
		delete(l.conns, conn)
		l.mu.Unlock()
		conn.Close()
	}()
	peer := peerAddr(conn.RemoteAddr())
	zc, err := zmq4.Open(conn, null.Security(), zmq4.Sub, zmq4.SocketIdentity(nil), true, nil)
	if err != nil {
		l.log.Debug("kv event listener handshake", "peer", conn.RemoteAddr().String(), "err", err)
		return
	}
	if err := zc.SendMsg(zmq4.NewMsg([]byte{1})); err != nil {
		l.log.Debug("kv event listener subscribe", "peer", conn.RemoteAddr().String(), "err", err)
		return
	}
	for {
		msg, err := zc.RecvMsg()
		if err != nil {
			// The peer went away or broke the framing (counted by the
			// guard); the other connections go on.
			return
		}
		if msg.Type == zmq4.CmdMsg {
			continue // PING and the like carry no batch
		}
		if !l.route(peer, conn.RemoteAddr(), msg.Frames) {
			return
		}
	}
}

// route delivers one message to its topic's Subscriber; false cuts the
// connection (a peer sending under a topic that is not its own).
func (l *Listener) route(peer netip.Addr, from net.Addr, frames [][]byte) bool {
	l.messages.Add(1)
	if len(frames) == 0 {
		l.malformed.Add(1)
		return true
	}
	l.mu.Lock()
	r, ok := l.routes[string(frames[0])] // no allocation for the lookup
	l.mu.Unlock()
	if !ok {
		if n := l.unknownTopic.Add(1); bits.OnesCount64(n) == 1 {
			l.log.Warn("kv event batch with a topic no engine is configured for", "topic", truncateForLog(frames[0]), "unknown_topic_total", n)
		}
		return true
	}
	if !prefixesContain(r.publishers, peer) {
		// Never delivered: a forged batch would credit or, as a sequence
		// reset, wipe the engine's blocks. The connection is cut since
		// everything else it sends is as suspect.
		if n := l.foreignTopic.Add(1); bits.OnesCount64(n) == 1 {
			l.log.Warn("refused a kv event batch from a peer that is not the topic's engine; connection cut",
				"topic", truncateForLog(frames[0]), "peer", from.String(), "engine_publishes_from", prefixesString(r.publishers), "foreign_topic_total", n)
		}
		return false
	}
	if !r.q.offer(frames) {
		// Never block the socket for one slow stream: the dropped
		// batch is a gap its Subscriber repairs by replay.
		l.queueFull.Add(1)
	}
	return true
}

// peerAddr is the peer's IP; a Unix-socket peer is on this host, so it
// counts as loopback (both families).
func peerAddr(a net.Addr) netip.Addr {
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

func prefixesContain(ps []netip.Prefix, a netip.Addr) bool {
	if !a.IsValid() {
		// A Unix-socket peer: same host, so a loopback publisher.
		for _, p := range ps {
			if p.Addr().IsLoopback() {
				return true
			}
		}
		return false
	}
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func prefixesString(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// Close stops accepting, closes every connection and waits for their
// sessions; attached Subscribers see no more messages.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.cancel()
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	err := l.ln.Close()
	l.wg.Wait()
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
	if err := s.cfg.Listener.attach(s.cfg.Topic, s.cfg.Publishers, q); err != nil {
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
