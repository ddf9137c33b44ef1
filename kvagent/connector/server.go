// Package connector is the kvagent's engine connector: a gRPC service over
// a Unix socket for control, with the KV bytes in the store's shared-memory
// arena (an engine process on the node maps the arena file and reads and
// writes slots directly; nothing but slot numbers crosses the socket).
//
// Offload: Reserve(keys) → slots; the engine writes the blocks into them;
// Commit(keys, metas, slots) makes them resident (or Abort gives them back).
// Onboard: Lookup(chain) → resident prefix and tiers; Acquire(chain) pins
// that prefix in host memory (promoting disk blocks) → slots; the engine
// copies them out; Release unpins. Slots a connection still holds when it
// closes are given back (ledger.go).
//
// The same service, restricted to Lookup/Acquire/Release/Stats/PeerInfo,
// serves peer kvagents over TCP (Config.Peer): they read the pinned slots
// with the transfer engine, each read checked against the capability their
// Acquire returned (AuthorizeRead).
//
// Who may do what: an engine connection serves the namespace it
// registered and its sub-namespaces (ownership.go); a peer, the namespaces
// Config.PeerNamespaces lets its certificate fetch (all without rules);
// a plaintext peer listener answers loopback clients only. Every
// connection, client and listener holds at most its Quota of slots, each
// hold for at most Quota.HoldTimeout (quota.go, ledger.go).
//
// kvagent/README.md maps these calls onto vLLM's KVConnectorBase_V1 and an
// LMCache-style client.
package connector

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
	"github.com/kvgate/kvgate/kvagent/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// DefaultMaxMessageBytes bounds one request or response. A Commit of
// 4096 blocks of 64 tokens is about 1.3 MB on the wire.
const DefaultMaxMessageBytes = 8 << 20

// Config configures a Server.
type Config struct {
	Store *store.Store
	// Slots is the arena's slot count (the store's host capacity).
	Slots  int
	Limits Limits // zero fields take DefaultLimits
	// MaxMessageBytes bounds gRPC messages both ways (default 8 MiB).
	MaxMessageBytes int
	// Peer restricts the service to what a peer kvagent may call (no
	// Register/Reserve/Commit/Abort: a peer never writes this arena).
	Peer bool
	// Name and PeerInfo answer PeerInfo (peer servers only).
	Name     string
	PeerInfo func() (metadata []byte, region uint32, err error)
	// Metrics: kvgate_kvagent_connector_* (nil = none). Two servers in one
	// process (engine + peer) share one Metrics.
	Metrics *Metrics
	Logger  *slog.Logger
	// TLS, when set, serves gRPC over TLS with this config (the peer
	// listener's mutual TLS; grpc adds the "h2" ALPN it needs). A peer
	// server without it answers loopback clients only.
	TLS *tls.Config
	// Quota bounds what clients hold pinned, and for how long (zero: no
	// bounds).
	Quota Quota
	// PeerNamespaces (peer servers only), when not empty, lists which
	// peers may look up and fetch which namespaces; a peer no rule names
	// gets none. Empty: every peer that may connect may fetch any.
	PeerNamespaces []NamespaceRule
	// PeerFill (engine servers only; nil: none) is called by Lookup and
	// Acquire when the store's resident prefix of the request's chain
	// (after the quota) is shorter than the chain: it may fetch the rest
	// from peer kvagents into the store, and returns once whatever it
	// could fetch is resident (the kvagent's fillFromPeers, bounded by
	// kvagent.peer.fetch_timeout). The namespace is the request's, which
	// the connection may use (checked before). A peer server never calls
	// it: what a peer asks for is served from this node only, so fetches
	// never cascade from agent to agent.
	PeerFill func(ctx context.Context, namespace string, chain []uint64, resident int)
}

// Server implements connectorpb.ConnectorServer on a store.
type Server struct {
	pb.UnimplementedConnectorServer
	cfg      Config
	st       *store.Store
	l        *ledger
	log      *slog.Logger
	g        *grpc.Server
	listener string // "engine" or "peer", in metrics and logs
	stopReap chan struct{}
	reapDone chan struct{}
	stopOnce sync.Once
}

