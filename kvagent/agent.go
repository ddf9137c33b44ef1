// Package kvagent is the `kvgate kvagent` daemon: it wires the tiered
// block store (kvagent/store), the engine connector on a Unix socket
// (kvagent/connector), the residency KV events (kvagent/residency) and
// peer fetches over the transfer engine (kvagent/transfer).
//
// Start order matters: the residency publisher exists before the store
// opens, so the disk blocks the store recovers are announced as the new
// stream's first batches; the connector serves only once the store is
// open. Close runs the other way: the connector drains (slots held by
// clients are given back), then the store closes (its host blocks are
// announced as removed), then the publisher flushes and closes.
//
// See kvagent/README.md for how an engine's KV connector uses it.
package kvagent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/kvgate/kvgate/kvagent/agentconfig"
	"github.com/kvgate/kvgate/kvagent/connector"
	"github.com/kvgate/kvgate/kvagent/residency"
	"github.com/kvgate/kvgate/kvagent/store"
	"github.com/kvgate/kvgate/kvagent/transfer"
	"github.com/prometheus/client_golang/prometheus"
)

// Agent is one running kvagent.
type Agent struct {
	cfg   agentconfig.Config
	log   *slog.Logger
	st    *store.Store
	pub   *residency.Publisher // nil without kvagent.events
	conn  *connector.Server
	connL net.Listener

	// Peer side (nil without kvagent.peer).
	xfer       transfer.Endpoint
	arena      []byte // the shm arena, mapped for the transfer engine
	region     uint32
	peerSrv    *connector.Server
	peerL      net.Listener
	peerFetchM *peerFetchMetrics
	// peerTLS is kvagent.peer.tls loaded (nil = plaintext): it serves
	// and dials both peer channels, control gRPC and transfer engine.
	peerTLS *tls.Config
	// reads authorizes the transfer engine's inbound reads once the
	// arena is registered and the peer server exists (nil before).
	reads atomic.Pointer[readGate]

	// fills are the peer fills in flight (peerfill.go), one per chain.
	fills fills

	wg       sync.WaitGroup
	mu       sync.Mutex
	peers    map[string]*peer // by name
	closed   bool
	serveErr chan error
}

// Start opens the store and starts serving. reg receives every metric
// (store, transfer, connector); nil registers nothing.
func Start(cfg agentconfig.Config, reg prometheus.Registerer, log *slog.Logger) (_ *Agent, err error) {
	if log == nil {
		log = slog.Default()
	}
	if !cfg.Enabled() {
		return nil, errors.New("kvagent: the kvagent section has no socket")
	}
	a := &Agent{cfg: cfg, log: log, peers: map[string]*peer{}, serveErr: make(chan error, 2)}
	defer func() {
		if err != nil {
			a.abandon()
		}
	}()
	if cfg.Events != "" {
		if a.pub, err = residency.New(residency.Config{Endpoint: cfg.Events, ReplayEndpoint: cfg.Replay, Logger: log.With("part", "residency"), Registerer: reg}); err != nil {
			return nil, err
		}
	}
	scfg := store.Config{
		BlockBytes: cfg.BlockSize(),
		HostBlocks: cfg.HostBlocks,
		ShmPath:    cfg.ShmPath,
		DiskBlocks: cfg.Disk.Blocks,
		DiskDir:    cfg.Disk.Dir,
		DirectIO:   cfg.Disk.DirectIO,
		AdmitAfter: cfg.Disk.AdmitAfter,
		DiskQueue:  cfg.Disk.Queue,
		Registerer: reg,
		Logger:     log.With("part", "store"),
	}
	if a.pub != nil {
		scfg.OnChange = a.pub.OnChange
	}
	if a.st, err = store.Open(scfg); err != nil {
		return nil, fmt.Errorf("kvagent: %w", err)
	}
	metrics := connector.NewMetrics(reg)
	limits := connector.Limits{MaxChain: cfg.MaxChain}
	eq := cfg.Quotas.Engine
	ccfg := connector.Config{
		Store: a.st, Slots: cfg.HostBlocks, Limits: limits, Metrics: metrics, Logger: log.With("part", "connector"),
		Quota: connector.Quota{PerConnection: eq.PerConnection, PerClient: eq.PerProcess, HoldTimeout: eq.HoldTimeout.D(),
			ConfigKey: "kvagent.quotas.engine", ClientKey: "per_process"},
	}
	if cfg.Peer.Listen != "" {
		// An engine's lookup or onboard that misses locally is filled
		// from the peers that hold the chain (peerfill.go).
		ccfg.PeerFill = a.fillFromPeers
	}
	if a.conn, err = connector.NewServer(ccfg); err != nil {
		return nil, err
	}
	if a.connL, err = connector.ListenUnix(cfg.Socket); err != nil {
		return nil, err
	}
	if a.peerTLS, err = cfg.Peer.TLS.Load(); err != nil {
		return nil, fmt.Errorf("kvagent: peer.%w", err)
	}
	if cfg.Peer.Listen != "" {
		if err = a.startPeer(reg, metrics, limits); err != nil {
			return nil, err
		}
	}
	a.serve(a.conn, a.connL)
	for _, p := range cfg.Peers {
		if err = a.AddPeer(p.Name, p.Addr); err != nil {
			return nil, err
		}
	}
	log.Info("kvagent serving", "socket", cfg.Socket, "shm", a.st.ShmPath(), "block_bytes", a.st.BlockBytes(),
		"host_blocks", cfg.HostBlocks, "disk_blocks", cfg.Disk.Blocks, "events", a.EventsEndpoint(), "replay", a.ReplayEndpoint(), "peer", a.PeerAddr())
	return a, nil
}

