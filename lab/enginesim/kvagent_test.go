package enginesim

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvgate/kvgate/kvagent/connector"
	"github.com/kvgate/kvgate/kvagent/store"
)

// startKVAgent runs a kvagent store and its connector on a real Unix
// socket and returns a connected client.
func startKVAgent(t *testing.T, blockBytes, slots int) *connector.Client {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(store.Config{BlockBytes: blockBytes, HostBlocks: slots, ShmPath: filepath.Join(dir, "arena")})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := connector.NewServer(connector.Config{Store: st, Slots: slots})
	if err != nil {
		t.Fatal(err)
	}
	l, err := connector.ListenUnix(filepath.Join(dir, "kvagent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := connector.Dial(ctx, l.Addr().String(), connector.Registration{Namespace: "m"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.Stop(context.Background())
		st.Close()
	})
	return c
}

// evictedPrefixTTFT serves a prompt, then an unrelated one that evicts
// most of the first from the GPU pool, then the first prompt again, and
// returns the last request's record.
func evictedPrefixTTFT(t *testing.T, tier KVTier) (Output, Stats) {
	t.Helper()
	e := newEngine(t, Config{BlockSize: 64, NumGPUBlocks: 40, KVTier: tier}, nil)
	prompt := tokens(1000, 2048)
	for _, r := range []Request{
		{ID: "a", Tokens: prompt, MaxTokens: 1},
		{ID: "b", Tokens: tokens(90000, 2048), MaxTokens: 1},
		{ID: "again", Tokens: prompt, MaxTokens: 1},
	} {
		r.Arrival = e.Now()
		if err := e.Submit(r); err != nil {
			t.Fatal(err)
		}
		out := runAll(t, e)
		if r.ID == "again" {
			return out["again"], e.Stats()
		}
	}
	panic("unreachable")
}

func TestKVAgentOnboardIsCheaperThanRecomputingAnEvictedPrefix(t *testing.T) {
	without, st0 := evictedPrefixTTFT(t, nil)
	c := startKVAgent(t, 64<<10, 64)
	tier := NewKVAgentTier(c, "m", 5*time.Second, nil)
	with, st1 := evictedPrefixTTFT(t, tier)

	// Pool walk-through (cache.go): "a" holds 32 blocks (its one output
	// token needs no new block), "b" takes the free queue's head — the 8
	// never-used blocks and a's blocks 31..8, freed tail first — so blocks
	// 0..7 survive on the GPU. Every evicted
	// block (a's, then b's for "again") is offloaded.
	if st1.TierOffloadedBlocks != st0.EvictedBlocks || st1.EvictedBlocks != st0.EvictedBlocks {
		t.Fatalf("evicted %d blocks (without: %d), offloaded %d", st1.EvictedBlocks, st0.EvictedBlocks, st1.TierOffloadedBlocks)
	}
	if without.CachedTokens != 8*64 {
		t.Fatalf("without a kvagent: %d cached tokens, want the 512 left on the GPU", without.CachedTokens)
	}
	// With it, blocks 8..30 come back from the kvagent (block 31 holds
	// the last prompt token, which is always computed).
	if with.CachedTokens != 31*64 || st1.TierOnboardedBlocks != 23 || st1.TierHitTokens != 23*64 {
		t.Fatalf("with a kvagent: %d cached tokens, %d blocks onboarded; want %d and 23", with.CachedTokens, st1.TierOnboardedBlocks, 31*64)
	}
	if off, on, bad := tier.Failures(); off+on+bad != 0 {
		t.Fatalf("kvagent failures: offload %d, onboard %d, corrupt reads %d", off, on, bad)
	}
	ttftWithout := without.FirstTokenAt - without.Arrival
	ttftWith := with.FirstTokenAt - with.Arrival
	// The oracle is the timing model itself: prefilling 2048-512 tokens
	// versus 2048-1984 tokens plus the copy of 23 blocks at 25 GB/s.
	wantWithout := StepDuration(2048-512, false, 0, 1)
	copyBytes := 23 * (64 << 10)
	copyTime := time.Duration(math.Round(float64(copyBytes) / 25e9 * float64(time.Second)))
	wantWith := StepDuration(64, false, 0, 1) + copyTime
	if diff := ttftWithout - wantWithout; diff < -time.Microsecond || diff > time.Microsecond {
		t.Errorf("TTFT without a kvagent %v, model says %v", ttftWithout, wantWithout)
	}
	if diff := ttftWith - wantWith; diff < -time.Microsecond || diff > time.Microsecond {
		t.Errorf("TTFT with a kvagent %v, model says %v", ttftWith, wantWith)
	}
	if ttftWith >= ttftWithout {
		t.Fatalf("TTFT with a kvagent %v is not below %v without", ttftWith, ttftWithout)
	}
}
