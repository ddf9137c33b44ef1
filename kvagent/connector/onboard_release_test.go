package connector

import (
	"bytes"
	"context"
	"testing"
)

// Back-to-back onboards: each one's Release rides on the next Acquire,
// which the agent applies before its quota check, so a connection whose
// quota fits one onboard still gets every block of the next; what is left
// goes with ReleaseOnboarded (or on its own within onboardReleaseDelay).
func TestOnboardReleaseRidesOnTheNextAcquire(t *testing.T) {
	f, _ := startWith(t, 16, Config{Quota: Quota{PerConnection: 3}}, nil)
	c := dial(t, f)
	ctx := context.Background()
	blocks := chainBlocks(3, 100)
	if err := c.Offload(ctx, "m", blocks); err != nil {
		t.Fatal(err)
	}
	chain := []uint64{100, 101, 102}
	dst := [][]byte{make([]byte, testBlockBytes), make([]byte, testBlockBytes), make([]byte, testBlockBytes)}
	for round := range 5 {
		clear(dst[2])
		n, err := c.Onboard(ctx, "m", chain, dst)
		if err != nil || n != 3 {
			t.Fatalf("onboard %d under a quota of 3: %d blocks, %v; want 3", round, n, err)
		}
		if !bytes.Equal(dst[2], blocks[2].Data) {
			t.Fatalf("onboard %d: block 2's bytes differ", round)
		}
	}
	if err := c.ReleaseOnboarded(ctx); err != nil {
		t.Fatal(err)
	}
	if r, a := f.srv.Pinned(); r != 0 || a != 0 {
		t.Fatalf("after ReleaseOnboarded: %d reserved, %d acquired held", r, a)
	}
}

// A queued release the agent refuses (those slots are no longer held:
// given back at a hold timeout, say) does not fail the onboard carrying
// it: that Acquire is sent again alone, and the refusal is reported by
// ReleaseOnboarded.
func TestOnboardWithAStaleQueuedRelease(t *testing.T) {
	f := startServer(t, 16, false)
	c := dial(t, f)
	ctx := context.Background()
	blocks := chainBlocks(2, 100)
	if err := c.Offload(ctx, "m", blocks); err != nil {
		t.Fatal(err)
	}
	c.rel.mu.Lock()
	c.rel.pending = []int32{7} // never acquired by this connection
	c.rel.mu.Unlock()
	dst := [][]byte{make([]byte, testBlockBytes), make([]byte, testBlockBytes)}
	if n, err := c.Onboard(ctx, "m", []uint64{100, 101}, dst); err != nil || n != 2 {
		t.Fatalf("onboard carrying a stale release: %d, %v; want 2 blocks", n, err)
	}
	if err := c.ReleaseOnboarded(ctx); err == nil {
		t.Fatal("ReleaseOnboarded: no error for the refused release")
	}
	if r, a := f.srv.Pinned(); r != 0 || a != 0 {
		t.Fatalf("after ReleaseOnboarded: %d reserved, %d acquired held", r, a)
	}
	if err := c.ReleaseOnboarded(ctx); err != nil {
		t.Fatalf("second ReleaseOnboarded: %v, want the error reported once", err)
	}
}

// More queued releases than one request may name (max_chain) go out on
// their own, in requests the agent accepts, and the onboard still works.
func TestOnboardReleasesMoreThanMaxChain(t *testing.T) {
	f := startServer(t, 16, false) // max chain 8
	c := dial(t, f)
	ctx := context.Background()
	blocks := chainBlocks(3, 100)
	if err := c.Offload(ctx, "m", blocks); err != nil {
		t.Fatal(err)
	}
	var held []int32
	for range 4 {
		slots, err := c.Acquire(ctx, "m", []uint64{100, 101, 102})
		if err != nil || len(slots) != 3 {
			t.Fatalf("acquire: %v, %v", slots, err)
		}
		held = append(held, slots...)
	}
	c.rel.mu.Lock()
	c.rel.pending = held // 12 slots, as if from 4 onboards
	c.rel.mu.Unlock()
	dst := [][]byte{make([]byte, testBlockBytes), make([]byte, testBlockBytes), make([]byte, testBlockBytes)}
	if n, err := c.Onboard(ctx, "m", []uint64{100, 101, 102}, dst); err != nil || n != 3 {
		t.Fatalf("onboard with 12 queued releases (max chain 8): %d, %v", n, err)
	}
	if err := c.ReleaseOnboarded(ctx); err != nil {
		t.Fatal(err)
	}
	if r, a := f.srv.Pinned(); r != 0 || a != 0 {
		t.Fatalf("after ReleaseOnboarded: %d reserved, %d acquired held", r, a)
	}
}
