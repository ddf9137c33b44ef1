package connector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
	"github.com/kvgate/kvgate/kvagent/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Registration is what an engine tells the kvagent when it connects.
type Registration struct {
	Namespace      string
	BlockBytes     int // 0: accept the agent's
	TokensPerBlock int
}

// Client is an engine's side of the connector: the control channel and a
// mapping of the agent's arena. Safe for concurrent use; the caller owns
// the slots it reserves or acquires until it commits, aborts or releases
// them.
type Client struct {
	conn       *grpc.ClientConn
	rpc        pb.ConnectorClient
	arena      []byte // the shm file, mapped shared read-write
	blockBytes int
	slots      int
	maxChain   int

	// Onboard's Releases wait here to ride on the next Acquire
	// (onboard_release.go).
	rel releaseQueue
}

// Block is one block to offload: its engine hash, meta and KV bytes.
type Block struct {
	Hash      uint64
	Parent    uint64
	HasParent bool
	TokenIDs  []uint32
	LoRAName  string
	Data      []byte // BlockBytes long
}

// Dial connects to the kvagent's Unix socket at path, registers, and maps
// the arena it names.
func Dial(ctx context.Context, path string, reg Registration) (*Client, error) {
	conn, err := grpc.NewClient("passthrough:///"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(DefaultMaxMessageBytes), grpc.MaxCallSendMsgSize(DefaultMaxMessageBytes)),
	)
	if err != nil {
		return nil, fmt.Errorf("connector dial %s: %w", path, err)
	}
	c := &Client{conn: conn, rpc: pb.NewConnectorClient(conn)}
	resp, err := c.rpc.Register(ctx, &pb.RegisterRequest{
		Namespace: reg.Namespace, BlockBytes: uint64(max(reg.BlockBytes, 0)), TokensPerBlock: uint32(max(reg.TokensPerBlock, 0)),
	}, grpc.WaitForReady(true))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("connector register at %s: %w", path, err)
	}
	c.blockBytes, c.slots, c.maxChain = int(resp.GetBlockBytes()), int(resp.GetSlotCount()), int(resp.GetMaxChain())
	if c.blockBytes <= 0 || c.slots <= 0 {
		conn.Close()
		return nil, fmt.Errorf("connector register at %s: agent reports %d slots of %d bytes", path, c.slots, c.blockBytes)
	}
	if c.arena, err = mapArena(resp.GetShmPath(), c.blockBytes*c.slots); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

func mapArena(path string, size int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("connector: open arena: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("connector: arena: %w", err)
	}
	if fi.Size() < int64(size) {
		return nil, fmt.Errorf("connector: arena %s is %d bytes, the agent announced %d", path, fi.Size(), size)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("connector: mmap arena %s: %w", path, err)
	}
	return b, nil
}

// Close sends the Release of onboarded slots still waiting for one,
// unmaps the arena and closes the connection; the agent gives back any
// slot still held.
func (c *Client) Close() error {
	errs := []error{c.ReleaseOnboarded(context.Background())}
	if c.arena != nil {
		errs = append(errs, syscall.Munmap(c.arena))
		c.arena = nil
	}
	errs = append(errs, c.conn.Close())
	return errors.Join(errs...)
}

// BlockBytes is the size of one slot.
func (c *Client) BlockBytes() int { return c.blockBytes }

// Slots is the arena's slot count.
func (c *Client) Slots() int { return c.slots }

// MaxChain is the most blocks one request may name.
func (c *Client) MaxChain() int { return c.maxChain }

// Slot is the arena memory of slot s (shared with the agent: write it only
// between Reserve and Commit, read it only between Acquire and Release).
func (c *Client) Slot(s int32) ([]byte, error) {
	if s < 0 || int(s) >= c.slots {
		return nil, fmt.Errorf("connector: slot %d outside the arena [0, %d)", s, c.slots)
	}
	off := int(s) * c.blockBytes
	return c.arena[off : off+c.blockBytes : off+c.blockBytes], nil
}

// Lookup returns the tiers of the longest prefix of chain the agent holds.
func (c *Client) Lookup(ctx context.Context, ns string, chain []uint64) ([]pb.Tier, error) {
	r, err := c.rpc.Lookup(ctx, &pb.LookupRequest{Namespace: ns, Chain: chain})
	if err != nil {
		return nil, err
	}
	if len(r.GetTiers()) > len(chain) {
		return nil, fmt.Errorf("connector lookup: %d tiers for a chain of %d", len(r.GetTiers()), len(chain))
	}
	return r.GetTiers(), nil
}

// Reserve pins empty slots for hashes.
func (c *Client) Reserve(ctx context.Context, ns string, hashes []uint64) ([]int32, error) {
	r, err := c.rpc.Reserve(ctx, &pb.ReserveRequest{Namespace: ns, Hashes: hashes})
	if err != nil {
		return nil, err
	}
	if err := c.checkSlots(r.GetSlots()); err != nil || len(r.GetSlots()) != len(hashes) {
		// Unusable: give them back rather than hold them until Close.
		_ = c.Abort(context.WithoutCancel(ctx), r.GetSlots())
		return nil, errors.Join(err, fmt.Errorf("connector reserve: agent returned %d slots for %d blocks", len(r.GetSlots()), len(hashes)))
	}
	return r.GetSlots(), nil
}

