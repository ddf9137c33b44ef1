package residency

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/ingest"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/kv/kvstream"
	"github.com/kvgate/kvgate/kvagent/store"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

func meta(parent uint64, hasParent bool, tok uint32) store.Meta {
	return store.Meta{Parent: parent, HasParent: hasParent, TokenIDs: []uint32{tok, tok + 1}}
}

func TestStoredChangesBecomeParentFirstChains(t *testing.T) {
	// Blocks of two sequences, children listed before parents (as a disk
	// recovery may list them), then a removal and a clear.
	cs := []store.Change{
		{Kind: kvevents.BlockStored, Tier: store.TierDisk, Hashes: []uint64{12, 11}, Metas: []store.Meta{meta(11, true, 30), meta(10, true, 20)}},
		{Kind: kvevents.BlockStored, Tier: store.TierDisk, Hashes: []uint64{10, 20}, Metas: []store.Meta{meta(0, false, 10), meta(0, false, 40)}},
		{Kind: kvevents.BlockRemoved, Tier: store.TierHost, Hashes: []uint64{7, 8}},
		{Kind: kvevents.BlockStored, Tier: store.TierHost, Hashes: []uint64{10}, Metas: []store.Meta{meta(0, false, 10)}},
		{Kind: kvevents.AllBlocksCleared},
	}
	got, err := Events(cs)
	if err != nil {
		t.Fatal(err)
	}
	want := []kvevents.Event{
		{Kind: kvevents.BlockStored, BlockHashes: []uint64{10, 11, 12}, TokenIDs: []uint32{10, 11, 20, 21, 30, 31}, BlockSize: 2, Medium: "DISK"},
		{Kind: kvevents.BlockStored, BlockHashes: []uint64{20}, TokenIDs: []uint32{40, 41}, BlockSize: 2, Medium: "DISK"},
		{Kind: kvevents.BlockRemoved, BlockHashes: []uint64{7, 8}, Medium: "CPU"},
		{Kind: kvevents.BlockStored, BlockHashes: []uint64{10}, TokenIDs: []uint32{10, 11}, BlockSize: 2, Medium: "CPU"},
		{Kind: kvevents.AllBlocksCleared},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events:\n got %+v\nwant %+v", got, want)
	}
}

func TestChainBreaksOnLoRAOrAMissingLink(t *testing.T) {
	m2 := meta(1, true, 2)
	m2.LoRAName = "sql"
	cs := []store.Change{{Kind: kvevents.BlockStored, Tier: store.TierHost, Hashes: []uint64{1, 2, 3}, Metas: []store.Meta{meta(9, true, 1), m2, meta(77, true, 3)}}}
	got, err := Events(cs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("want 3 events (a LoRA change and a foreign parent each start one), got %+v", got)
	}
	if !got[0].HasParent || got[0].ParentHash != 9 || got[1].LoRAName != "sql" || got[2].ParentHash != 77 {
		t.Errorf("events %+v", got)
	}
}

func TestMismatchedMetasAreAnError(t *testing.T) {
	if _, err := Events([]store.Change{{Kind: kvevents.BlockStored, Tier: store.TierHost, Hashes: []uint64{1, 2}, Metas: []store.Meta{meta(0, false, 1)}}}); err == nil {
		t.Fatal("2 hashes with 1 meta accepted")
	}
	if _, err := Events([]store.Change{{Kind: kvevents.BlockRemoved, Tier: 7, Hashes: []uint64{1}}}); err == nil {
		t.Fatal("tier 7 accepted")
	}
}

// TestPublishedEventsReachAnIngestWorker runs the publisher on real ZMQ
// sockets and applies what a kvstream subscriber receives with the
// indexer's ingest: the index then credits the blocks on host and disk
// under the sequence hashes the router computes from the tokens.
func TestPublishedEventsReachAnIngestWorker(t *testing.T) {
	p, err := New(Config{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	idx := kvindex.NewMemory(kvindex.MemoryConfig{})
	w := kvfleet.WorkerID{Endpoint: "10.0.0.1:8000"}
	ing := ingest.NewWorker(w, idx, ingest.Config{BlockSize: 2, Tiers: 1<<kvfleet.TierHost | 1<<kvfleet.TierDisk, ScopedClear: true})
	h := &applyHandler{ing: ing, dec: kvevents.NewDecoder(kvevents.DefaultLimits())}
	sub, err := kvstream.NewSubscriber(kvstream.Config{Endpoint: p.Endpoint(), ReplayEndpoint: p.ReplayEndpoint(), TailPoll: 50 * time.Millisecond}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go sub.Run(ctx)

	p.OnChange(store.Change{Kind: kvevents.BlockStored, Tier: store.TierHost, Hashes: []uint64{10, 11}, Metas: []store.Meta{meta(0, false, 10), meta(10, true, 20)}})
	p.OnChange(store.Change{Kind: kvevents.BlockStored, Tier: store.TierDisk, Hashes: []uint64{10}, Metas: []store.Meta{meta(0, false, 10)}})

	seed := blockhash.Seed("", "")
	seqs := blockhash.SequenceHashes(blockhash.LocalHashes([]uint32{10, 11, 20, 21}, 2, seed))
	depths := func(want kvfleet.Depths) func() error {
		return func() error {
			m, err := kvindex.MatchMap(ctx, idx, seqs)
			if err != nil {
				return err
			}
			if m[w] != want {
				return fmt.Errorf("index depths %v, want %v", m[w], want)
			}
			return nil
		}
	}
	poll.Until(t, "the stored blocks indexed", 20*time.Second, depths(kvfleet.Depths{0, 2, 2, 2}))
	p.OnChange(store.Change{Kind: kvevents.BlockRemoved, Tier: store.TierHost, Hashes: []uint64{11}})
	poll.Until(t, "the removal indexed", 20*time.Second, depths(kvfleet.Depths{0, 1, 1, 1}))
}

type applyHandler struct {
	ing *ingest.Worker
	dec *kvevents.Decoder
}

func (h *applyHandler) HandleBatch(ctx context.Context, _ uint64, payload []byte) error {
	b, err := h.dec.Decode(payload)
	if err != nil {
		return err
	}
	return h.ing.Apply(ctx, b)
}

func (h *applyHandler) Reset(ctx context.Context, _ string) error { return h.ing.Reset(ctx) }

// The publisher's counters reach Prometheus: a published batch counts its
// events, and Close unregisters them.
func TestPublisherCountersAreExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, err := New(Config{Endpoint: "tcp://127.0.0.1:0", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	p.OnChange(store.Change{Kind: kvevents.BlockStored, Tier: store.TierHost, Hashes: []uint64{10, 11}, Metas: []store.Meta{meta(0, false, 10), meta(10, true, 20)}})
	p.OnChange(store.Change{Kind: kvevents.BlockRemoved, Tier: store.TierHost, Hashes: []uint64{11}})
	poll.Until(t, "two events published", 10*time.Second, func() error {
		if _, e, f := p.Stats(); e != 2 || f != 0 {
			return fmt.Errorf("stats: events %d, failures %d", e, f)
		}
		return nil
	})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]float64{}
	for _, mf := range fams {
		vals[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
	}
	if vals["kvgate_kvagent_residency_events_total"] != 2 || vals["kvgate_kvagent_residency_publish_failures_total"] != 0 || vals["kvgate_kvagent_residency_batches_total"] < 1 {
		t.Errorf("exported %v", vals)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if fams, _ := reg.Gather(); len(fams) != 0 {
		t.Errorf("%d families left after Close", len(fams))
	}
}