// NewServer checks cfg and builds the gRPC server (not yet serving).
func NewServer(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("connector: no store")
	}
	if cfg.Slots <= 0 {
		return nil, fmt.Errorf("connector: slot count %d: the connector needs a host arena", cfg.Slots)
	}
	d := DefaultLimits()
	if cfg.Limits.MaxChain <= 0 {
		cfg.Limits.MaxChain = d.MaxChain
	}
	if cfg.Limits.MaxNamespace <= 0 {
		cfg.Limits.MaxNamespace = d.MaxNamespace
	}
	if cfg.Limits.MaxLoRAName <= 0 {
		cfg.Limits.MaxLoRAName = d.MaxLoRAName
	}
	if cfg.Limits.MaxTokensPerBlk <= 0 {
		cfg.Limits.MaxTokensPerBlk = d.MaxTokensPerBlk
	}
	cfg.Limits.SlotCount = cfg.Slots
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := checkRules(cfg.PeerNamespaces); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, st: cfg.Store, l: newLedger(cfg.Store, cfg.Quota, cfg.Peer), log: cfg.Logger, listener: "engine"}
	if cfg.Peer {
		s.listener = "peer"
	}
	tracker := &connTracker{l: s.l, onClose: func(id uint64, reserved, acquired []store.Slot) {
		if len(reserved)+len(acquired) == 0 {
			return
		}
		s.giveBack(reserved, acquired)
		s.log.Info("connector client left holding slots; given back", "conn", id, "aborted", len(reserved), "released", len(acquired))
	}}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(cfg.MaxMessageBytes),
		grpc.StatsHandler(tracker),
		grpc.ChainUnaryInterceptor(s.intercept),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	s.g = grpc.NewServer(opts...)
	pb.RegisterConnectorServer(s.g, s)
	if cfg.Quota.HoldTimeout > 0 {
		s.stopReap, s.reapDone = make(chan struct{}), make(chan struct{})
		go s.reap(min(max(cfg.Quota.HoldTimeout/4, 10*time.Millisecond), time.Second))
	}
	return s, nil
}

// giveBack returns slots a client no longer holds to the store.
func (s *Server) giveBack(reserved, acquired []store.Slot) {
	if len(reserved) > 0 {
		s.st.Abort(reserved)
	}
	if len(acquired) > 0 {
		s.st.Release(acquired)
	}
}

// reap gives back holds past Quota.HoldTimeout, every interval.
func (s *Server) reap(interval time.Duration) {
	defer close(s.reapDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopReap:
			return
		case now := <-t.C:
			reserved, acquired := s.l.expire(now)
			if len(reserved)+len(acquired) == 0 {
				continue
			}
			s.giveBack(reserved, acquired)
			s.cfg.Metrics.expired(s.listener, len(reserved), len(acquired))
			s.log.Warn("connector holds older than the hold timeout given back", "listener", s.listener,
				"timeout", s.cfg.Quota.HoldTimeout, "reserved", len(reserved), "acquired", len(acquired))
		}
	}
}

// Serve serves l until Stop.
func (s *Server) Serve(l net.Listener) error { return s.g.Serve(l) }

// Stop drains: in-flight requests finish (until ctx ends), then every
// connection closes and its slots are given back.
func (s *Server) Stop(ctx context.Context) {
	defer s.stopOnce.Do(func() {
		if s.stopReap != nil {
			close(s.stopReap)
			<-s.reapDone
		}
	})
	done := make(chan struct{})
	go func() {
		s.g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.g.Stop()
		<-done
	}
}

// Pinned reports the slots clients hold reserved and acquired.
func (s *Server) Pinned() (reserved, acquired int) { return s.l.pinned() }

// peerAllowed lists the methods a peer listener serves.
var peerAllowed = map[string]bool{
	pb.Connector_Lookup_FullMethodName:   true,
	pb.Connector_Acquire_FullMethodName:  true,
	pb.Connector_Release_FullMethodName:  true,
	pb.Connector_Stats_FullMethodName:    true,
	pb.Connector_PeerInfo_FullMethodName: true,
}

