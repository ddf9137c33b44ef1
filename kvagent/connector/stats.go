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

// metas returns the metas of the blocks in slots, which the caller has
// pinned (Acquire) for chain: a peer fetch commits them under the same
// metas.
func (s *Server) metas(slots []store.Slot, chain []uint64) ([]*pb.BlockMeta, error) {
	hashes, ms, err := s.st.PinnedMetas(slots)
	if err != nil {
		return nil, err
	}
	out := make([]*pb.BlockMeta, len(slots))
	for i, h := range hashes {
		if h != chain[i] {
			return nil, fmt.Errorf("block %d: slot %d holds %#x, asked %#x", i, slots[i], h, chain[i])
		}
		out[i] = metaToPB(h, ms[i])
	}
	return out, nil
}
