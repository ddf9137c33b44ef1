package enginesim

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/indexer"
	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/kvagent"
	"github.com/kvgate/kvgate/kvagent/connector"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// TestSimulatorWithKVAgentCreditsAndOnboardsEvictedBlocks is the whole
// node path over real sockets: a simulated engine (HTTP, KV events) with a
// kvagent daemon (connector socket, residency events) and `kvgate
// indexer`'s service subscribed to both. A prompt evicted from the GPU
// pool shows up in the index on the host and disk tiers, and asking for it
// again onboards it: usage.cached_tokens counts the onboarded blocks.
func TestSimulatorWithKVAgentCreditsAndOnboardsEvictedBlocks(t *testing.T) {
	dir := t.TempDir()
	kcfg, err := config.Parse(strings.NewReader(fmt.Sprintf(`kvagent:
  socket: %s
  shm_path: %s
  block_bytes: 16384
  host_blocks: 64
  disk: {dir: %s, blocks: 128, admit_after: 1}
  events: tcp://127.0.0.1:%d
  replay: tcp://127.0.0.1:%d
  admin: 127.0.0.1:0
`, filepath.Join(dir, "k.sock"), filepath.Join(dir, "arena"), filepath.Join(dir, "disk"), freeport.Pick(t), freeport.Pick(t))))
	if err != nil {
		t.Fatal(err)
	}
	agent, err := kvagent.Start(kcfg.Kvagent, nil, quietLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kc, err := connector.Dial(ctx, agent.SocketPath(), connector.Registration{Namespace: testModel, TokensPerBlock: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kc.Close() })
	tier := NewKVAgentTier(kc, testModel, 5*time.Second, quietLog)

	s := startServer(t, func(c *ServerConfig) {
		c.LoRAs = nil
		c.Engine = Config{BlockSize: 16, NumGPUBlocks: 24, SpeedUp: 200, KVTier: tier}
		c.Events = EventsConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"}
	})

	const worker = "10.0.0.9:8000"
	icfg, err := config.Parse(strings.NewReader(fmt.Sprintf(`
models: [{name: %q, block_size: 16}]
engines:
  - endpoint: %s
    model: %q
    events: %s
    replay: %s
    tier_events: %s
    tier_replay: %s
`, testModel, worker, testModel, s.EventsAddr(), s.ReplayAddr(), agent.EventsEndpoint(), agent.ReplayEndpoint())))
	if err != nil {
		t.Fatal(err)
	}
	idx := kvindex.NewMemory(kvindex.MemoryConfig{})
	workers, err := icfg.Workers()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := indexer.New(indexer.ServiceConfig{Index: icfg.Index, Indexer: icfg.Indexer, Models: icfg.Models, Workers: workers}, idx, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	if err := svc.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}

	complete := func(prompt []uint32) int {
		t.Helper()
		status, out := post(t, s.url+"/v1/completions", map[string]any{"model": testModel, "prompt": prompt, "max_tokens": 1})
		if status != 200 {
			t.Fatalf("completion: %d %s", status, out)
		}
		r := decode[wireResponse](t, out)
		return r.Usage.PromptTokensDetails.CachedTokens
	}
	a, b := tokens(1000, 200), tokens(20000, 300)
	if c := complete(a); c != 0 {
		t.Fatalf("first request: %d cached tokens", c)
	}
	// "a" holds 13 blocks (12 full); "b" needs 19 of the 24: the free
	// queue gives it a's partial block, the 11 unused ones, then a's full
	// blocks 11..5 (freed tail first), which are offloaded to the kvagent.
	if c := complete(b); c != 0 {
		t.Fatalf("second request: %d cached tokens", c)
	}
	seed := blockhash.Seed("", "")
	chain := blockhash.SequenceHashes(blockhash.LocalHashes(a, 16, seed))
	w := kvfleet.WorkerID{Endpoint: worker}
	want := kvfleet.Depths{5, 12, 12, 12} // GPU 0..4; host and disk 5..11
	poll.Until(t, "the index to hold the evicted prompt's host and disk depths", 20*time.Second, func() error {
		m, err := kvindex.MatchMap(ctx, idx, chain)
		if err != nil {
			t.Fatal(err)
		}
		if got := m[w]; got != want {
			return fmt.Errorf("index depths %v, want %v", got, want)
		}
		return nil
	})
	// Asked again: 5 blocks from the GPU, 7 onboarded from the kvagent
	// (the 13th holds the last prompt token, always computed).
	if c := complete(a); c != 12*16 {
		t.Fatalf("third request: %d cached tokens, want %d (80 on the GPU + 112 onboarded)", c, 12*16)
	}
	st := s.Stats().Engine
	if st.TierOnboardedBlocks != 7 || st.TierOffloadedBlocks < 7 {
		t.Fatalf("engine stats: %d blocks onboarded, %d offloaded", st.TierOnboardedBlocks, st.TierOffloadedBlocks)
	}
	if off, on, bad := tier.Failures(); off+on+bad != 0 {
		t.Fatalf("kvagent failures: offload %d, onboard %d, corrupt %d", off, on, bad)
	}
}