// intercept validates every request, restricts peer listeners, and
// records request counts and latency.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := s.handle(ctx, req, info, h)
	if m := s.cfg.Metrics; m != nil {
		m.observe(info.FullMethod, s.cfg.Peer, status.Code(err), time.Since(start))
	}
	return resp, err
}

func (s *Server) handle(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	c := s.l.enter(connID(ctx), func() client { return clientOf(ctx) })
	if s.cfg.Peer {
		// Defence in depth: configuration refuses a plaintext peer
		// listener off loopback, and TLS refuses clients without a
		// certificate of the CA before any request.
		switch {
		case s.cfg.TLS == nil && !c.loopback:
			return nil, status.Error(codes.PermissionDenied, "plaintext peer listener: serves loopback clients only (configure kvagent.peer.tls)")
		case s.cfg.TLS != nil && c.identity == "":
			return nil, status.Error(codes.Unauthenticated, "peer listener: no verified client certificate")
		case !peerAllowed[info.FullMethod]:
			return nil, status.Errorf(codes.PermissionDenied, "%s: not served to peers", info.FullMethod)
		}
	}
	if !s.cfg.Peer && info.FullMethod == pb.Connector_PeerInfo_FullMethodName {
		return nil, status.Error(codes.Unimplemented, "PeerInfo: served on the peer listener only")
	}
	m, ok := req.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "%s: request is %T", info.FullMethod, req)
	}
	if err := validateRequest(m, s.cfg.Limits); err != nil {
		return nil, err
	}
	if err := s.mayUse(connID(ctx), c, m); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) Register(ctx context.Context, r *pb.RegisterRequest) (*pb.RegisterResponse, error) {
	bb := uint64(s.st.BlockBytes())
	if r.GetBlockBytes() != 0 && r.GetBlockBytes() != bb {
		return nil, status.Errorf(codes.FailedPrecondition, "block_bytes: engine blocks of %d bytes, this kvagent's slots hold %d (check kvagent.model / block_bytes)", r.GetBlockBytes(), bb)
	}
	if err := s.l.register(connID(ctx), r.GetNamespace()); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	s.log.Info("engine registered", "namespace", r.GetNamespace(), "tokens_per_block", r.GetTokensPerBlock())
	return &pb.RegisterResponse{
		ShmPath:    s.st.ShmPath(),
		BlockBytes: bb,
		SlotCount:  uint32(s.cfg.Slots),
		MaxChain:   uint32(s.cfg.Limits.MaxChain),
	}, nil
}

func (s *Server) Lookup(ctx context.Context, r *pb.LookupRequest) (*pb.LookupResponse, error) {
	tiers := s.st.Lookup(r.GetNamespace(), r.GetChain())
	if s.fillFromPeers(ctx, r.GetNamespace(), r.GetChain(), len(tiers)) {
		tiers = s.st.Lookup(r.GetNamespace(), r.GetChain())
	}
	out := make([]pb.Tier, len(tiers))
	for i, t := range tiers {
		out[i] = tierToPB(t)
	}
	return &pb.LookupResponse{Tiers: out}, nil
}

func (s *Server) Reserve(ctx context.Context, r *pb.ReserveRequest) (*pb.ReserveResponse, error) {
	id := connID(ctx)
	ks := keys(r.GetNamespace(), r.GetHashes())
	// All or nothing: a partial offload is no use to the engine.
	admitted, err := s.l.admit(id, len(ks), true)
	if err != nil {
		s.cfg.Metrics.quotaRefused(s.listener, err)
		return nil, status.Errorf(codes.ResourceExhausted, "reserve %d slots: %v", len(ks), err)
	}
	slots, err := s.st.Reserve(ks)
	if err != nil {
		s.l.refund(id, admitted)
		// Every slot pinned by in-flight offloads and onboards: the
		// engine should skip this offload (it never waits for the agent).
		return nil, status.Errorf(codes.ResourceExhausted, "reserve %d slots: %v", len(ks), err)
	}
	if _, err := s.l.grant(id, slots, false, admitted); err != nil {
		s.st.Abort(slots)
		return nil, status.Errorf(codes.Internal, "reserve: %v", err)
	}
	return &pb.ReserveResponse{Slots: slotsToPB(slots)}, nil
}

