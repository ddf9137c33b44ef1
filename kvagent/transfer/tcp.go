package transfer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	defaultStreams      = 4
	maxStreams          = 64
	defaultMessageBytes = 1 << 20
	minMessageBytes     = 4 << 10
	maxMessageBytes     = 16 << 20
	defaultDialTimeout  = 5 * time.Second
	defaultIOTimeout    = 30 * time.Second
	// stripeBytes: a descriptor longer than this is cut into pieces that
	// travel on different streams, so one large descriptor still uses
	// every connection.
	stripeBytes = 4 << 20
	// maxDescs bounds one request's descriptor list.
	maxDescs = 1 << 20
	// Notifications wait in memory until GetNotifs; a peer that sends them
	// faster than they are read is refused beyond these bounds.
	maxQueuedNotifs     = 1 << 16
	maxQueuedNotifBytes = 64 << 20
)

// TCPConfig configures the pure-Go TCP backend.
type TCPConfig struct {
	// Name identifies the agent to its peers (1..255 bytes).
	Name string
	// Listen is the address peers connect to (default "127.0.0.1:0").
	Listen string
	// Listener, when set, is used instead of listening on Listen (socket
	// activation, tests); the agent closes it on Close.
	Listener net.Listener
	// Advertise is the address written into LocalMetadata (default: the
	// listener's address; set it when listening on 0.0.0.0 or behind NAT).
	Advertise string
	// Streams is the number of connections per peer that descriptors are
	// striped over (default 4, at most 64).
	Streams int
	// TLS, when set, encrypts every connection; the config serves both
	// sides (Certificates are presented as server and as client). With
	// ClientCAs set, peers must present a certificate signed by one of
	// them (mutual TLS). Peers are verified against RootCAs with
	// ServerName, or the host of the peer's advertised address when
	// ServerName is empty. Without it the listener accepts connections
	// from loopback addresses only: KV bytes never cross a network in
	// clear to an unauthenticated peer, whatever Listen says.
	TLS *tls.Config
	// ReadAccess, when set, decides every inbound read before a byte of
	// it is sent (the kvagent: only slots the peer pinned through its own
	// Acquire, with the capability that Acquire returned). A refusal
	// reaches the initiator as that read's RemoteError, the connection
	// stays usable. release, when not nil, is called once the read's
	// bytes have left the region (copied to the socket or its buffer), so
	// ReadAccess can hold what it must for the duration. nil: every
	// registered byte is readable by any peer that can connect (NIXL's
	// model).
	ReadAccess func(ReadRequest) (release func(), err error)
	// InboundWrites lets peers Write into this agent's regions. Off by
	// default: a write item is answered with ErrInboundWrite and its
	// bytes are discarded unread into memory (the kvagent's peers only
	// ever read).
	InboundWrites bool
	// InboundNotifs lets peers queue notifications for GetNotifs (up to
	// 65,536 of them, 64 MiB). Off by default: an agent that never calls
	// GetNotifs (the kvagent) would otherwise hold what any peer sends;
	// a notification is answered with ErrInboundNotif.
	InboundNotifs bool
	// MaxMessageBytes is the largest frame payload this agent sends or
	// accepts (default 1 MiB, 4 KiB..16 MiB); peers learn it from the
	// metadata and the connection handshake. Larger frames cost fewer
	// system calls per byte (BenchmarkTCPRead reports CPU s/GB).
	MaxMessageBytes int
	// DialTimeout bounds connecting and the handshake (default 5s).
	DialTimeout time.Duration
	// IOTimeout fails a connection that has work outstanding and receives
	// nothing (or cannot send) for this long (default 30s), so a peer that
	// vanishes without closing its sockets fails transfers instead of
	// hanging them.
	IOTimeout time.Duration
	// Registerer receives the transfer metrics (nil: none).
	Registerer prometheus.Registerer
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	// maxVersion, when set, caps the protocol versions this agent speaks
	// (tests: an agent capped at 2 behaves on the wire as a version-2
	// agent does, refusing any other hello).
	maxVersion uint8
}

// version is the newest protocol version the agent speaks.
func (c *TCPConfig) version() uint8 {
	if c.maxVersion != 0 {
		return c.maxVersion
	}
	return protocolVersion
}

