package connector

import (
	"testing"

	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
	"google.golang.org/protobuf/proto"
)

// FuzzValidateRequest decodes arbitrary bytes as each request type and
// checks that validation never panics and that whatever it accepts is
// within the limits the store relies on.
func FuzzValidateRequest(f *testing.F) {
	seed := func(kind uint8, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(kind, b)
	}
	seed(0, &pb.RegisterRequest{Namespace: "m", BlockBytes: 4096, TokensPerBlock: 16})
	seed(1, &pb.LookupRequest{Namespace: "m", Chain: []uint64{1, 2, 3}})
	seed(2, &pb.ReserveRequest{Namespace: "m", Hashes: []uint64{1, 1}})
	seed(3, &pb.CommitRequest{Namespace: "m", Slots: []int32{0, 1}, Blocks: []*pb.BlockMeta{
		{Hash: 1, TokenIds: []uint32{1, 2}}, {Hash: 2, Parent: 1, HasParent: true, TokenIds: []uint32{3, 4}, LoraName: "l"}}})
	seed(4, &pb.AbortRequest{Slots: []int32{3, -1}})
	seed(5, &pb.AcquireRequest{Namespace: "m", Chain: []uint64{9}, WithMeta: true})
	seed(6, &pb.ReleaseRequest{Slots: []int32{2, 2}})
	f.Add(uint8(3), []byte{0x0a, 0xff})
	limits := Limits{MaxChain: 16, SlotCount: 8, MaxNamespace: 64, MaxLoRAName: 32, MaxTokensPerBlk: 64}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		msgs := []proto.Message{&pb.RegisterRequest{}, &pb.LookupRequest{}, &pb.ReserveRequest{}, &pb.CommitRequest{},
			&pb.AbortRequest{}, &pb.AcquireRequest{}, &pb.ReleaseRequest{}, &pb.StatsRequest{}}
		m := msgs[int(kind)%len(msgs)]
		if proto.Unmarshal(data, m) != nil {
			return
		}
		if validateRequest(m, limits) != nil {
			return
		}
		inArena := func(slots []int32) {
			if len(slots) == 0 || len(slots) > limits.MaxChain {
				t.Fatalf("accepted %d slots", len(slots))
			}
			for _, s := range slots {
				if s < 0 || int(s) >= limits.SlotCount {
					t.Fatalf("accepted slot %d", s)
				}
			}
		}
		chain := func(ns string, hs []uint64) {
			if ns == "" || len(ns) > limits.MaxNamespace || len(hs) == 0 || len(hs) > limits.MaxChain {
				t.Fatalf("accepted namespace of %d bytes, chain of %d", len(ns), len(hs))
			}
		}
		switch r := m.(type) {
		case *pb.LookupRequest:
			chain(r.GetNamespace(), r.GetChain())
		case *pb.AcquireRequest:
			chain(r.GetNamespace(), r.GetChain())
		case *pb.ReserveRequest:
			chain(r.GetNamespace(), r.GetHashes())
		case *pb.AbortRequest:
			inArena(r.GetSlots())
		case *pb.ReleaseRequest:
			inArena(r.GetSlots())
		case *pb.CommitRequest:
			inArena(r.GetSlots())
			if len(r.GetBlocks()) != len(r.GetSlots()) {
				t.Fatalf("accepted %d blocks for %d slots", len(r.GetBlocks()), len(r.GetSlots()))
			}
			for _, b := range r.GetBlocks() {
				if n := len(b.GetTokenIds()); n == 0 || n > limits.MaxTokensPerBlk || len(b.GetLoraName()) > limits.MaxLoRAName {
					t.Fatalf("accepted block %v", b)
				}
			}
		}
	})
}
