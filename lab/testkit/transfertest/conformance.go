// Package transfertest holds the conformance suite every transfer backend
// passes: the behaviour the kvagent relies on, whatever moves the bytes.
package transfertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/kvagent/transfer"
)

// hangGuard bounds every wait: a transfer that neither finishes nor fails
// within it is a hang, which the suite reports instead of blocking the
// test binary. It is a safety net, not a speed assertion.
const hangGuard = 2 * time.Minute

// NewAgentFunc returns a fresh agent called name. The suite closes every
// agent it creates.
type NewAgentFunc func(t *testing.T, name string) transfer.Endpoint

// RunConformance runs the suite against a backend.
func RunConformance(t *testing.T, newAgent NewAgentFunc) {
	mk := func(t *testing.T, name string) transfer.Endpoint {
		t.Helper()
		a := newAgent(t, name)
		t.Cleanup(func() { a.Close() })
		if got := a.Name(); got != name {
			t.Fatalf("Name() = %q, want %q", got, name)
		}
		return a
	}
	t.Run("ReadWrite", func(t *testing.T) { testReadWrite(t, mk) })
	t.Run("ManyDescriptors", func(t *testing.T) { testManyDescriptors(t, mk) })
	t.Run("LongDescriptor", func(t *testing.T) { testLongDescriptor(t, mk) })
	t.Run("Notifications", func(t *testing.T) { testNotifications(t, mk) })
	t.Run("InvalidDescriptors", func(t *testing.T) { testInvalidDescriptors(t, mk) })
	t.Run("UnknownRemote", func(t *testing.T) { testUnknownRemote(t, mk) })
	t.Run("PeerClosed", func(t *testing.T) { testPeerClosed(t, mk) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, mk) })
	t.Run("FileRegions", func(t *testing.T) { testFileRegions(t, mk) })
	t.Run("RepostAndRelease", func(t *testing.T) { testRepostAndRelease(t, mk) })
	t.Run("Deregister", func(t *testing.T) { testDeregister(t, mk) })
}

// Pattern returns n deterministic pseudo-random bytes for seed.
func Pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Connect loads b's metadata into a (and a's into b) and checks the names.
func Connect(t *testing.T, a, b transfer.Endpoint) {
	t.Helper()
	for _, p := range [][2]transfer.Endpoint{{a, b}, {b, a}} {
		md, err := p[1].LocalMetadata()
		if err != nil {
			t.Fatalf("%s.LocalMetadata: %v", p[1].Name(), err)
		}
		name, err := p[0].LoadRemoteMetadata(md)
		if err != nil {
			t.Fatalf("%s.LoadRemoteMetadata(%s): %v", p[0].Name(), p[1].Name(), err)
		}
		if name != p[1].Name() {
			t.Fatalf("LoadRemoteMetadata returned %q, want %q", name, p[1].Name())
		}
	}
}

// Register registers r with a or fails the test.
func Register(t *testing.T, a transfer.Endpoint, r transfer.Region) uint32 {
	t.Helper()
	h, err := a.RegisterMem(r)
	if err != nil {
		t.Fatalf("%s.RegisterMem: %v", a.Name(), err)
	}
	return h
}

// Run creates, posts and waits for one transfer, and releases it; it
// returns the transfer's error.
func Run(t *testing.T, a transfer.Endpoint, op transfer.Op, local []transfer.Desc, remote string, remoteDescs []transfer.Desc, notif []byte) error {
	t.Helper()
	x, err := a.CreateXfer(op, local, remote, remoteDescs, notif)
	if err != nil {
		t.Fatalf("CreateXfer(%s, %d descriptors): %v", op, len(local), err)
	}
	defer a.Release(x)
	if err := a.Post(x); err != nil {
		return err
	}
	return Await(t, a, x)
}

