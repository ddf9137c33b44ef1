package kvagent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvgate/kvgate/kvagent/connector"
	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
	"github.com/kvgate/kvgate/kvagent/store"
	"github.com/kvgate/kvgate/kvagent/transfer"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// peer is a remote kvagent: its control service (the connector's peer
// subset over TCP) and, once loaded, its transfer metadata.
type peer struct {
	name string
	addr string
	conn *grpc.ClientConn
	rpc  pb.ConnectorClient

	loaded     bool   // transfer metadata loaded (guarded by Agent.mu)
	remote     string // the peer's transfer endpoint name
	region     uint32 // the peer's arena region handle
	blockBytes int
	slots      int
}

func (p *peer) close() error { return p.conn.Close() }

// AddPeer makes a remote kvagent (its kvagent.peer.listen address)
// fetchable by name. Connecting is lazy; adding a name again replaces it.
// With kvagent.peer.tls the control channel is mutual TLS: the peer's
// certificate must be signed by ca_file and name the host or IP of addr.
func (a *Agent) AddPeer(name, addr string) error {
	creds := insecure.NewCredentials()
	if a.peerTLS != nil {
		creds = credentials.NewTLS(a.peerTLS)
	}
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(connector.DefaultMaxMessageBytes), grpc.MaxCallSendMsgSize(connector.DefaultMaxMessageBytes)),
	)
	if err != nil {
		return fmt.Errorf("kvagent: peer %s at %s: %w", name, addr, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if old := a.peers[name]; old != nil {
		old.close()
	}
	a.peers[name] = &peer{name: name, addr: addr, conn: conn, rpc: pb.NewConnectorClient(conn)}
	return nil
}

// peerInfo returns the peer, its transfer metadata loaded.
func (a *Agent) peerInfo(ctx context.Context, name string) (*peer, error) {
	if a.xfer == nil {
		return nil, errors.New("kvagent: peer fetch needs kvagent.peer (a transfer engine)")
	}
	a.mu.Lock()
	p := a.peers[name]
	loaded := p != nil && p.loaded
	a.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("kvagent: unknown peer %q", name)
	}
	if loaded {
		return p, nil
	}
	info, err := p.rpc.PeerInfo(ctx, &pb.PeerInfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("kvagent: peer %s: info: %w", name, err)
	}
	if int(info.GetBlockBytes()) != a.st.BlockBytes() {
		return nil, fmt.Errorf("kvagent: peer %s: blocks of %d bytes, ours are %d", name, info.GetBlockBytes(), a.st.BlockBytes())
	}
	remote, err := a.xfer.LoadRemoteMetadata(info.GetTransferMetadata())
	if err != nil {
		return nil, fmt.Errorf("kvagent: peer %s: transfer metadata: %w", name, err)
	}
	a.mu.Lock()
	p.remote, p.region, p.blockBytes, p.slots, p.loaded = remote, info.GetRegion(), int(info.GetBlockBytes()), int(info.GetSlotCount()), true
	a.mu.Unlock()
	return p, nil
}

