package replay

import (
	"context"
	"testing"

	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

func TestHostTierRaisesHitRatioAndFeedsTheIndex(t *testing.T) {
	reqs, err := LoadTrace("testdata/conversation_head300.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Small GPU caches (256 blocks of 512 tokens per engine) so that the
	// trace evicts; a host tier four times larger keeps what they evict.
	base := Options{Workers: 2, GPUBlocks: 256, Seed: 1, Policies: []string{PolicyRoundRobin, PolicyKvgate}}
	without, err := Run(context.Background(), "slice", reqs, base)
	if err != nil {
		t.Fatal(err)
	}
	withTier := base
	withTier.HostBlocks = 1024
	with, err := Run(context.Background(), "slice", reqs, withTier)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range base.Policies {
		a, b := without.Policies[p], with.Policies[p]
		if a.HostHitRatio != 0 || !(b.HostHitRatio > 0) {
			t.Errorf("%s: host hit ratio %v without a tier, %v with", p, a.HostHitRatio, b.HostHitRatio)
		}
		if !(b.HitRatio > a.HitRatio) || b.HitRatio > with.IdealHitRatio+1e-12 {
			t.Errorf("%s: hit ratio %v with the tier, %v without, ideal %v", p, b.HitRatio, a.HitRatio, with.IdealHitRatio)
		}
		if b.IndexRejects != 0 {
			t.Errorf("%s: the index rejected %d KV events", p, b.IndexRejects)
		}
	}
}

func TestHostTierEventsReachTheIndexAsHostDepth(t *testing.T) {
	reqs, err := LoadTrace("testdata/conversation_head300.jsonl", 120)
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{Workers: 1, GPUBlocks: 256, HostBlocks: 2048, Seed: 1, Policies: []string{PolicyKvgate}}
	if err := opt.fill(); err != nil {
		t.Fatal(err)
	}
	s, err := newSimulation(PolicyKvgate, 0, reqs, &opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := s.ingest[0].Stats()
	// The GPU pool holds 256 blocks; everything stored beyond that went
	// through the host tier's BlockStored events (medium CPU).
	if st.BlocksStored <= 2*256 || st.StoredEvents == 0 {
		t.Errorf("index stats %+v: want host-tier stores beyond the GPU pool's", st)
	}
	// Some prompt's match now extends beyond the device tier into the
	// host tier: the picker can credit it at the host weight.
	var toks []uint32
	extended := 0
	for _, r := range reqs {
		toks = Tokens(toks, r)
		chain := blockhash.SequenceHashes(blockhash.LocalHashes(toks, opt.BlockSize, s.seed))
		m, err := kvindex.MatchMap(context.Background(), s.idx, chain)
		if err != nil {
			t.Fatal(err)
		}
		if d := m[s.workers[0].ID]; d[kvfleet.TierHost] > d[kvfleet.TierDevice] {
			extended++
		}
	}
	if extended == 0 {
		t.Error("no prompt matches deeper on the host tier than on the device")
	}
}
