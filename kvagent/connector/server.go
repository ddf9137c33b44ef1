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
// with the transfer engine.
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
	"os"
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
	// listener's mutual TLS; grpc adds the "h2" ALPN it needs).
	TLS *tls.Config
}

// Server implements connectorpb.ConnectorServer on a store.
type Server struct {
	pb.UnimplementedConnectorServer
	cfg Config
	st  *store.Store
	l   *ledger
	log *slog.Logger
	g   *grpc.Server
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
	s := &Server{cfg: cfg, st: cfg.Store, l: newLedger(cfg.Store), log: cfg.Logger}
	tracker := &connTracker{l: s.l, onClose: func(id uint64, aborted, released int) {
		s.log.Info("connector client left holding slots; given back", "conn", id, "aborted", aborted, "released", released)
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
	return s, nil
}

// ListenUnix listens on a Unix socket at path, replacing a stale socket
// file left by a previous process (a live one is refused), readable and
// writable by the owner and group only: the socket is the arena's key.
func ListenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("connector: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("connector: %s: another kvagent is serving it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("connector: removing stale socket: %w", err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("connector: listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("connector: chmod %s: %w", path, err)
	}
	return l, nil
}

// Serve serves l until Stop.
func (s *Server) Serve(l net.Listener) error { return s.g.Serve(l) }

// Stop drains: in-flight requests finish (until ctx ends), then every
// connection closes and its slots are given back.
func (s *Server) Stop(ctx context.Context) {
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
	if s.cfg.Peer && !peerAllowed[info.FullMethod] {
		return nil, status.Errorf(codes.PermissionDenied, "%s: not served to peers", info.FullMethod)
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
	return h(ctx, req)
}

func (s *Server) Register(_ context.Context, r *pb.RegisterRequest) (*pb.RegisterResponse, error) {
	bb := uint64(s.st.BlockBytes())
	if r.GetBlockBytes() != 0 && r.GetBlockBytes() != bb {
		return nil, status.Errorf(codes.FailedPrecondition, "block_bytes: engine blocks of %d bytes, this kvagent's slots hold %d (check kvagent.model / block_bytes)", r.GetBlockBytes(), bb)
	}
	s.log.Info("engine registered", "namespace", r.GetNamespace(), "tokens_per_block", r.GetTokensPerBlock())
	return &pb.RegisterResponse{
		ShmPath:    s.st.ShmPath(),
		BlockBytes: bb,
		SlotCount:  uint32(s.cfg.Slots),
		MaxChain:   uint32(s.cfg.Limits.MaxChain),
	}, nil
}

func (s *Server) Lookup(_ context.Context, r *pb.LookupRequest) (*pb.LookupResponse, error) {
	tiers := s.st.Lookup(r.GetNamespace(), r.GetChain())
	out := make([]pb.Tier, len(tiers))
	for i, t := range tiers {
		out[i] = tierToPB(t)
	}
	return &pb.LookupResponse{Tiers: out}, nil
}

func (s *Server) Reserve(ctx context.Context, r *pb.ReserveRequest) (*pb.ReserveResponse, error) {
	ks := keys(r.GetNamespace(), r.GetHashes())
	slots, err := s.st.Reserve(ks)
	if err != nil {
		// Every slot pinned by in-flight offloads and onboards: the
		// engine should skip this offload (it never waits for the agent).
		return nil, status.Errorf(codes.ResourceExhausted, "reserve %d slots: %v", len(ks), err)
	}
	s.l.addReserved(connID(ctx), slots)
	return &pb.ReserveResponse{Slots: slotsToPB(slots)}, nil
}

func (s *Server) Commit(ctx context.Context, r *pb.CommitRequest) (*pb.CommitResponse, error) {
	slots := slotsFromPB(r.GetSlots())
	id := connID(ctx)
	if bad, ok := s.l.takeReserved(id, slots); !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "slots: slot %d is not reserved by this connection", bad)
	}
	ks := make([]store.Key, len(r.GetBlocks()))
	metas := make([]store.Meta, len(r.GetBlocks()))
	for i, b := range r.GetBlocks() {
		ks[i] = store.Key{Namespace: r.GetNamespace(), Hash: b.GetHash()}
		metas[i] = metaFromPB(b)
	}
	if err := s.st.Commit(ks, metas, slots); err != nil {
		s.l.putReserved(id, slots)
		return nil, status.Errorf(codes.InvalidArgument, "commit: %v", err)
	}
	return &pb.CommitResponse{}, nil
}

func (s *Server) Abort(ctx context.Context, r *pb.AbortRequest) (*pb.AbortResponse, error) {
	slots := slotsFromPB(r.GetSlots())
	if bad, ok := s.l.takeReserved(connID(ctx), slots); !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "slots: slot %d is not reserved by this connection", bad)
	}
	s.st.Abort(slots)
	return &pb.AbortResponse{}, nil
}

func (s *Server) Acquire(ctx context.Context, r *pb.AcquireRequest) (*pb.AcquireResponse, error) {
	slots, err := s.st.Acquire(r.GetNamespace(), r.GetChain())
	if err != nil && len(slots) == 0 {
		return nil, status.Errorf(codes.ResourceExhausted, "acquire: %v", err)
	}
	s.l.addAcquired(connID(ctx), slots)
	resp := &pb.AcquireResponse{Slots: slotsToPB(slots)}
	if r.GetWithMeta() && len(slots) > 0 {
		metas, err := s.metas(r.GetNamespace(), r.GetChain()[:len(slots)])
		if err != nil {
			s.l.takeAcquired(connID(ctx), slots)
			s.st.Release(slots)
			return nil, status.Errorf(codes.Internal, "acquire: meta: %v", err)
		}
		resp.Metas = metas
	}
	return resp, nil
}

func (s *Server) Release(ctx context.Context, r *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	slots := slotsFromPB(r.GetSlots())
	if bad, ok := s.l.takeAcquired(connID(ctx), slots); !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "slots: slot %d is not acquired by this connection", bad)
	}
	s.st.Release(slots)
	return &pb.ReleaseResponse{}, nil
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

// TierFromPB maps the wire tier back to the store's.
func TierFromPB(t pb.Tier) (store.Tier, bool) {
	switch t {
	case pb.Tier_TIER_HOST:
		return store.TierHost, true
	case pb.Tier_TIER_DISK:
		return store.TierDisk, true
	}
	return 0, false
}