func (s *Server) Commit(ctx context.Context, r *pb.CommitRequest) (*pb.CommitResponse, error) {
	slots := slotsFromPB(r.GetSlots())
	id := connID(ctx)
	if bad, ok := s.l.take(id, slots, false); !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "slots: slot %d is not reserved by this connection%s", bad, s.expiryHint())
	}
	ks := make([]store.Key, len(r.GetBlocks()))
	metas := make([]store.Meta, len(r.GetBlocks()))
	for i, b := range r.GetBlocks() {
		ks[i] = store.Key{Namespace: r.GetNamespace(), Hash: b.GetHash()}
		metas[i] = metaFromPB(b)
	}
	commit := s.st.Commit
	if sums := r.GetSums(); len(sums) > 0 { // checkCommit: one per block
		commit = func(ks []store.Key, metas []store.Meta, slots []store.Slot) error {
			return s.st.CommitSummed(ks, metas, slots, sums)
		}
	}
	if err := commit(ks, metas, slots); err != nil {
		s.l.putReserved(id, slots)
		return nil, status.Errorf(codes.InvalidArgument, "commit: %v", err)
	}
	return &pb.CommitResponse{}, nil
}

func (s *Server) Abort(ctx context.Context, r *pb.AbortRequest) (*pb.AbortResponse, error) {
	slots := slotsFromPB(r.GetSlots())
	if bad, ok := s.l.take(connID(ctx), slots, false); !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "slots: slot %d is not reserved by this connection%s", bad, s.expiryHint())
	}
	s.st.Abort(slots)
	return &pb.AbortResponse{}, nil
}

func (s *Server) Acquire(ctx context.Context, r *pb.AcquireRequest) (*pb.AcquireResponse, error) {
	id := connID(ctx)
	if rel := slotsFromPB(r.GetRelease()); len(rel) > 0 {
		// An earlier onboard's Release riding on this Acquire: applied
		// first, so the quota below no longer counts those slots.
		if bad, ok := s.l.take(id, rel, true); !ok {
			return nil, status.Errorf(codes.FailedPrecondition, "release: slot %d is not acquired by this connection%s", bad, s.expiryHint())
		}
		s.st.Release(rel)
	}
	chain := r.GetChain()
	// The prefix ends where the quota does: fewer blocks onboarded, the
	// rest recomputed, never a stall.
	admitted, err := s.l.admit(id, len(chain), false)
	if err != nil {
		s.cfg.Metrics.quotaRefused(s.listener, err)
		return nil, status.Errorf(codes.ResourceExhausted, "acquire: %v", err)
	}
	chain = chain[:admitted]
	s.fillFromPeers(ctx, r.GetNamespace(), chain, len(s.st.Lookup(r.GetNamespace(), chain)))
	var slots []store.Slot
	if s.cfg.Peer {
		// Blocks leaving the node are checked first (an engine on the
		// node maps the arena read-write; what it scribbled stays here).
		slots, err = s.st.AcquireVerified(r.GetNamespace(), chain)
	} else {
		slots, err = s.st.Acquire(r.GetNamespace(), chain)
	}
	if err != nil && len(slots) == 0 {
		s.l.refund(id, admitted)
		return nil, status.Errorf(codes.ResourceExhausted, "acquire: %v", err)
	}
	resp := &pb.AcquireResponse{Slots: slotsToPB(slots)}
	if r.GetWithMeta() && len(slots) > 0 {
		metas, err := s.metas(slots, chain)
		if err != nil {
			s.l.refund(id, admitted)
			s.st.Release(slots)
			return nil, status.Errorf(codes.Internal, "acquire: meta: %v", err)
		}
		resp.Metas = metas
	}
	tok, err := s.l.grant(id, slots, true, admitted)
	if err != nil {
		s.st.Release(slots)
		return nil, status.Errorf(codes.Internal, "acquire: %v", err)
	}
	if tok != (Capability{}) {
		resp.Capability = tok[:]
	}
	return resp, nil
}

