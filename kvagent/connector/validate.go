package connector

import (
	"fmt"
	"unicode/utf8"

	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Limits bounds what one request may ask; every request is checked
// against them before it reaches the store.
type Limits struct {
	MaxChain        int // blocks per request
	SlotCount       int // arena slots: a slot outside [0, SlotCount) is refused
	MaxNamespace    int // bytes
	MaxLoRAName     int // bytes
	MaxTokensPerBlk int // token ids per block in a Commit
}

// DefaultLimits are the limits used when Config leaves them 0.
func DefaultLimits() Limits {
	return Limits{MaxChain: 4096, MaxNamespace: 1024, MaxLoRAName: 1024, MaxTokensPerBlk: 1 << 16}
}

// validateRequest checks one decoded request against l. The error is a
// gRPC InvalidArgument status naming the field (and element) at fault.
func validateRequest(req proto.Message, l Limits) error {
	var err error
	switch r := req.(type) {
	case *pb.RegisterRequest:
		err = checkNamespace(r.GetNamespace(), l)
	case *pb.LookupRequest:
		err = checkChain("chain", r.GetNamespace(), r.GetChain(), l, false)
	case *pb.AcquireRequest:
		err = checkChain("chain", r.GetNamespace(), r.GetChain(), l, false)
		if err == nil && len(r.GetRelease()) > 0 {
			err = checkSlots("release", r.GetRelease(), l, false) // as ReleaseRequest's
		}
	case *pb.ReserveRequest:
		err = checkChain("hashes", r.GetNamespace(), r.GetHashes(), l, true)
	case *pb.CommitRequest:
		err = checkCommit(r, l)
	case *pb.AbortRequest:
		err = checkSlots("slots", r.GetSlots(), l, true)
	case *pb.ReleaseRequest:
		// The same slot may be released once per Acquire that pinned it.
		err = checkSlots("slots", r.GetSlots(), l, false)
	case *pb.StatsRequest, *pb.PeerInfoRequest:
	default:
		err = fmt.Errorf("unknown request type %T", req)
	}
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

func checkNamespace(ns string, l Limits) error {
	switch {
	case ns == "":
		return fmt.Errorf("namespace: empty (want the model name, plus any LoRA or cache salt)")
	case len(ns) > l.MaxNamespace:
		return fmt.Errorf("namespace: %d bytes, more than %d", len(ns), l.MaxNamespace)
	case !utf8.ValidString(ns):
		return fmt.Errorf("namespace: not valid UTF-8")
	}
	return nil
}

// checkChain: a chain is a prefix order, so duplicates are allowed in
// Lookup/Acquire (the store simply stops matching); a Reserve must name
// each key once, since each gets its own slot.
func checkChain(field, ns string, hs []uint64, l Limits, distinct bool) error {
	if err := checkNamespace(ns, l); err != nil {
		return err
	}
	switch {
	case len(hs) == 0:
		return fmt.Errorf("%s: empty", field)
	case len(hs) > l.MaxChain:
		return fmt.Errorf("%s: %d blocks, more than the limit %d", field, len(hs), l.MaxChain)
	}
	if distinct {
		seen := make(map[uint64]int, len(hs))
		for i, h := range hs {
			if j, dup := seen[h]; dup {
				return fmt.Errorf("%s[%d]: hash %#x repeats %s[%d]", field, i, h, field, j)
			}
			seen[h] = i
		}
	}
	return nil
}

func checkSlots(field string, slots []int32, l Limits, distinct bool) error {
	switch {
	case len(slots) == 0:
		return fmt.Errorf("%s: empty", field)
	case len(slots) > l.MaxChain:
		return fmt.Errorf("%s: %d slots, more than the limit %d", field, len(slots), l.MaxChain)
	}
	var seen map[int32]int
	if distinct {
		seen = make(map[int32]int, len(slots))
	}
	for i, s := range slots {
		if s < 0 || int(s) >= l.SlotCount {
			return fmt.Errorf("%s[%d]: slot %d outside the arena [0, %d)", field, i, s, l.SlotCount)
		}
		if distinct {
			if j, dup := seen[s]; dup {
				return fmt.Errorf("%s[%d]: slot %d repeats %s[%d]", field, i, s, field, j)
			}
			seen[s] = i
		}
	}
	return nil
}

func checkCommit(r *pb.CommitRequest, l Limits) error {
	if err := checkNamespace(r.GetNamespace(), l); err != nil {
		return err
	}
	bs := r.GetBlocks()
	if len(bs) != len(r.GetSlots()) {
		return fmt.Errorf("slots: %d slots for %d blocks", len(r.GetSlots()), len(bs))
	}
	if err := checkSlots("slots", r.GetSlots(), l, true); err != nil {
		return err
	}
	if n := len(r.GetSums()); n != 0 && n != len(bs) {
		return fmt.Errorf("sums: %d sums for %d blocks (one per block, or none)", n, len(bs))
	}
	seen := make(map[uint64]int, len(bs))
	tokens := -1
	for i, b := range bs {
		if j, dup := seen[b.GetHash()]; dup {
			return fmt.Errorf("blocks[%d].hash: %#x repeats blocks[%d]", i, b.GetHash(), j)
		}
		seen[b.GetHash()] = i
		n := len(b.GetTokenIds())
		switch {
		case n == 0:
			return fmt.Errorf("blocks[%d].token_ids: empty (KV events carry each block's tokens)", i)
		case n > l.MaxTokensPerBlk:
			return fmt.Errorf("blocks[%d].token_ids: %d tokens, more than %d", i, n, l.MaxTokensPerBlk)
		case tokens >= 0 && n != tokens:
			return fmt.Errorf("blocks[%d].token_ids: %d tokens, blocks[0] has %d (one block size per request)", i, n, tokens)
		case len(b.GetLoraName()) > l.MaxLoRAName:
			return fmt.Errorf("blocks[%d].lora_name: %d bytes, more than %d", i, len(b.GetLoraName()), l.MaxLoRAName)
		case !utf8.ValidString(b.GetLoraName()):
			return fmt.Errorf("blocks[%d].lora_name: not valid UTF-8", i)
		case !b.GetHasParent() && b.GetParent() != 0:
			return fmt.Errorf("blocks[%d].parent: %#x set without has_parent", i, b.GetParent())
		}
		tokens = n
	}
	return nil
}