// FetchFromPeer copies the longest prefix of chain that peer holds (host
// or disk tier) into this agent's host tier, and returns its length. The
// peer pins the blocks (Acquire, promoting disk blocks to its host arena)
// and returns their slots and metas; this agent reserves local slots, reads
// the peer's slots into them with the transfer engine, commits them under
// the same keys and metas (so they are announced as this node's host
// blocks), and lets the peer release its pins. Blocks already held here
// are skipped. Failures leave nothing half-stored: reserved slots are
// aborted, remote pins released.
func (a *Agent) FetchFromPeer(ctx context.Context, peerName, ns string, chain []uint64) (n int, err error) {
	start := time.Now()
	moved := 0 // blocks actually transferred (not already held here)
	defer func() { a.peerFetchM.observe(peerName, moved, a.st.BlockBytes(), err, time.Since(start)) }()
	if len(chain) == 0 {
		return 0, nil
	}
	if len(chain) > a.cfg.MaxChain {
		return 0, fmt.Errorf("kvagent: fetch of %d blocks, more than max_chain %d", len(chain), a.cfg.MaxChain)
	}
	p, err := a.peerInfo(ctx, peerName)
	if err != nil {
		return 0, err
	}
	acq, err := p.rpc.Acquire(ctx, &pb.AcquireRequest{Namespace: ns, Chain: chain, WithMeta: true})
	if err != nil {
		return 0, fmt.Errorf("kvagent: peer %s: acquire: %w", peerName, err)
	}
	remoteSlots := acq.GetSlots()
	// The peer's transfer engine lets us read these slots, and only
	// these, with the capability of this Acquire.
	var grant transfer.Grant
	copy(grant[:], acq.GetCapability())
	defer func() {
		if len(remoteSlots) == 0 {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rerr := p.rpc.Release(rctx, &pb.ReleaseRequest{Slots: remoteSlots}); rerr != nil {
			// The peer gives the pins back when our connection closes.
			a.log.Warn("peer release failed", "peer", peerName, "err", rerr)
		}
	}()
	if len(remoteSlots) > 0 && len(acq.GetCapability()) != len(grant) {
		return 0, fmt.Errorf("kvagent: peer %s: acquire returned a capability of %d bytes, want %d", peerName, len(acq.GetCapability()), len(grant))
	}
	if len(acq.GetMetas()) != len(remoteSlots) || len(remoteSlots) > len(chain) {
		return 0, fmt.Errorf("kvagent: peer %s: acquire returned %d slots and %d metas for %d blocks", peerName, len(remoteSlots), len(acq.GetMetas()), len(chain))
	}
	// Skip what is already here: only the blocks after our own resident
	// prefix are worth a transfer.
	have := len(a.st.Lookup(ns, chain[:len(remoteSlots)]))
	want := remoteSlots[have:]
	if len(want) == 0 {
		return len(remoteSlots), nil
	}
	metas := acq.GetMetas()[have:]
	ks := make([]store.Key, len(want))
	ms := make([]store.Meta, len(want))
	for i, m := range metas {
		if m.GetHash() != chain[have+i] {
			return have, fmt.Errorf("kvagent: peer %s: block %d meta names hash %#x, asked %#x", peerName, have+i, m.GetHash(), chain[have+i])
		}
		ks[i] = store.Key{Namespace: ns, Hash: m.GetHash()}
		ms[i] = store.Meta{Parent: m.GetParent(), HasParent: m.GetHasParent(), TokenIDs: m.GetTokenIds(), LoRAName: m.GetLoraName()}
	}
	local, err := a.st.Reserve(ks)
	if err != nil {
		return have, fmt.Errorf("kvagent: fetch: reserve %d local slots: %w", len(ks), err)
	}
	committed := false
	defer func() {
		if !committed {
			a.st.Abort(local)
		}
	}()
	bb := int64(a.st.BlockBytes())
	localDescs := make([]transfer.Desc, len(want))
	remoteDescs := make([]transfer.Desc, len(want))
	for i := range want {
		if want[i] < 0 || int(want[i]) >= p.slots {
			return have, fmt.Errorf("kvagent: peer %s: slot %d outside its arena of %d", peerName, want[i], p.slots)
		}
		localDescs[i] = transfer.Desc{Region: a.region, Offset: int64(local[i]) * bb, Len: bb}
		remoteDescs[i] = transfer.Desc{Region: p.region, Offset: int64(want[i]) * bb, Len: bb, Grant: grant}
	}
	x, err := a.xfer.CreateXfer(transfer.Read, localDescs, p.remote, remoteDescs, nil)
	if err != nil {
		return have, fmt.Errorf("kvagent: fetch from %s: %w", peerName, err)
	}
	defer a.xfer.Release(x)
	if err := a.xfer.Post(x); err != nil {
		return have, fmt.Errorf("kvagent: fetch from %s: post: %w", peerName, err)
	}
	if err := transfer.Wait(ctx, a.xfer, x); err != nil {
		return have, fmt.Errorf("kvagent: fetch from %s: %w", peerName, err)
	}
	// Commit checksums the bytes as they are now in our arena; the TCP
	// backend checksums every frame on the wire.
	if err := a.st.Commit(ks, ms, local); err != nil {
		return have, fmt.Errorf("kvagent: fetch from %s: commit: %w", peerName, err)
	}
	committed = true
	moved = len(want)
	return len(remoteSlots), nil
}

// peerFetchMetrics count peer fetches.
type peerFetchMetrics struct {
	fetches *prometheus.CounterVec
	blocks  *prometheus.CounterVec
	bytes   *prometheus.CounterVec
	seconds *prometheus.HistogramVec
}

func newPeerFetchMetrics(reg prometheus.Registerer) *peerFetchMetrics {
	m := &peerFetchMetrics{
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_kvagent_peer_fetches_total", Help: "Chain fetches from peer kvagents, by peer and result (ok, error)."}, []string{"peer", "result"}),
		blocks:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_kvagent_peer_fetched_blocks_total", Help: "Blocks transferred from peers (those already held here are not fetched), by peer."}, []string{"peer"}),
		bytes:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_kvagent_peer_fetched_bytes_total", Help: "Bytes transferred from peers, by peer."}, []string{"peer"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvgate_kvagent_peer_fetch_duration_seconds", Help: "Time of one chain fetch, by peer.", Buckets: prometheus.ExponentialBuckets(100e-6, 4, 10)}, []string{"peer"}),
	}
	if reg != nil {
		reg.MustRegister(m.fetches, m.blocks, m.bytes, m.seconds)
	}
	return m
}

func (m *peerFetchMetrics) observe(peer string, n, blockBytes int, err error, d time.Duration) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.fetches.WithLabelValues(peer, result).Inc()
	m.blocks.WithLabelValues(peer).Add(float64(n))
	m.bytes.WithLabelValues(peer).Add(float64(n * blockBytes))
	m.seconds.WithLabelValues(peer).Observe(d.Seconds())
}

// readGate decides the transfer engine's inbound reads: a read of the
// arena is let through when the capability it carries names an Acquire,
// on the peer listener, by the same peer (its certificate identity), that
// holds every slot the read touches (connector.Server.AuthorizeRead).
type readGate struct {
	srv        *connector.Server
	region     uint32
	blockBytes int64
}

// authorizeRead is the transfer engine's ReadAccess.
func (a *Agent) authorizeRead(r transfer.ReadRequest) (func(), error) {
	g := a.reads.Load()
	if g == nil {
		return nil, errors.New("kvagent: not serving peers yet")
	}
	if r.Region != g.region {
		return nil, fmt.Errorf("kvagent: region %d is not the arena (%d)", r.Region, g.region)
	}
	// The transfer engine checked the range against the region.
	first, last := r.Offset/g.blockBytes, (r.Offset+r.Len-1)/g.blockBytes
	slots := make([]store.Slot, 0, last-first+1)
	for s := first; s <= last; s++ {
		slots = append(slots, store.Slot(s))
	}
	return g.srv.AuthorizeRead(connector.Capability(r.Grant), connector.PeerIdentity(r.PeerCert), slots)
}