func (c *TCPConfig) applyDefaults() error {
	if c.Name == "" || len(c.Name) > maxNameLen {
		return fmt.Errorf("kvagent/transfer: tcp: name %q: want 1..%d bytes", c.Name, maxNameLen)
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.Streams == 0 {
		c.Streams = defaultStreams
	}
	if c.Streams < 1 || c.Streams > maxStreams {
		return fmt.Errorf("kvagent/transfer: tcp: streams %d: want 1..%d", c.Streams, maxStreams)
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = defaultMessageBytes
	}
	if c.MaxMessageBytes < minMessageBytes || c.MaxMessageBytes > maxMessageBytes {
		return fmt.Errorf("kvagent/transfer: tcp: max message bytes %d: want %d..%d", c.MaxMessageBytes, minMessageBytes, maxMessageBytes)
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = defaultDialTimeout
	}
	if c.IOTimeout == 0 {
		c.IOTimeout = defaultIOTimeout
	}
	if c.DialTimeout < 0 || c.IOTimeout < 0 {
		return fmt.Errorf("kvagent/transfer: tcp: negative timeout (dial %s, io %s)", c.DialTimeout, c.IOTimeout)
	}
	if c.TLS != nil && len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil {
		return fmt.Errorf("kvagent/transfer: tcp: TLS config without a certificate (the agent serves its peers too)")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// tcpEndpoint is the TCP backend: every agent listens; an initiator opens
// Streams connections to each peer it transfers with and stripes the
// descriptors over them. The target validates every descriptor against
// what it has registered, whatever the initiator believed.
type tcpEndpoint struct {
	cfg       TCPConfig
	ln        net.Listener
	addr      string
	clientTLS *tls.Config
	serverTLS *tls.Config
	metrics   *metrics
	log       *slog.Logger
	ctx       context.Context // canceled by Close: aborts dials
	stop      context.CancelFunc
	wg        sync.WaitGroup

	mu         sync.RWMutex
	closed     bool
	regions    map[uint32]*region
	nextRegion uint32
	peers      map[string]*peer
	xfers      map[Xfer]*xfer
	nextXfer   Xfer
	nextWire   atomic.Uint64

	notifMu    sync.Mutex
	notifs     map[string][][]byte
	notifCount int
	notifBytes int

	srvMu    sync.Mutex
	srvConns map[net.Conn]struct{}
	accepted atomic.Int64 // connections accepted, for tests
}

// NewTCP starts a TCP endpoint listening for peers.
func NewTCP(cfg TCPConfig) (Endpoint, error) {
	return newTCP(cfg)
}

func newTCP(cfg TCPConfig) (*tcpEndpoint, error) {
	if err := cfg.applyDefaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("kvagent/transfer: tcp: listen %s: %w", cfg.Listen, err)
		}
	}
	addr := cfg.Advertise
	if addr == "" {
		addr = ln.Addr().String()
	}
	if len(addr) > maxNameLen {
		ln.Close()
		return nil, fmt.Errorf("kvagent/transfer: tcp: advertised address %q longer than %d bytes", addr, maxNameLen)
	}
	ctx, stop := context.WithCancel(context.Background())
	a := &tcpEndpoint{
		cfg: cfg, ln: ln, addr: addr, metrics: m, ctx: ctx, stop: stop,
		log:      cfg.Logger.With("agent", cfg.Name),
		regions:  map[uint32]*region{},
		peers:    map[string]*peer{},
		xfers:    map[Xfer]*xfer{},
		notifs:   map[string][][]byte{},
		srvConns: map[net.Conn]struct{}{},
	}
	if cfg.TLS != nil {
		a.clientTLS = cfg.TLS.Clone()
		a.serverTLS = cfg.TLS.Clone()
		if a.serverTLS.ClientCAs != nil && a.serverTLS.ClientAuth == tls.NoClientCert {
			a.serverTLS.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	a.wg.Add(1)
	go a.acceptLoop()
	return a, nil
}

func (a *tcpEndpoint) Name() string { return a.cfg.Name }

func (a *tcpEndpoint) RegisterMem(r Region) (uint32, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, ErrClosed
	}
	if len(a.regions) >= maxRegions {
		return 0, fmt.Errorf("kvagent/transfer: register: %d regions already registered (max %d)", len(a.regions), maxRegions)
	}
	h := a.nextRegion + 1
	for h == 0 || a.regions[h] != nil {
		h++
	}
	reg, err := newRegion(h, r)
	if err != nil {
		return 0, err
	}
	a.nextRegion = h
	a.regions[h] = reg
	return h, nil
}

func (a *tcpEndpoint) DeregisterMem(handle uint32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.regions[handle] == nil {
		return fmt.Errorf("kvagent/transfer: deregister region %d: %w", handle, ErrUnknownRegion)
	}
	delete(a.regions, handle)
	return nil
}

func (a *tcpEndpoint) region(handle uint32) *region {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.regions[handle]
}

func (a *tcpEndpoint) LocalMetadata() ([]byte, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return nil, ErrClosed
	}
	m := metadata{name: a.cfg.Name, addr: a.addr, maxPayload: uint32(a.cfg.MaxMessageBytes)}
	for _, r := range a.regions {
		m.regions = append(m.regions, remoteRegion{handle: r.handle, kind: r.kind, length: r.length})
	}
	sort.Slice(m.regions, func(i, j int) bool { return m.regions[i].handle < m.regions[j].handle })
	return m.encode(), nil
}

func (a *tcpEndpoint) LoadRemoteMetadata(md []byte) (string, error) {
	m, err := decodeMetadata(md)
	if err != nil {
		return "", err
	}
	regions := make(map[uint32]remoteRegion, len(m.regions))
	for _, r := range m.regions {
		regions[r.handle] = r
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return "", ErrClosed
	}
	old := a.peers[m.name]
	if old != nil && old.addr == m.addr {
		// Same agent at the same place, more or fewer regions: keep its
		// connections.
		old.regions, old.maxPayload = regions, int(m.maxPayload)
		a.mu.Unlock()
		return m.name, nil
	}
	a.peers[m.name] = &peer{agent: a, name: m.name, addr: m.addr, maxPayload: int(m.maxPayload), regions: regions, streams: make([]*stream, a.cfg.Streams), offer: a.cfg.version()}
	a.mu.Unlock()
	if old != nil {
		old.shutdown(fmt.Errorf("kvagent/transfer: peer %q moved from %s to %s", m.name, old.addr, m.addr))
	}
	return m.name, nil
}

func (a *tcpEndpoint) InvalidateRemote(remote string) error {
	a.mu.Lock()
	p := a.peers[remote]
	delete(a.peers, remote)
	a.mu.Unlock()
	if p == nil {
		return fmt.Errorf("kvagent/transfer: invalidate: %w %q", ErrUnknownRemote, remote)
	}
	p.shutdown(fmt.Errorf("kvagent/transfer: peer %q invalidated", remote))
	return nil
}

// xfer is a created request.
type xfer struct {
	op     Op
	remote string
	local  []Desc
	locals []*region // resolved local[i].Region
	rdescs []Desc
	notif  []byte
	cur    *attempt // the latest post; guarded by tcpEndpoint.mu
}

func (a *tcpEndpoint) CreateXfer(op Op, local []Desc, remote string, remoteDescs []Desc, notif []byte) (Xfer, error) {
	if op != Read && op != Write {
		return 0, fmt.Errorf("kvagent/transfer: create: op %d: want Read or Write", op)
	}
	if len(local) == 0 || len(local) != len(remoteDescs) || len(local) > maxDescs {
		return 0, fmt.Errorf("kvagent/transfer: create: %d local and %d remote descriptors: want the same number, 1..%d", len(local), len(remoteDescs), maxDescs)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, ErrClosed
	}
	p := a.peers[remote]
	if p == nil {
		return 0, fmt.Errorf("kvagent/transfer: create: %w %q (load its metadata first)", ErrUnknownRemote, remote)
	}
	if notif != nil && len(notif) > p.maxPayload {
		return 0, fmt.Errorf("kvagent/transfer: create: notification of %d bytes, peer %q accepts at most %d", len(notif), remote, p.maxPayload)
	}
	x := &xfer{op: op, remote: remote, local: append([]Desc(nil), local...), rdescs: append([]Desc(nil), remoteDescs...), locals: make([]*region, len(local))}
	if notif != nil {
		x.notif = append([]byte{}, notif...)
	}
	for i, d := range local {
		r := a.regions[d.Region]
		if r == nil {
			return 0, fmt.Errorf("kvagent/transfer: create: local descriptor %d: %w %d", i, ErrUnknownRegion, d.Region)
		}
		if err := checkRange(r.length, d.Offset, d.Len); err != nil {
			return 0, fmt.Errorf("kvagent/transfer: create: local descriptor %d (region %d): %w", i, d.Region, err)
		}
		x.locals[i] = r
		rd := remoteDescs[i]
		if rd.Len != d.Len {
			return 0, fmt.Errorf("kvagent/transfer: create: descriptor %d: local length %d, remote length %d", i, d.Len, rd.Len)
		}
		rr, ok := p.regions[rd.Region]
		if !ok {
			return 0, fmt.Errorf("kvagent/transfer: create: remote descriptor %d: %w %d in %q's metadata", i, ErrUnknownRegion, rd.Region, remote)
		}
		if rr.kind == VRAM {
			return 0, fmt.Errorf("kvagent/transfer: create: remote descriptor %d: %q's region %d is VRAM: %w", i, remote, rd.Region, ErrUnsupported)
		}
		if err := checkRange(rr.length, rd.Offset, rd.Len); err != nil {
			return 0, fmt.Errorf("kvagent/transfer: create: remote descriptor %d (%q region %d): %w", i, remote, rd.Region, err)
		}
	}
	a.nextXfer++
	a.xfers[a.nextXfer] = x
	return a.nextXfer, nil
}

func (a *tcpEndpoint) Post(h Xfer) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	x := a.xfers[h]
	if x == nil {
		a.mu.Unlock()
		return fmt.Errorf("kvagent/transfer: post %d: %w", h, ErrUnknownXfer)
	}
	if x.cur != nil && !x.cur.finished() {
		a.mu.Unlock()
		return fmt.Errorf("kvagent/transfer: post %d: %w", h, ErrRepostActive)
	}
	p := a.peers[x.remote]
	if p == nil {
		a.mu.Unlock()
		return fmt.Errorf("kvagent/transfer: post %d: %w %q (invalidated)", h, ErrUnknownRemote, x.remote)
	}
	for i, d := range x.local {
		if a.regions[d.Region] != x.locals[i] {
			a.mu.Unlock()
			return fmt.Errorf("kvagent/transfer: post %d: local descriptor %d: %w %d (deregistered)", h, i, ErrUnknownRegion, d.Region)
		}
	}
	at := newAttempt(a, p, x.op, a.nextWire.Add(1), x.notif)
	x.cur = at
	a.mu.Unlock()

	kind := itemRead
	if x.op == Write {
		kind = itemWrite
	}
	var items []*item
	for i, d := range x.local {
		rd := x.rdescs[i]
		for off := int64(0); off < d.Len; off += stripeBytes {
			n := min(stripeBytes, d.Len-off)
			items = append(items, &item{at: at, kind: kind, desc: uint32(i), region: rd.Region, roff: rd.Offset + off, local: x.locals[i], loff: d.Offset + off, n: n, grant: rd.Grant})
		}
	}
	at.pending = len(items)
	p.dispatch(at.id, items)
	return nil
}