// Await waits for x under the hang guard.
func Await(t *testing.T, a transfer.Endpoint, x transfer.Xfer) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	err := transfer.Wait(ctx, a, x)
	if ctx.Err() != nil {
		t.Fatalf("transfer %d still in progress after %s: %v", x, hangGuard, err)
	}
	return err
}

func testReadWrite(t *testing.T, mk NewAgentFunc) {
	a, b := mk(t, "initiator"), mk(t, "target")
	const n = 1 << 20
	remote := Pattern(1, n)
	local := make([]byte, n)
	rh := Register(t, b, transfer.Region{Kind: transfer.DRAM, Addr: remote})
	lh := Register(t, a, transfer.Region{Kind: transfer.DRAM, Addr: local})
	Connect(t, a, b)

	// Read pulls remote bytes into local memory.
	if err := Run(t, a, transfer.Read, []transfer.Desc{{Region: lh, Offset: 100, Len: 5000}}, b.Name(), []transfer.Desc{{Region: rh, Offset: 7, Len: 5000}}, nil); err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(local[100:5100], remote[7:5007]) {
		t.Fatal("read: local bytes differ from the remote ones")
	}
	if !bytes.Equal(local[:100], make([]byte, 100)) || !bytes.Equal(local[5100:5200], make([]byte, 100)) {
		t.Fatal("read: bytes outside the descriptor changed")
	}

	// Write pushes local bytes to the remote memory.
	src := Pattern(2, n)
	copy(local, src)
	if err := Run(t, a, transfer.Write, []transfer.Desc{{Region: lh, Offset: 0, Len: n}}, b.Name(), []transfer.Desc{{Region: rh, Offset: 0, Len: n}}, nil); err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(remote, src) {
		t.Fatal("write: remote bytes differ from the local ones")
	}
}

func testManyDescriptors(t *testing.T, mk NewAgentFunc) {
	a, b := mk(t, "initiator"), mk(t, "target")
	const n = 16 << 20 // 600 × at most 40 KiB, with gaps
	remote := Pattern(3, n)
	local := make([]byte, n)
	rh := Register(t, b, transfer.Region{Kind: transfer.DRAM, Addr: remote})
	lh := Register(t, a, transfer.Region{Kind: transfer.DRAM, Addr: local})
	Connect(t, a, b)

	// 600 descriptors of assorted sizes (1 byte to 40 KiB), the local ones
	// in shuffled order so that index i lands somewhere else than it
	// came from.
	r := rand.New(rand.NewPCG(4, 4))
	var ld, rd []transfer.Desc
	off := int64(0)
	for len(rd) < 600 {
		l := int64(1 + r.IntN(40<<10))
		if len(rd)%50 == 0 {
			l = 1
		}
		rd = append(rd, transfer.Desc{Region: rh, Offset: off, Len: l})
		off += l + int64(r.IntN(64))
	}
	perm := r.Perm(len(rd))
	pos := int64(0)
	ld = make([]transfer.Desc, len(rd))
	for _, i := range perm {
		ld[i] = transfer.Desc{Region: lh, Offset: pos, Len: rd[i].Len}
		pos += rd[i].Len
	}
	if err := Run(t, a, transfer.Read, ld, b.Name(), rd, nil); err != nil {
		t.Fatalf("read: %v", err)
	}
	for i := range rd {
		got := local[ld[i].Offset : ld[i].Offset+ld[i].Len]
		want := remote[rd[i].Offset : rd[i].Offset+rd[i].Len]
		if !bytes.Equal(got, want) {
			t.Fatalf("read: descriptor %d (%d bytes) differs", i, rd[i].Len)
		}
	}

	// And back: write the local pieces to fresh remote places.
	copy(local, Pattern(5, n))
	for i := range rd {
		rd[i].Offset = int64(n) - rd[i].Offset - rd[i].Len // mirror: still disjoint, still in bounds
	}
	if err := Run(t, a, transfer.Write, ld, b.Name(), rd, nil); err != nil {
		t.Fatalf("write: %v", err)
	}
	for i := range rd {
		if !bytes.Equal(remote[rd[i].Offset:rd[i].Offset+rd[i].Len], local[ld[i].Offset:ld[i].Offset+ld[i].Len]) {
			t.Fatalf("write: descriptor %d differs", i)
		}
	}
}