func (a *Agent) serve(s *connector.Server, l net.Listener) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := s.Serve(l); err != nil {
			a.serveErr <- err
		}
	}()
}

// listenTransfer opens kvagent.peer.transfer_listen and returns the
// address peers are to dial for it: advertise_host (or the listen host) at
// the bound port. A listener on every address (":5701", "0.0.0.0:…",
// "[::]:…") names no address a peer could dial, so it needs
// advertise_host.
func listenTransfer(p agentconfig.Peer) (net.Listener, string, error) {
	host, _, err := net.SplitHostPort(p.TransferListen)
	if err != nil {
		return nil, "", fmt.Errorf("kvagent.peer.transfer_listen %q: %w", p.TransferListen, err)
	}
	if p.AdvertiseHost != "" {
		host = p.AdvertiseHost
	} else if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return nil, "", fmt.Errorf("kvagent.peer.transfer_listen %q listens on every address, which peers cannot dial: set kvagent.peer.advertise_host (or --advertise-host) to this node's address (the Helm chart passes the pod IP)", p.TransferListen)
	}
	l, err := net.Listen("tcp", p.TransferListen)
	if err != nil {
		return nil, "", fmt.Errorf("kvagent: transfer listen %s: %w", p.TransferListen, err)
	}
	return l, net.JoinHostPort(host, fmt.Sprint(l.Addr().(*net.TCPAddr).Port)), nil
}