func (a *tcpEndpoint) current(h Xfer) (*attempt, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	x := a.xfers[h]
	if x == nil {
		return nil, fmt.Errorf("kvagent/transfer: transfer %d: %w", h, ErrUnknownXfer)
	}
	return x.cur, nil
}

func (a *tcpEndpoint) Status(h Xfer) (State, error) {
	at, err := a.current(h)
	if err != nil {
		return Failed, err
	}
	if at == nil {
		return NotPosted, nil
	}
	return at.status()
}

func (a *tcpEndpoint) wait(ctx context.Context, h Xfer) (State, error) {
	at, err := a.current(h)
	if err != nil {
		return Failed, err
	}
	if at == nil {
		return NotPosted, fmt.Errorf("kvagent/transfer: wait on transfer %d: not posted", h)
	}
	select {
	case <-at.done:
		return at.status()
	case <-ctx.Done():
		return InProgress, fmt.Errorf("kvagent/transfer: wait on transfer %d: %w", h, ctx.Err())
	}
}

func (a *tcpEndpoint) Release(h Xfer) error {
	a.mu.Lock()
	x := a.xfers[h]
	delete(a.xfers, h)
	a.mu.Unlock()
	if x == nil {
		return fmt.Errorf("kvagent/transfer: release %d: %w", h, ErrUnknownXfer)
	}
	if x.cur != nil {
		x.cur.cancel()
	}
	return nil
}