func (s *Server) Release(ctx context.Context, r *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	slots := slotsFromPB(r.GetSlots())
	if bad, ok := s.l.take(connID(ctx), slots, true); !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "slots: slot %d is not acquired by this connection%s", bad, s.expiryHint())
	}
	s.st.Release(slots)
	return &pb.ReleaseResponse{}, nil
}

// fillFromPeers lets PeerFill complete a chain the store holds only the
// first resident blocks of, and reports whether it was called. Lookup
// stays free of side effects on what the engine sees: a filled block is
// one the store could have held anyway (it is announced as this node's
// host block, like an offload).
func (s *Server) fillFromPeers(ctx context.Context, ns string, chain []uint64, resident int) bool {
	if s.cfg.Peer || s.cfg.PeerFill == nil || resident >= len(chain) {
		return false
	}
	s.cfg.PeerFill(ctx, ns, chain, resident)
	return true
}

// expiryHint completes "not reserved/acquired by this connection" when
// holds expire.
func (s *Server) expiryHint() string {
	if s.cfg.Quota.HoldTimeout <= 0 {
		return ""
	}
	return fmt.Sprintf(" (or held longer than the hold timeout, %s, and given back)", s.cfg.Quota.HoldTimeout)
}

// AuthorizeRead lets a transfer-engine read of slots go ahead if cap
// names a live Acquire of this (peer) server, made by the peer with
// certificate identity identity (PeerIdentity; "" on plaintext), that
// holds every slot. The slots stay pinned until release is called, even
// if the Acquire is released meanwhile.
func (s *Server) AuthorizeRead(cap Capability, identity string, slots []store.Slot) (release func(), err error) {
	if !s.cfg.Peer {
		return nil, errors.New("connector: reads are authorized on the peer listener only")
	}
	return s.l.authorizeRead(cap, identity, slots)
}

func (s *Server) PeerInfo(context.Context, *pb.PeerInfoRequest) (*pb.PeerInfoResponse, error) {
	if s.cfg.PeerInfo == nil {
		return nil, status.Error(codes.Unavailable, "PeerInfo: no transfer engine configured")
	}
	md, region, err := s.cfg.PeerInfo()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "PeerInfo: %v", err)
	}
	return &pb.PeerInfoResponse{
		Name:             s.cfg.Name,
		TransferMetadata: md,
		Region:           region,
		BlockBytes:       uint64(s.st.BlockBytes()),
		SlotCount:        uint32(s.cfg.Slots),
	}, nil
}

func keys(ns string, hs []uint64) []store.Key {
	ks := make([]store.Key, len(hs))
	for i, h := range hs {
		ks[i] = store.Key{Namespace: ns, Hash: h}
	}
	return ks
}

func slotsToPB(s []store.Slot) []int32 {
	out := make([]int32, len(s))
	for i, v := range s {
		out[i] = int32(v)
	}
	return out
}

func slotsFromPB(s []int32) []store.Slot {
	out := make([]store.Slot, len(s))
	for i, v := range s {
		out[i] = store.Slot(v)
	}
	return out
}

func metaFromPB(b *pb.BlockMeta) store.Meta {
	return store.Meta{Parent: b.GetParent(), HasParent: b.GetHasParent(), TokenIDs: b.GetTokenIds(), LoRAName: b.GetLoraName()}
}

func metaToPB(h uint64, m store.Meta) *pb.BlockMeta {
	return &pb.BlockMeta{Hash: h, Parent: m.Parent, HasParent: m.HasParent, TokenIds: m.TokenIDs, LoraName: m.LoRAName}
}

func tierToPB(t store.Tier) pb.Tier {
	switch t {
	case store.TierHost:
		return pb.Tier_TIER_HOST
	case store.TierDisk:
		return pb.Tier_TIER_DISK
	}
	return pb.Tier_TIER_UNSPECIFIED
}
