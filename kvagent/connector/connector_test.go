package connector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/poll"

	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
	"github.com/kvgate/kvgate/kvagent/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const testBlockBytes = 4096

type fixture struct {
	st   *store.Store
	srv  *Server
	sock string
}

// startServer runs a connector on a real Unix socket over a real store
// (host arena in a temp file).
func startServer(t *testing.T, slots int, peer bool) *fixture {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(store.Config{BlockBytes: testBlockBytes, HostBlocks: slots, ShmPath: filepath.Join(dir, "arena")})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(Config{Store: st, Slots: slots, Limits: Limits{MaxChain: 8}, Peer: peer, Metrics: NewMetrics(nil)})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "c.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() {
		srv.Stop(context.Background())
		st.Close()
	})
	return &fixture{st: st, srv: srv, sock: sock}
}

func dial(t *testing.T, f *fixture) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, f.sock, Registration{Namespace: "m", BlockBytes: testBlockBytes, TokensPerBlock: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// chainBlocks makes n chained blocks with data derived from their hash.
func chainBlocks(n int, base uint64) []Block {
	out := make([]Block, n)
	for i := range out {
		h := base + uint64(i)
		b := Block{Hash: h, TokenIDs: []uint32{uint32(i), 1, 2, 3}, Data: bytes.Repeat([]byte{byte(h), byte(h >> 8), 0xa5}, testBlockBytes/3+1)[:testBlockBytes]}
		if i > 0 {
			b.Parent, b.HasParent = h-1, true
		}
		out[i] = b
	}
	return out
}

func TestOffloadThenOnboardReturnsTheBytes(t *testing.T) {
	f := startServer(t, 16, false)
	c := dial(t, f)
	ctx := context.Background()
	if c.BlockBytes() != testBlockBytes || c.Slots() != 16 || c.MaxChain() != 8 {
		t.Fatalf("registration: %d bytes, %d slots, max chain %d", c.BlockBytes(), c.Slots(), c.MaxChain())
	}
	blocks := chainBlocks(3, 100)
	if err := c.Offload(ctx, "m", blocks); err != nil {
		t.Fatal(err)
	}
	chain := []uint64{100, 101, 102, 103}
	tiers, err := c.Lookup(ctx, "m", chain)
	if err != nil {
		t.Fatal(err)
	}
	if len(tiers) != 3 {
		t.Fatalf("lookup: %d blocks resident, want 3", len(tiers))
	}
	for i, tr := range tiers {
		if tr != pb.Tier_TIER_HOST {
			t.Errorf("block %d on %v, want host", i, tr)
		}
	}
	// Another namespace is not this connection's to look at.
	if _, err := c.Lookup(ctx, "other", chain); status.Code(err) != codes.PermissionDenied {
		t.Errorf("lookup in namespace other: %v, want PermissionDenied", err)
	}
	dst := make([][]byte, len(chain))
	for i := range dst {
		dst[i] = make([]byte, testBlockBytes)
	}
	n, err := c.Onboard(ctx, "m", chain, dst)
	if err != nil || n != 3 {
		t.Fatalf("onboard: %d blocks, %v; want 3", n, err)
	}
	for i := range n {
		if !bytes.Equal(dst[i], blocks[i].Data) {
			t.Errorf("block %d: bytes differ from what was offloaded", i)
		}
	}
	// The same bytes through the store's copy path: the engine really
	// wrote the shared arena.
	got := make([]byte, testBlockBytes)
	if _, m, err := f.st.Get(store.Key{Namespace: "m", Hash: 101}, got); err != nil || !bytes.Equal(got, blocks[1].Data) || m.Parent != 100 || !m.HasParent {
		t.Errorf("store copy of block 101: err %v, equal %v, meta %+v", err, bytes.Equal(got, blocks[1].Data), m)
	}
	if err := c.ReleaseOnboarded(ctx); err != nil {
		t.Fatal(err)
	}
	if r, a := f.srv.Pinned(); r != 0 || a != 0 {
		t.Errorf("after offload and onboard: %d reserved, %d acquired slots still held", r, a)
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetTiers()[0].GetBlocks() != 3 || st.GetSlotCount() != 16 {
		t.Errorf("stats: %v", st)
	}
}

// Offload sends the sums it computed while copying (CommitSummed): the
// store keeps them, so the blocks pass the peer path's verification; a
// block committed under a wrong sum is dropped there, not served.
func TestCommitSummedSumsAreTheStores(t *testing.T) {
	f := startServer(t, 16, false)
	c := dial(t, f)
	ctx := context.Background()
	blocks := chainBlocks(3, 100)
	if err := c.Offload(ctx, "m", blocks); err != nil {
		t.Fatal(err)
	}
	got, err := f.st.AcquireVerified("m", []uint64{100, 101, 102})
	if err != nil || len(got) != 3 {
		t.Fatalf("AcquireVerified of offloaded blocks: %v, %v; want all 3", got, err)
	}
	f.st.Release(got)

	wrong := chainBlocks(2, 200)
	slots, err := c.Reserve(ctx, "m", []uint64{200, 201})
	if err != nil {
		t.Fatal(err)
	}
	sums := make([]uint64, 2)
	for i, s := range slots {
		dst, _ := c.Slot(s)
		sums[i] = store.CopySum(dst, wrong[i].Data)
	}
	sums[1]++
	if err := c.CommitSummed(ctx, "m", wrong, slots, sums); err != nil {
		t.Fatal(err)
	}
	got, err = f.st.AcquireVerified("m", []uint64{200, 201})
	if err != nil || len(got) != 1 {
		t.Fatalf("AcquireVerified over a wrong sum: %v, %v; want the 1 block before it", got, err)
	}
	f.st.Release(got)
	if st := f.st.Stats(); st.Host.CorruptBlocks != 1 {
		t.Fatalf("corrupt blocks %d, want 1", st.Host.CorruptBlocks)
	}
}

func TestBadRequestsAreRefusedNamingTheField(t *testing.T) {
	f := startServer(t, 4, false)
	c := dial(t, f)
	ctx := context.Background()
	long := make([]uint64, 9)
	for i := range long {
		long[i] = uint64(i)
	}
	cases := []struct {
		name string
		call func() error
		code codes.Code
		want string
	}{
		{"empty namespace", func() error { _, err := c.Lookup(ctx, "", []uint64{1}); return err }, codes.InvalidArgument, "namespace: empty"},
		{"empty chain", func() error { _, err := c.Lookup(ctx, "m", nil); return err }, codes.InvalidArgument, "chain: empty"},
		{"chain over the limit", func() error { _, err := c.Acquire(ctx, "m", long); return err }, codes.InvalidArgument, "more than the limit 8"},
		{"duplicate reserve", func() error { _, err := c.Reserve(ctx, "m", []uint64{5, 5}); return err }, codes.InvalidArgument, "hashes[1]: hash 0x5 repeats hashes[0]"},
		{"slot outside the arena", func() error { return c.Release(ctx, []int32{4}) }, codes.InvalidArgument, "slots[0]: slot 4 outside the arena [0, 4)"},
		{"negative slot", func() error { return c.Abort(ctx, []int32{-1}) }, codes.InvalidArgument, "slot -1 outside"},
		{"commit count mismatch", func() error {
			return c.Commit(ctx, "m", chainBlocks(2, 1), []int32{0})
		}, codes.InvalidArgument, "slots: 1 slots for 2 blocks"},
		{"commit of slots not reserved", func() error {
			return c.Commit(ctx, "m", chainBlocks(1, 1), []int32{0})
		}, codes.FailedPrecondition, "slot 0 is not reserved by this connection"},
		{"sums count mismatch", func() error {
			slots, err := c.Reserve(ctx, "m", []uint64{7, 8})
			if err != nil {
				return err
			}
			defer c.Abort(ctx, slots)
			return c.CommitSummed(ctx, "m", chainBlocks(2, 7), slots, []uint64{1})
		}, codes.InvalidArgument, "sums: 1 sums for 2 blocks"},
		{"release of slots not acquired", func() error { return c.Release(ctx, []int32{1}) }, codes.FailedPrecondition, "slot 1 is not acquired"},
		{"commit without tokens", func() error {
			slots, err := c.Reserve(ctx, "m", []uint64{9})
			if err != nil {
				return err
			}
			defer c.Abort(ctx, slots)
			return c.Commit(ctx, "m", []Block{{Hash: 9}}, slots)
		}, codes.InvalidArgument, "blocks[0].token_ids: empty"},
		{"peer info on the engine socket", func() error {
			_, err := c.rpc.PeerInfo(ctx, &pb.PeerInfoRequest{})
			return err
		}, codes.Unimplemented, "peer listener only"},
	}
	for _, tc := range cases {
		err := tc.call()
		s, _ := status.FromError(err)
		if err == nil || s.Code() != tc.code || !strings.Contains(s.Message(), tc.want) {
			t.Errorf("%s: got %v, want %v containing %q", tc.name, err, tc.code, tc.want)
		}
	}
	if r, a := f.srv.Pinned(); r != 0 || a != 0 {
		t.Errorf("after refused requests: %d reserved, %d acquired still held", r, a)
	}
}

func TestRegisterRefusesAnotherBlockSize(t *testing.T) {
	f := startServer(t, 4, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dial(ctx, f.sock, Registration{Namespace: "m", BlockBytes: testBlockBytes * 2})
	if s, _ := status.FromError(errors.Unwrap(err)); s.Code() != codes.FailedPrecondition || !strings.Contains(s.Message(), "block_bytes") {
		t.Fatalf("got %v, want FailedPrecondition naming block_bytes", err)
	}
}

func TestSlotsOfAClosedConnectionAreGivenBack(t *testing.T) {
	f := startServer(t, 4, false)
	ctx := context.Background()
	c1 := dial(t, f)
	if err := c1.Offload(ctx, "m", chainBlocks(1, 50)); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Reserve(ctx, "m", []uint64{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	acq, err := c1.Acquire(ctx, "m", []uint64{50})
	if err != nil || len(acq) != 1 {
		t.Fatalf("acquire: %v %v", acq, err)
	}
	// Every slot is now pinned: a second engine cannot reserve.
	c2 := dial(t, f)
	if _, err := c2.Reserve(ctx, "m", []uint64{7}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("reserve with every slot pinned: %v, want ResourceExhausted", err)
	}
	// Nor can it release c1's pin.
	if err := c2.Release(ctx, acq); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("release of another connection's slot: %v, want FailedPrecondition", err)
	}
	c1.Close()
	poll.Until(t, "the closed connection's slots to be given back", 10*time.Second, func() error {
		if r, a := f.srv.Pinned(); r != 0 || a != 0 {
			return fmt.Errorf("still held: %d reserved, %d acquired", r, a)
		}
		return nil
	})
	slots, err := c2.Reserve(ctx, "m", []uint64{7, 8, 9})
	if err != nil || len(slots) != 3 {
		t.Fatalf("reserve after the first engine left: %v %v", slots, err)
	}
}

func TestPeerListenerServesReadsOnly(t *testing.T) {
	f := startServer(t, 4, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dial(ctx, f.sock, Registration{Namespace: "m"})
	if s, _ := status.FromError(errors.Unwrap(err)); s.Code() != codes.PermissionDenied || !strings.Contains(s.Message(), "not served to peers") {
		t.Fatalf("register on a peer listener: %v, want PermissionDenied (not served to peers)", err)
	}
}

func TestListenUnixRefusesALiveSocketAndReplacesAStaleOne(t *testing.T) {
	f := startServer(t, 2, false)
	if _, err := ListenUnix(f.sock); err == nil || !strings.Contains(err.Error(), "another kvagent") {
		t.Fatalf("second listener on a live socket: %v", err)
	}
	stale := filepath.Join(t.TempDir(), "s.sock")
	l, err := ListenUnix(stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(interface{ SetUnlinkOnClose(bool) }).SetUnlinkOnClose(false)
	l.Close() // the file stays, nobody serves it
	l2, err := ListenUnix(stale)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l2.Close()
}