func testLongDescriptor(t *testing.T, mk NewAgentFunc) {
	a, b := mk(t, "initiator"), mk(t, "target")
	// Longer than any stripe or frame: a backend must cut it up and put
	// it back together in order.
	const n = 24<<20 + 12345
	remote := Pattern(6, n)
	local := make([]byte, n)
	rh := Register(t, b, transfer.Region{Kind: transfer.DRAM, Addr: remote})
	lh := Register(t, a, transfer.Region{Kind: transfer.DRAM, Addr: local})
	Connect(t, a, b)
	if err := Run(t, a, transfer.Read, []transfer.Desc{{Region: lh, Len: n}}, b.Name(), []transfer.Desc{{Region: rh, Len: n}}, nil); err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(local, remote) {
		t.Fatal("read: bytes differ")
	}
	copy(local, Pattern(7, n))
	if err := Run(t, a, transfer.Write, []transfer.Desc{{Region: lh, Len: n}}, b.Name(), []transfer.Desc{{Region: rh, Len: n}}, nil); err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(local, remote) {
		t.Fatal("write: bytes differ")
	}
}

// CollectNotifs polls agent until it has received want notifications in
// all, under the hang guard, and returns them by sender.
func CollectNotifs(t *testing.T, agent transfer.Endpoint, want int) map[string][][]byte {
	t.Helper()
	got := map[string][][]byte{}
	count := 0
	deadline := time.Now().Add(hangGuard)
	for count < want {
		for from, msgs := range agent.GetNotifs() {
			got[from] = append(got[from], msgs...)
			count += len(msgs)
		}
		if count >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s received %d notifications, want %d, within %s", agent.Name(), count, want, hangGuard)
		}
		time.Sleep(time.Millisecond)
	}
	return got
}

