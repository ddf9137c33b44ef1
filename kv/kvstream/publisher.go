package kvstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Endpoint is bound for the PUB socket, e.g. tcp://127.0.0.1:5557
	// (port 0 picks a free port; read it back with Addr), or dialed when
	// Connect is set.
	Endpoint string
	// Connect dials Endpoint instead of binding it: what vLLM does with an
	// endpoint without a wildcard ("bind stable, connect volatile",
	// ZmqEventPublisher._socket_setup), to reach a central subscriber
	// (kvgate's bind mode, llm-d's indexer).
	Connect bool
	// From, with Connect to a tcp:// endpoint, is the local IP the PUB
	// connects from ("" = the system's choice). Bind mode binds each topic
	// to its engine's address (Config.Publishers), so tests play a second
	// peer on one host by connecting from another loopback address
	// (127.0.0.2: every 127/8 address is the loopback interface's on Linux).
	From string
	// ReplayEndpoint, if set, is bound for the ROUTER replay socket.
	ReplayEndpoint string
	// Topic is sent as the first frame of every message (vLLM default "").
	Topic string
	// BufferSteps is how many recent batches replay can return
	// (vLLM buffer_steps). Default 10,000.
	BufferSteps int
	// ReplayLayout selects the replay reply framing: ReplayWithTopic
	// (default, vLLM ≥ v0.26) or ReplayLegacy (older vLLM, SGLang).
	ReplayLayout ReplayLayout
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

const defaultBufferSteps = 10_000

// Publisher speaks vLLM's ZmqEventPublisher protocol: a PUB socket sending
// [topic, seq, payload] with seq counting from 0, and an optional ROUTER
// answering replay requests from a ring of the last BufferSteps batches,
// in vLLM v0.26's reply layout unless told otherwise.
// It is meant for tests and the engine simulator.
type Publisher struct {
	cfg    PublisherConfig
	log    *slog.Logger
	pub    zmq4.Socket
	router zmq4.Socket // nil without a replay endpoint
	cancel context.CancelFunc
	wg     sync.WaitGroup
	redial *redialer // Connect mode only

	mu      sync.Mutex
	closed  bool
	nextSeq uint64
	ring    []bufferedBatch // ring buffer, len == BufferSteps once full
	head    int             // index of the oldest entry once full
}

type bufferedBatch struct {
	seq     uint64
	payload []byte
}

// NewPublisher binds the sockets and starts serving replay requests.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.BufferSteps < 0 {
		return nil, fmt.Errorf("kvstream publisher config: BufferSteps is negative (%d)", cfg.BufferSteps)
	}
	setDefault(&cfg.BufferSteps, defaultBufferSteps)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var from netip.Addr
	if cfg.From != "" {
		a, err := netip.ParseAddr(cfg.From)
		if err != nil || !cfg.Connect || !strings.HasPrefix(cfg.Endpoint, "tcp://") {
			cancel()
			return nil, fmt.Errorf("kvstream publisher: From %q: want an IP address, with Connect to a tcp:// endpoint", cfg.From)
		}
		from = a
	}
	p := &Publisher{cfg: cfg, log: cfg.Logger.With("endpoint", cfg.Endpoint), cancel: cancel}
	logOpt := zmq4.WithLogger(slog.NewLogLogger(p.log.Handler(), slog.LevelDebug))
	opts := []zmq4.Option{logOpt}
	if cfg.Connect {
		// libzmq connects in the background and reconnects a connecting
		// PUB; zmq4 dials synchronously, so dialLoop does both here,
		// through the watched transports. Not zmq4's
		// WithAutomaticReconnect: it redials from inside a failed PUB send
		// holding the writer's lock, against the connection reaper's lock
		// order, and can deadlock (publisher_redial.go).
		if err := registerWatchedTransports(); err != nil {
			cancel()
			return nil, fmt.Errorf("kvstream publisher: %w", err)
		}
		p.redial = newRedialer(from)
		ctx = context.WithValue(ctx, redialKey{}, p.redial)
		opts = append(opts, zmq4.WithDialerMaxRetries(0))
	}
	p.pub = zmq4.NewPub(ctx, opts...)
	if cfg.Connect {
		if !strings.HasPrefix(cfg.Endpoint, "tcp://") && !strings.HasPrefix(cfg.Endpoint, "ipc://") {
			p.Close()
			return nil, fmt.Errorf("kvstream publisher: connect PUB %q: want tcp://host:port or ipc://path", cfg.Endpoint)
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.dialLoop(ctx)
		}()
	} else if err := p.pub.Listen(cfg.Endpoint); err != nil {
		p.Close()
		return nil, fmt.Errorf("kvstream publisher: bind PUB %s: %w", cfg.Endpoint, err)
	}
	if cfg.ReplayEndpoint != "" {
		p.router = zmq4.NewRouter(ctx, logOpt)
		if err := p.router.Listen(cfg.ReplayEndpoint); err != nil {
			p.Close()
			return nil, fmt.Errorf("kvstream publisher: bind ROUTER %s: %w", cfg.ReplayEndpoint, err)
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serveReplay(ctx)
		}()
	}
	return p, nil
}

