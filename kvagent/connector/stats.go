package connector

import (
	"context"
	"fmt"

	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
	"github.com/kvgate/kvgate/kvagent/store"
)

func (s *Server) Stats(context.Context, *pb.StatsRequest) (*pb.StatsResponse, error) {
	st := s.st.Stats()
	tier := func(t pb.Tier, ts store.TierStats) *pb.TierStats {
		return &pb.TierStats{
			Tier: t, Blocks: uint64(max(ts.Blocks, 0)), Bytes: uint64(max(ts.Bytes, 0)),
			Hits: ts.Hits, Evictions: ts.Evictions,
		}
	}
	return &pb.StatsResponse{
		Tiers:            []*pb.TierStats{tier(pb.Tier_TIER_HOST, st.Host), tier(pb.Tier_TIER_DISK, st.Disk)},
		AdmissionRejects: st.AdmissionRejections,
		DroppedOffloads:  st.Host.OffloadsDropped + st.Disk.OffloadsDropped,
		SlotCount:        uint32(s.cfg.Slots),
		BlockBytes:       uint64(s.st.BlockBytes()),
		Misses:           st.Misses,
	}, nil
}

// metas returns the metas of chain's blocks, which the caller has pinned
// (Acquire): a peer fetch commits them under the same metas. The store
// hands metas out only with the data, so each block is copied once into
// a scratch buffer here; peer fetches are rare next to engine onboards.
func (s *Server) metas(ns string, chain []uint64) ([]*pb.BlockMeta, error) {
	buf := make([]byte, s.st.BlockBytes())
	out := make([]*pb.BlockMeta, len(chain))
	for i, h := range chain {
		_, m, err := s.st.Get(store.Key{Namespace: ns, Hash: h}, buf)
		if err != nil {
			return nil, fmt.Errorf("block %d (%#x): %w", i, h, err)
		}
		out[i] = metaToPB(h, m)
	}
	return out, nil
}