func (a *tcpEndpoint) GetNotifs() map[string][][]byte {
	a.notifMu.Lock()
	defer a.notifMu.Unlock()
	got := a.notifs
	a.notifs = map[string][][]byte{}
	a.notifCount, a.notifBytes = 0, 0
	return got
}

// queueNotif keeps a notification from peer name until GetNotifs.
func (a *tcpEndpoint) queueNotif(from string, msg []byte) error {
	a.notifMu.Lock()
	defer a.notifMu.Unlock()
	if a.notifCount >= maxQueuedNotifs || a.notifBytes+len(msg) > maxQueuedNotifBytes {
		return fmt.Errorf("notification queue full (%d notifications, %d bytes not yet read by GetNotifs)", a.notifCount, a.notifBytes)
	}
	a.notifs[from] = append(a.notifs[from], msg)
	a.notifCount++
	a.notifBytes += len(msg)
	return nil
}

func (a *tcpEndpoint) GenNotif(remote string, msg []byte) error {
	a.mu.RLock()
	p := a.peers[remote]
	closed := a.closed
	a.mu.RUnlock()
	switch {
	case closed:
		return ErrClosed
	case p == nil:
		return fmt.Errorf("kvagent/transfer: notify: %w %q", ErrUnknownRemote, remote)
	case len(msg) > p.maxPayload:
		return fmt.Errorf("kvagent/transfer: notify: %d bytes, peer %q accepts at most %d", len(msg), remote, p.maxPayload)
	}
	at := newAttempt(a, p, 0, a.nextWire.Add(1), append([]byte{}, msg...))
	at.pending, at.notifQueued = 1, true
	p.dispatch(at.id, []*item{{at: at, kind: itemNotif}})
	<-at.done
	_, err := at.status()
	return err
}