// Commit makes reserved, written slots resident under blocks' keys; the
// agent checksums each slot.
func (c *Client) Commit(ctx context.Context, ns string, blocks []Block, slots []int32) error {
	return c.CommitSummed(ctx, ns, blocks, slots, nil)
}

// CommitSummed is Commit with each slot's checksum (the store's chunked
// XXH3 of the bytes written, parallel to blocks) computed by the engine
// while it copied them in (store.CopySum), sparing the agent a pass over every
// slot. nil sums: the agent computes them.
func (c *Client) CommitSummed(ctx context.Context, ns string, blocks []Block, slots []int32, sums []uint64) error {
	req := &pb.CommitRequest{Namespace: ns, Slots: slots, Blocks: make([]*pb.BlockMeta, len(blocks)), Sums: sums}
	for i, b := range blocks {
		req.Blocks[i] = &pb.BlockMeta{Hash: b.Hash, Parent: b.Parent, HasParent: b.HasParent, TokenIds: b.TokenIDs, LoraName: b.LoRAName}
	}
	_, err := c.rpc.Commit(ctx, req)
	return err
}

// Abort gives reserved slots back unwritten.
func (c *Client) Abort(ctx context.Context, slots []int32) error {
	if len(slots) == 0 {
		return nil
	}
	_, err := c.rpc.Abort(ctx, &pb.AbortRequest{Slots: slots})
	return err
}

// Acquire pins the resident prefix of chain and returns its slots.
func (c *Client) Acquire(ctx context.Context, ns string, chain []uint64) ([]int32, error) {
	return c.acquire(ctx, ns, chain, nil)
}

// acquire is Acquire releasing slots first (AcquireRequest.release).
func (c *Client) acquire(ctx context.Context, ns string, chain []uint64, release []int32) ([]int32, error) {
	r, err := c.rpc.Acquire(ctx, &pb.AcquireRequest{Namespace: ns, Chain: chain, Release: release})
	if err != nil {
		return nil, err
	}
	if err := c.checkSlots(r.GetSlots()); err != nil || len(r.GetSlots()) > len(chain) {
		_ = c.Release(context.WithoutCancel(ctx), r.GetSlots())
		return nil, errors.Join(err, fmt.Errorf("connector acquire: agent returned %d slots for a chain of %d", len(r.GetSlots()), len(chain)))
	}
	return r.GetSlots(), nil
}

// Release unpins acquired slots.
func (c *Client) Release(ctx context.Context, slots []int32) error {
	if len(slots) == 0 {
		return nil
	}
	_, err := c.rpc.Release(ctx, &pb.ReleaseRequest{Slots: slots})
	return err
}

// Stats returns the agent's store counters.
func (c *Client) Stats(ctx context.Context) (*pb.StatsResponse, error) {
	return c.rpc.Stats(ctx, &pb.StatsRequest{})
}

// Offload stores blocks: Reserve, copy each block's Data into its slot
// (checksumming it on the way, store.CopySum), CommitSummed (Abort on any
// failure after Reserve).
func (c *Client) Offload(ctx context.Context, ns string, blocks []Block) error {
	if len(blocks) == 0 {
		return nil
	}
	hashes := make([]uint64, len(blocks))
	for i, b := range blocks {
		if len(b.Data) != c.blockBytes {
			return fmt.Errorf("connector offload: block %d has %d bytes, slots hold %d", i, len(b.Data), c.blockBytes)
		}
		hashes[i] = b.Hash
	}
	slots, err := c.Reserve(ctx, ns, hashes)
	if err != nil {
		return err
	}
	// One pass over each block: copied into its slot and checksummed
	// from cache as it goes, so the agent need not read the slots again.
	sums := make([]uint64, len(slots))
	for i, s := range slots {
		dst, _ := c.Slot(s) // checked by Reserve
		sums[i] = store.CopySum(dst, blocks[i].Data)
	}
	if err := c.CommitSummed(ctx, ns, blocks, slots, sums); err != nil {
		return errors.Join(err, c.Abort(context.WithoutCancel(ctx), slots))
	}
	return nil
}

// Onboard copies the resident prefix of chain into dst (one BlockBytes
// buffer per block, len(dst) >= len(chain)) and returns how many blocks it
// copied: Acquire, copy, Release. The Release rides on the next Onboard's
// Acquire, or goes alone within onboardReleaseDelay (onboard_release.go).
func (c *Client) Onboard(ctx context.Context, ns string, chain []uint64, dst [][]byte) (int, error) {
	release := c.rel.take()
	if len(release) > c.maxChain { // more than one request may name
		if err := c.releaseChunked(ctx, release); err != nil {
			c.rel.fail(err)
		}
		release = nil
	}
	slots, err := c.acquire(ctx, ns, chain, release)
	if err != nil && len(release) > 0 {
		if !c.releaseFailed(release, err) {
			return 0, err
		}
		slots, err = c.acquire(ctx, ns, chain, nil)
	}
	if err != nil {
		return 0, err
	}
	for i, s := range slots {
		src, _ := c.Slot(s)
		copy(dst[i], src)
	}
	c.rel.add(slots, c.releaseNow)
	return len(slots), nil
}

func (c *Client) checkSlots(slots []int32) error {
	for _, s := range slots {
		if s < 0 || int(s) >= c.slots {
			return fmt.Errorf("connector: agent returned slot %d outside the arena [0, %d)", s, c.slots)
		}
	}
	return nil
}