func testNotifications(t *testing.T, mk NewAgentFunc) {
	a, b := mk(t, "initiator"), mk(t, "target")
	const n = 3 << 20
	remote := make([]byte, n)
	local := Pattern(8, n)
	rh := Register(t, b, transfer.Region{Kind: transfer.DRAM, Addr: remote})
	lh := Register(t, a, transfer.Region{Kind: transfer.DRAM, Addr: local})
	Connect(t, a, b)

	if got := b.GetNotifs(); len(got) != 0 {
		t.Fatalf("notifications before any transfer: %v", got)
	}
	// A write with a notification: when the target sees the notification,
	// every byte is already in its memory (NIXL's guarantee).
	x, err := a.CreateXfer(transfer.Write, []transfer.Desc{{Region: lh, Len: n}}, b.Name(), []transfer.Desc{{Region: rh, Len: n}}, []byte("blocks 1-48 stored"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Post(x); err != nil {
		t.Fatal(err)
	}
	got := CollectNotifs(t, b, 1)
	if !bytes.Equal(remote, local) {
		t.Fatal("notification arrived before the written bytes")
	}
	if len(got[a.Name()]) != 1 || string(got[a.Name()][0]) != "blocks 1-48 stored" {
		t.Fatalf("notifications = %q, want one %q from %q", got, "blocks 1-48 stored", a.Name())
	}
	if err := Await(t, a, x); err != nil {
		t.Fatalf("write: %v", err)
	}
	a.Release(x)

	// A read with a notification tells the target its bytes were taken;
	// an empty (non-nil) notification is still delivered.
	if err := Run(t, a, transfer.Read, []transfer.Desc{{Region: lh, Len: 10}}, b.Name(), []transfer.Desc{{Region: rh, Len: 10}}, []byte{}); err != nil {
		t.Fatalf("read: %v", err)
	}
	// Standalone notifications, both ways, keep their order.
	for i := 0; i < 3; i++ {
		if err := a.GenNotif(b.Name(), fmt.Appendf(nil, "ping %d", i)); err != nil {
			t.Fatalf("GenNotif: %v", err)
		}
	}
	if err := b.GenNotif(a.Name(), []byte("pong")); err != nil {
		t.Fatalf("GenNotif back: %v", err)
	}
	got = CollectNotifs(t, b, 4)
	msgs := got[a.Name()]
	if len(got) != 1 || len(msgs) != 4 || len(msgs[0]) != 0 || string(msgs[1]) != "ping 0" || string(msgs[2]) != "ping 1" || string(msgs[3]) != "ping 2" {
		t.Fatalf("target notifications = %q, want \"\", ping 0..2 from %q", got, a.Name())
	}
	back := CollectNotifs(t, a, 1)
	if len(back[b.Name()]) != 1 || string(back[b.Name()][0]) != "pong" {
		t.Fatalf("initiator notifications = %q, want pong from %q", back, b.Name())
	}
	// Drained: nothing is delivered twice.
	if got := b.GetNotifs(); len(got) != 0 {
		t.Fatalf("notifications after draining: %q", got)
	}
	if err := a.GenNotif("nobody", []byte("x")); !errors.Is(err, transfer.ErrUnknownRemote) {
		t.Fatalf("GenNotif to an unknown agent: %v, want ErrUnknownRemote", err)
	}
}

func testInvalidDescriptors(t *testing.T, mk NewAgentFunc) {
	a, b := mk(t, "initiator"), mk(t, "target")
	remote := Pattern(9, 4096)
	local := make([]byte, 8192)
	rh := Register(t, b, transfer.Region{Kind: transfer.DRAM, Addr: remote})
	lh := Register(t, a, transfer.Region{Kind: transfer.DRAM, Addr: local})
	Connect(t, a, b)
	ok := transfer.Desc{Region: rh, Offset: 0, Len: 100}
	cases := []struct {
		name   string
		op     transfer.Op
		local  []transfer.Desc
		remote []transfer.Desc
		want   error
	}{
		{"remote past the end", transfer.Read, []transfer.Desc{{Region: lh, Len: 200}}, []transfer.Desc{{Region: rh, Offset: 4000, Len: 200}}, transfer.ErrOutOfBounds},
		{"remote negative offset", transfer.Read, []transfer.Desc{{Region: lh, Len: 100}}, []transfer.Desc{{Region: rh, Offset: -1, Len: 100}}, transfer.ErrOutOfBounds},
		{"remote offset overflow", transfer.Write, []transfer.Desc{{Region: lh, Len: 100}}, []transfer.Desc{{Region: rh, Offset: 1<<63 - 50, Len: 100}}, transfer.ErrOutOfBounds},
		{"local past the end", transfer.Read, []transfer.Desc{{Region: lh, Offset: 8100, Len: 100}}, []transfer.Desc{ok}, transfer.ErrOutOfBounds},
		{"zero length", transfer.Read, []transfer.Desc{{Region: lh, Len: 0}}, []transfer.Desc{{Region: rh, Len: 0}}, transfer.ErrOutOfBounds},
		{"unknown remote region", transfer.Read, []transfer.Desc{{Region: lh, Len: 100}}, []transfer.Desc{{Region: rh + 99, Len: 100}}, transfer.ErrUnknownRegion},
		{"unknown local region", transfer.Write, []transfer.Desc{{Region: lh + 99, Len: 100}}, []transfer.Desc{ok}, transfer.ErrUnknownRegion},
		{"lengths differ", transfer.Read, []transfer.Desc{{Region: lh, Len: 99}}, []transfer.Desc{ok}, nil},
		{"counts differ", transfer.Read, []transfer.Desc{{Region: lh, Len: 100}, {Region: lh, Offset: 100, Len: 100}}, []transfer.Desc{ok}, nil},
		{"empty lists", transfer.Read, nil, nil, nil},
		{"bad op", transfer.Op(9), []transfer.Desc{{Region: lh, Len: 100}}, []transfer.Desc{ok}, nil},
	}
	for _, c := range cases {
		x, err := a.CreateXfer(c.op, c.local, b.Name(), c.remote, nil)
		if err == nil {
			// A backend may instead fail the posted transfer; it must
			// never move the bytes.
			if perr := a.Post(x); perr == nil {
				err = Await(t, a, x)
			} else {
				err = perr
			}
			a.Release(x)
		}
		if err == nil {
			t.Errorf("%s: transfer accepted", c.name)
			continue
		}
		if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if !bytes.Equal(local, make([]byte, len(local))) {
		t.Error("a refused read changed local memory")
	}
	if !bytes.Equal(remote, Pattern(9, 4096)) {
		t.Error("a refused write changed remote memory")
	}
	// The agent still works after refusing all that.
	if err := Run(t, a, transfer.Read, []transfer.Desc{{Region: lh, Len: 4096}}, b.Name(), []transfer.Desc{{Region: rh, Len: 4096}}, nil); err != nil {
		t.Fatalf("read after refusals: %v", err)
	}
	if !bytes.Equal(local[:4096], remote) {
		t.Fatal("read after refusals: bytes differ")
	}
}

func testUnknownRemote(t *testing.T, mk NewAgentFunc) {
	a, b := mk(t, "initiator"), mk(t, "target")
	lh := Register(t, a, transfer.Region{Kind: transfer.DRAM, Addr: make([]byte, 64)})
	Register(t, b, transfer.Region{Kind: transfer.DRAM, Addr: make([]byte, 64)})
	_, err := a.CreateXfer(transfer.Read, []transfer.Desc{{Region: lh, Len: 8}}, b.Name(), []transfer.Desc{{Region: 1, Len: 8}}, nil)
	if !errors.Is(err, transfer.ErrUnknownRemote) {
		t.Fatalf("transfer to an agent whose metadata is not loaded: %v, want ErrUnknownRemote", err)
	}
	Connect(t, a, b)
	if err := a.InvalidateRemote(b.Name()); err != nil {
		t.Fatalf("InvalidateRemote: %v", err)
	}
	_, err = a.CreateXfer(transfer.Read, []transfer.Desc{{Region: lh, Len: 8}}, b.Name(), []transfer.Desc{{Region: 1, Len: 8}}, nil)
	if !errors.Is(err, transfer.ErrUnknownRemote) {
		t.Fatalf("transfer after InvalidateRemote: %v, want ErrUnknownRemote", err)
	}
	if err := a.InvalidateRemote("nobody"); !errors.Is(err, transfer.ErrUnknownRemote) {
		t.Fatalf("InvalidateRemote(nobody): %v, want ErrUnknownRemote", err)
	}
	for _, md := range [][]byte{nil, []byte("garbage"), bytes.Repeat([]byte{0xff}, 300)} {
		if _, err := a.LoadRemoteMetadata(md); err == nil {
			t.Fatalf("LoadRemoteMetadata(%q) accepted", md)
		}
	}
}

func testPeerClosed(t *testing.T, mk NewAgentFunc) {
	a, b := mk(t, "initiator"), mk(t, "target")
	const n = 16 << 20
	remote := Pattern(10, n)
	local := make([]byte, n)
	rh := Register(t, b, transfer.Region{Kind: transfer.DRAM, Addr: remote})
	lh := Register(t, a, transfer.Region{Kind: transfer.DRAM, Addr: local})
	Connect(t, a, b)
	// A first transfer opens the connections.
	desc := []transfer.Desc{{Region: lh, Len: n}}
	rdesc := []transfer.Desc{{Region: rh, Len: n}}
	if err := Run(t, a, transfer.Read, desc, b.Name(), rdesc, nil); err != nil {
		t.Fatalf("read: %v", err)
	}
	// The peer goes away while a transfer is in flight: it either got
	// through first or fails; it never hangs.
	x, err := a.CreateXfer(transfer.Read, desc, b.Name(), rdesc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Post(x); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := Await(t, a, x); err != nil {
		st, serr := a.Status(x)
		if st != transfer.Failed || serr == nil {
			t.Fatalf("after a failed wait, Status = %s, %v; want failed with the error", st, serr)
		}
	}
	a.Release(x)
	// Once the peer is gone, a transfer towards it fails.
	x, err = a.CreateXfer(transfer.Read, desc, b.Name(), rdesc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(x)
	if err := a.Post(x); err == nil {
		err = Await(t, a, x)
		if err == nil {
			t.Fatal("read from a closed peer succeeded")
		}
		st, serr := a.Status(x)
		if st != transfer.Failed || serr == nil {
			t.Fatalf("Status = %s, %v; want failed with the error", st, serr)
		}
	}
	// The initiator is still usable for other peers.
	c := mk(t, "third")
	ch := Register(t, c, transfer.Region{Kind: transfer.DRAM, Addr: Pattern(11, 4096)})
	Connect(t, a, c)
	if err := Run(t, a, transfer.Read, []transfer.Desc{{Region: lh, Len: 4096}}, c.Name(), []transfer.Desc{{Region: ch, Len: 4096}}, nil); err != nil {
		t.Fatalf("read from another peer: %v", err)
	}
	if !bytes.Equal(local[:4096], Pattern(11, 4096)) {
		t.Fatal("read from another peer: bytes differ")
	}
}

func testConcurrent(t *testing.T, mk NewAgentFunc) {
	a, b := mk(t, "initiator"), mk(t, "target")
	const workers, rounds, size = 8, 6, 256 << 10
	remote := make([][]byte, workers)
	local := make([][]byte, workers)
	rh := make([]uint32, workers)
	lh := make([]uint32, workers)
	for w := range workers {
		remote[w] = Pattern(uint64(100+w), size)
		local[w] = make([]byte, size)
		rh[w] = Register(t, b, transfer.Region{Kind: transfer.DRAM, Addr: remote[w]})
		lh[w] = Register(t, a, transfer.Region{Kind: transfer.DRAM, Addr: local[w]})
	}
	Connect(t, a, b)
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				op := transfer.Read
				if r%2 == 1 {
					op = transfer.Write
					copy(local[w], Pattern(uint64(1000*w+r), size))
				}
				// 16 blocks per request, as a chain fetch would be.
				var ld, rd []transfer.Desc
				for k := int64(0); k < 16; k++ {
					ld = append(ld, transfer.Desc{Region: lh[w], Offset: k * size / 16, Len: size / 16})
					rd = append(rd, transfer.Desc{Region: rh[w], Offset: (15 - k) * size / 16, Len: size / 16})
				}
				x, err := a.CreateXfer(op, ld, b.Name(), rd, fmt.Appendf(nil, "w%d r%d", w, r))
				if err == nil {
					err = a.Post(x)
				}
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
					err = transfer.Wait(ctx, a, x)
					cancel()
					a.Release(x)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d round %d (%s): %w", w, r, op, err)
					return
				}
				for k := int64(0); k < 16; k++ {
					l := local[w][k*size/16 : (k+1)*size/16]
					rm := remote[w][(15-k)*size/16 : (16-k)*size/16]
					if !bytes.Equal(l, rm) {
						errs <- fmt.Errorf("worker %d round %d (%s): block %d differs", w, r, op, k)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	got := CollectNotifs(t, b, workers*rounds)
	if len(got[a.Name()]) != workers*rounds {
		t.Fatalf("target got %d notifications, want %d", len(got[a.Name()]), workers*rounds)
	}
}

func testFileRegions(t *testing.T, mk NewAgentFunc) {
	a, b := mk(t, "initiator"), mk(t, "target")
	const n = 5<<20 + 333
	const fileOff = 8192
	dir := t.TempDir()
	rf := createFile(t, filepath.Join(dir, "remote.blocks"), fileOff+n, 12)
	lf := createFile(t, filepath.Join(dir, "local.blocks"), fileOff+n, 0)
	rfh := Register(t, b, transfer.Region{Kind: transfer.FILE, File: rf, Offset: fileOff, Len: n})
	lfh := Register(t, a, transfer.Region{Kind: transfer.FILE, File: lf, Offset: fileOff, Len: n})
	mem := make([]byte, n)
	mh := Register(t, a, transfer.Region{Kind: transfer.DRAM, Addr: mem})
	Connect(t, a, b)
	want := Pattern(12, fileOff+n)[fileOff:]

	// Remote file → local memory.
	if err := Run(t, a, transfer.Read, []transfer.Desc{{Region: mh, Len: n}}, b.Name(), []transfer.Desc{{Region: rfh, Len: n}}, nil); err != nil {
		t.Fatalf("read file into memory: %v", err)
	}
	if !bytes.Equal(mem, want) {
		t.Fatal("read file into memory: bytes differ")
	}
	// Remote file → local file, in two pieces.
	half := int64(n / 2)
	if err := Run(t, a, transfer.Read, []transfer.Desc{{Region: lfh, Len: half}, {Region: lfh, Offset: half, Len: n - half}}, b.Name(), []transfer.Desc{{Region: rfh, Len: half}, {Region: rfh, Offset: half, Len: n - half}}, nil); err != nil {
		t.Fatalf("read file into file: %v", err)
	}
	if got := readFile(t, lf, fileOff, n); !bytes.Equal(got, want) {
		t.Fatal("read file into file: bytes differ")
	}
	if got := readFile(t, lf, 0, fileOff); !bytes.Equal(got, make([]byte, fileOff)) {
		t.Fatal("read file into file: bytes before the region changed")
	}
	// Local memory → remote file.
	copy(mem, Pattern(13, n))
	if err := Run(t, a, transfer.Write, []transfer.Desc{{Region: mh, Len: n}}, b.Name(), []transfer.Desc{{Region: rfh, Len: n}}, nil); err != nil {
		t.Fatalf("write memory into file: %v", err)
	}
	if got := readFile(t, rf, fileOff, n); !bytes.Equal(got, mem) {
		t.Fatal("write memory into file: bytes differ")
	}
	// Local file → remote file.
	if err := Run(t, a, transfer.Write, []transfer.Desc{{Region: lfh, Len: n}}, b.Name(), []transfer.Desc{{Region: rfh, Len: n}}, nil); err != nil {
		t.Fatalf("write file into file: %v", err)
	}
	if got := readFile(t, rf, fileOff, n); !bytes.Equal(got, want) {
		t.Fatal("write file into file: bytes differ")
	}
	// Bounds hold for files too.
	if _, err := a.CreateXfer(transfer.Read, []transfer.Desc{{Region: mh, Len: 10}}, b.Name(), []transfer.Desc{{Region: rfh, Offset: n - 5, Len: 10}}, nil); !errors.Is(err, transfer.ErrOutOfBounds) {
		t.Fatalf("read past a file region: %v, want ErrOutOfBounds", err)
	}
}

func createFile(t *testing.T, path string, n int, seed uint64) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	data := make([]byte, n)
	if seed != 0 {
		data = Pattern(seed, n)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	return f
}

func readFile(t *testing.T, f *os.File, off int64, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

func testRepostAndRelease(t *testing.T, mk NewAgentFunc) {
	a, b := mk(t, "initiator"), mk(t, "target")
	remote := Pattern(14, 1<<20)
	local := make([]byte, 1<<20)
	rh := Register(t, b, transfer.Region{Kind: transfer.DRAM, Addr: remote})
	lh := Register(t, a, transfer.Region{Kind: transfer.DRAM, Addr: local})
	Connect(t, a, b)
	x, err := a.CreateXfer(transfer.Read, []transfer.Desc{{Region: lh, Len: 1 << 20}}, b.Name(), []transfer.Desc{{Region: rh, Len: 1 << 20}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := a.Status(x); st != transfer.NotPosted || err != nil {
		t.Fatalf("Status before Post = %s, %v; want not-posted", st, err)
	}
	if err := a.Post(x); err != nil {
		t.Fatal(err)
	}
	if err := Await(t, a, x); err != nil {
		t.Fatal(err)
	}
	if st, err := a.Status(x); st != transfer.Done || err != nil {
		t.Fatalf("Status after Wait = %s, %v; want done", st, err)
	}
	// A finished request can be posted again and moves the current bytes.
	copy(remote, Pattern(15, 1<<20))
	if err := a.Post(x); err != nil {
		t.Fatalf("repost: %v", err)
	}
	if err := Await(t, a, x); err != nil {
		t.Fatalf("repost: %v", err)
	}
	if !bytes.Equal(local, remote) {
		t.Fatal("repost: bytes are not the current remote ones")
	}
	if err := a.Release(x); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := a.Status(x); !errors.Is(err, transfer.ErrUnknownXfer) {
		t.Fatalf("Status after Release: %v, want ErrUnknownXfer", err)
	}
	if err := a.Post(x); !errors.Is(err, transfer.ErrUnknownXfer) {
		t.Fatalf("Post after Release: %v, want ErrUnknownXfer", err)
	}
	if err := a.Release(x); !errors.Is(err, transfer.ErrUnknownXfer) {
		t.Fatalf("second Release: %v, want ErrUnknownXfer", err)
	}
}

func testDeregister(t *testing.T, mk NewAgentFunc) {
	a, b := mk(t, "initiator"), mk(t, "target")
	remote := Pattern(16, 4096)
	local := make([]byte, 4096)
	rh := Register(t, b, transfer.Region{Kind: transfer.DRAM, Addr: remote})
	lh := Register(t, a, transfer.Region{Kind: transfer.DRAM, Addr: local})
	Connect(t, a, b)
	x, err := a.CreateXfer(transfer.Read, []transfer.Desc{{Region: lh, Len: 4096}}, b.Name(), []transfer.Desc{{Region: rh, Len: 4096}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(x)
	if err := a.DeregisterMem(lh); err != nil {
		t.Fatalf("DeregisterMem: %v", err)
	}
	if err := a.DeregisterMem(lh); !errors.Is(err, transfer.ErrUnknownRegion) {
		t.Fatalf("second DeregisterMem: %v, want ErrUnknownRegion", err)
	}
	// A request over a withdrawn local region is refused, at Post or as a
	// failed transfer, and writes nothing.
	if err := a.Post(x); err == nil {
		if err := Await(t, a, x); err == nil {
			t.Fatal("transfer into a deregistered region succeeded")
		}
	}
	if !bytes.Equal(local, make([]byte, 4096)) {
		t.Fatal("transfer into a deregistered region wrote bytes")
	}
	if _, err := a.CreateXfer(transfer.Read, []transfer.Desc{{Region: lh, Len: 4096}}, b.Name(), []transfer.Desc{{Region: rh, Len: 4096}}, nil); !errors.Is(err, transfer.ErrUnknownRegion) {
		t.Fatalf("CreateXfer over a deregistered region: %v, want ErrUnknownRegion", err)
	}
	// Registration errors name the problem.
	for _, r := range []transfer.Region{
		{Kind: transfer.DRAM},
		{Kind: transfer.DRAM, Addr: make([]byte, 10), Offset: 5, Len: 6},
		{Kind: transfer.FILE},
		{Kind: transfer.MemKind(77), Addr: make([]byte, 10)},
	} {
		if _, err := a.RegisterMem(r); err == nil {
			t.Errorf("RegisterMem(%+v) accepted", r)
		}
	}
}