func (a *tcpEndpoint) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	peers := a.peers
	a.peers = map[string]*peer{}
	var running []*attempt
	for _, x := range a.xfers {
		if x.cur != nil {
			running = append(running, x.cur)
		}
	}
	a.mu.Unlock()
	a.stop()
	err := a.ln.Close()
	for _, p := range peers {
		p.shutdown(ErrClosed)
	}
	for _, at := range running {
		at.cancel()
	}
	a.srvMu.Lock()
	for c := range a.srvConns {
		c.Close()
	}
	a.srvConns = nil
	a.srvMu.Unlock()
	a.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("kvagent/transfer: close listener: %w", err)
	}
	return nil
}

// attempt is one post of a request: its own wire id, so late frames of an
// earlier post can never be taken for this one.
type attempt struct {
	agent *tcpEndpoint
	peer  *peer
	op    Op // 0: a standalone notification (GenNotif)
	id    uint64
	notif []byte

	// landing is held shared while received bytes are copied into local
	// memory and exclusively by cancel, so after Release nothing lands.
	landing  sync.RWMutex
	canceled bool

	mu          sync.Mutex
	pending     int // items not yet settled
	err         error
	state       State
	notifQueued bool
	done        chan struct{}
}

func newAttempt(a *tcpEndpoint, p *peer, op Op, id uint64, notif []byte) *attempt {
	return &attempt{agent: a, peer: p, op: op, id: id, notif: notif, state: InProgress, done: make(chan struct{})}
}

func (at *attempt) status() (State, error) {
	at.mu.Lock()
	defer at.mu.Unlock()
	if at.state == Failed {
		return Failed, at.err
	}
	return at.state, nil
}

func (at *attempt) finished() bool {
	at.mu.Lock()
	defer at.mu.Unlock()
	return at.state != InProgress
}

// abandoned: a piece already failed (or the request was released), so
// pieces not yet sent are skipped.
func (at *attempt) abandoned() bool {
	at.mu.Lock()
	defer at.mu.Unlock()
	return at.err != nil
}

func (at *attempt) cancel() {
	at.landing.Lock()
	at.canceled = true
	at.landing.Unlock()
	at.mu.Lock()
	if at.err == nil && at.state == InProgress {
		at.err = ErrCanceled
	}
	at.mu.Unlock()
}

// settle records that one item finished (err == nil: it moved, or it was
// skipped after an earlier failure). The last one sends the notification,
// then finishes the attempt. Never called with a stream lock held.
func (at *attempt) settle(err error) {
	at.mu.Lock()
	if err != nil && at.err == nil {
		at.err = err
	}
	at.pending--
	if at.pending > 0 {
		at.mu.Unlock()
		return
	}
	if at.err == nil && at.notif != nil && !at.notifQueued {
		// NIXL's rule: the notification reaches the target after every
		// byte of the transfer has landed there.
		at.notifQueued = true
		at.pending = 1
		at.mu.Unlock()
		at.peer.dispatch(at.id, []*item{{at: at, kind: itemNotif}})
		return
	}
	if at.err != nil {
		at.state = Failed
	} else {
		at.state = Done
	}
	err = at.err
	if at.op != 0 {
		// Counted before anyone waiting can see the end.
		at.agent.metrics.finished(err)
	}
	close(at.done)
	at.mu.Unlock()
	if err != nil && at.op != 0 {
		at.agent.log.Debug("transfer failed", "peer", at.peer.name, "op", at.op, "err", err)
	}
}