// startPeer maps the arena for the transfer engine, starts it, and serves
// the peer subset of the connector on kvagent.peer.listen.
func (a *Agent) startPeer(reg prometheus.Registerer, m *connector.Metrics, limits connector.Limits) error {
	size := a.cfg.HostBlocks * a.st.BlockBytes()
	f, err := os.OpenFile(a.st.ShmPath(), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("kvagent: peer: open arena: %w", err)
	}
	a.arena, err = syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	f.Close()
	if err != nil {
		return fmt.Errorf("kvagent: peer: map arena: %w", err)
	}
	xl, advertise, err := listenTransfer(a.cfg.Peer)
	if err != nil {
		return err
	}
	if a.xfer, err = transfer.NewTCP(transfer.TCPConfig{
		Name:       a.cfg.Name,
		Listener:   xl,
		Advertise:  advertise,
		Streams:    a.cfg.Peer.Streams,
		TLS:        a.peerTLS,
		ReadAccess: a.authorizeRead,
		// Peers only ever read this arena (FetchFromPeer); a write would
		// land in slots engines onboard from. Nothing here reads
		// notifications, so none are queued either.
		InboundWrites: false,
		InboundNotifs: false,
		Registerer:    reg,
		Logger:        a.log.With("part", "transfer"),
	}); err != nil {
		xl.Close()
		return fmt.Errorf("kvagent: peer transfer engine: %w", err)
	}
	if a.region, err = a.xfer.RegisterMem(transfer.Region{Kind: transfer.DRAM, Addr: a.arena}); err != nil {
		return fmt.Errorf("kvagent: peer: register arena: %w", err)
	}
	a.peerFetchM = newPeerFetchMetrics(reg)
	pq := a.cfg.Quotas.Peer
	rules := make([]connector.NamespaceRule, len(a.cfg.Peer.Namespaces))
	for i, r := range a.cfg.Peer.Namespaces {
		rules[i] = connector.NamespaceRule{Peer: r.Peer, Namespaces: r.Allow}
	}
	if a.peerSrv, err = connector.NewServer(connector.Config{
		Store: a.st, Slots: a.cfg.HostBlocks, Limits: limits, Metrics: m, Peer: true, Name: a.cfg.Name,
		PeerInfo: func() ([]byte, uint32, error) {
			md, err := a.xfer.LocalMetadata()
			return md, a.region, err
		},
		Logger: a.log.With("part", "peer"),
		TLS:    a.peerTLS,
		Quota: connector.Quota{PerConnection: pq.PerConnection, PerClient: pq.PerPeer, Total: pq.Total, HoldTimeout: pq.HoldTimeout.D(),
			ConfigKey: "kvagent.quotas.peer", ClientKey: "per_peer"},
		PeerNamespaces: rules,
	}); err != nil {
		return err
	}
	a.reads.Store(&readGate{srv: a.peerSrv, region: a.region, blockBytes: int64(a.st.BlockBytes())})
	if a.peerL, err = net.Listen("tcp", a.cfg.Peer.Listen); err != nil {
		return fmt.Errorf("kvagent: peer listen %s: %w", a.cfg.Peer.Listen, err)
	}
	a.serve(a.peerSrv, a.peerL)
	return nil
}

// SocketPath is the connector's Unix socket.
func (a *Agent) SocketPath() string { return a.cfg.Socket }

// EventsEndpoint is the bound residency PUB endpoint, "" without one.
func (a *Agent) EventsEndpoint() string {
	if a.pub == nil {
		return ""
	}
	return a.pub.Endpoint()
}

// ReplayEndpoint is the bound residency replay endpoint, "" without one.
func (a *Agent) ReplayEndpoint() string {
	if a.pub == nil {
		return ""
	}
	return a.pub.ReplayEndpoint()
}

// PeerAddr is the bound peer control address, "" without one.
func (a *Agent) PeerAddr() string {
	if a.peerL == nil {
		return ""
	}
	return a.peerL.Addr().String()
}

// Ready reports whether the agent serves: the store is open and the
// connector accepts connections.
func (a *Agent) Ready() error {
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return errors.New("kvagent: closing")
	}
	select {
	case err := <-a.serveErr:
		a.serveErr <- err
		return fmt.Errorf("kvagent: a listener stopped: %w", err)
	default:
	}
	c, err := net.Dial("unix", a.cfg.Socket)
	if err != nil {
		return fmt.Errorf("kvagent: connector socket: %w", err)
	}
	return c.Close()
}

// Close drains and stops everything (see the package comment for the
// order). ctx bounds the connector's drain.
func (a *Agent) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	peers := a.peers
	a.peers = map[string]*peer{}
	a.mu.Unlock()
	a.conn.Stop(ctx)
	if a.peerSrv != nil {
		a.peerSrv.Stop(ctx)
	}
	a.wg.Wait()
	var errs []error
	for _, p := range peers {
		errs = append(errs, p.close())
	}
	errs = append(errs, a.abandon())
	return errors.Join(errs...)
}

// abandon closes what Start opened, in reverse order (also on a failed
// Start).
func (a *Agent) abandon() error {
	var errs []error
	// Listeners a stopped gRPC server already closed report an error
	// here that means nothing.
	for _, l := range []net.Listener{a.connL, a.peerL} {
		if l != nil {
			_ = l.Close()
		}
	}
	if a.xfer != nil {
		errs = append(errs, a.xfer.Close())
	}
	if a.arena != nil {
		errs = append(errs, syscall.Munmap(a.arena))
		a.arena = nil
	}
	if a.st != nil {
		errs = append(errs, a.st.Close())
	}
	if a.pub != nil {
		errs = append(errs, a.pub.Close())
	}
	_ = os.Remove(a.cfg.Socket)
	return errors.Join(errs...)
}