// dialLoop connects the PUB socket, retrying until it succeeds or the
// Publisher closes. Batches published before then are dropped, as a
// libzmq PUB without peers drops them; replay recovers them.
func (p *Publisher) dialLoop(ctx context.Context) {
	ep := watchedEndpoint(p.cfg.Endpoint)
	for {
		p.redial.reset()
		err := p.pub.Dial(ep)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			// Connected: wait for the connection to end, then dial again.
			select {
			case <-ctx.Done():
				return
			case <-p.redial.lost:
				p.log.Debug("kv event publisher: connection lost; reconnecting")
			}
		} else {
			// A handshake that failed leaves its connection open in
			// zmq4 (Open does not close it): close it here.
			p.redial.dropCurrent()
			p.log.Debug("kv event publisher: connect failed; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Addr is the bound PUB address (useful with port 0); with Connect, the
// address dialed (nil if it is not a tcp host:port).
func (p *Publisher) Addr() net.Addr {
	if p.cfg.Connect {
		a, err := net.ResolveTCPAddr("tcp", strings.TrimPrefix(p.cfg.Endpoint, "tcp://"))
		if err != nil {
			return nil
		}
		return a
	}
	return p.pub.Addr()
}

// ReplayAddr is the bound ROUTER address, nil without a replay endpoint.
func (p *Publisher) ReplayAddr() net.Addr {
	if p.router == nil {
		return nil
	}
	return p.router.Addr()
}

// Publish assigns the next seq, keeps the batch for replay and sends it.
func (p *Publisher) Publish(payload []byte) (uint64, error) {
	return p.publish(payload, true)
}

// PublishSkippingLive assigns the next seq and keeps the batch for replay
// but does not send it live: subscribers see a gap that replay can repair.
// A test hook; a real engine never does this.
func (p *Publisher) PublishSkippingLive(payload []byte) (uint64, error) {
	return p.publish(payload, false)
}

func (p *Publisher) publish(payload []byte, live bool) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, errors.New("kvstream publisher: closed")
	}
	seq := p.nextSeq
	p.nextSeq++
	// Buffered before it is sent, under the same lock the replay server
	// takes: any seq a subscriber has seen live is also replayable.
	b := bufferedBatch{seq: seq, payload: append([]byte(nil), payload...)}
	if len(p.ring) < p.cfg.BufferSteps {
		p.ring = append(p.ring, b)
	} else {
		p.ring[p.head] = b
		p.head = (p.head + 1) % len(p.ring)
	}
	if !live {
		return seq, nil
	}
	if err := p.pub.Send(zmq4.NewMsgFrom([]byte(p.cfg.Topic), encodeSeq(seq), b.payload)); err != nil {
		return seq, fmt.Errorf("kvstream publisher: send seq %d: %w", seq, err)
	}
	return seq, nil
}

// buffered returns the buffered batches with seq >= start, oldest first.
func (p *Publisher) buffered(start uint64) []bufferedBatch {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []bufferedBatch
	for i := range p.ring {
		b := p.ring[(p.head+i)%len(p.ring)]
		if b.seq >= start {
			out = append(out, b)
		}
	}
	return out
}

func (p *Publisher) serveReplay(ctx context.Context) {
	for {
		msg, err := p.router.Recv()
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("replay receive failed", "err", err)
			}
			return
		}
		if msg.Type == zmq4.CmdMsg {
			continue
		}
		id, start, err := parseReplayRequest(msg.Frames)
		if err != nil {
			// vLLM logs and ignores requests of the wrong shape.
			p.log.Warn("ignoring invalid replay request", "err", err)
			continue
		}
		for _, b := range p.buffered(start) {
			if err := p.router.Send(p.replyMsg(id, []byte(p.cfg.Topic), encodeSeq(b.seq), b.payload)); err != nil {
				p.log.Warn("replay send failed", "seq", b.seq, "err", err)
				break
			}
		}
		if err := p.router.Send(p.replyMsg(id, []byte{}, encodeSeq(endOfReplaySeq), []byte{})); err != nil {
			// Seen here with go-zeromq subscribers: the requester has
			// already closed when the marker's last frame is written
			// ("use of closed network connection"). The requester
			// stopped reading on its own, so nothing is lost.
			p.log.Debug("replay end marker send failed", "err", err)
		}
	}
}

// replyMsg frames one replay reply for the ROUTER: the identity, the empty
// delimiter, then [topic,] seq, payload (see ReplayLayout).
func (p *Publisher) replyMsg(id, topic, seq, payload []byte) zmq4.Msg {
	if p.cfg.ReplayLayout == ReplayLegacy {
		return zmq4.NewMsgFrom(id, []byte{}, seq, payload)
	}
	return zmq4.NewMsgFrom(id, []byte{}, topic, seq, payload)
}

// Close stops the replay server and closes both sockets. Safe to call
// more than once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	var errs []error
	for _, sock := range []zmq4.Socket{p.pub, p.router} {
		// A connection the peer closed first is not a failure to close.
		if sock != nil {
			if err := sock.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
	}
	p.wg.Wait()
	return errors.Join(errs...)
}
