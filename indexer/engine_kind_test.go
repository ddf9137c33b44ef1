package indexer

import (
	"context"
	"testing"

	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// engines[].kind picks each stream's format: a trtllm engine's TensorRT-LLM
// event lists and a vllm engine's EventBatches are both indexed, each only
// by its own decoder (a list sent to the vllm engine's stream would be a
// decode error, TestFormatsAreNotMixed).
func TestServiceDecodesEachEngineByItsKind(t *testing.T) {
	engines, cfg := startEngines(t, 2)
	cfg.Engines[0].Kind = kvevents.KindNameTRTLLM
	idx := kvindex.NewMemory(kvindex.MemoryConfig{})
	svc := runService(t, cfg, idx)

	tokens := seqTokens(1, 8)
	stored := kvevents.Event{Kind: kvevents.BlockStored, BlockSize: testBlockSize, TokenIDs: tokens, BlockHashes: []uint64{7001, 7002}}
	trt, err := kvevents.EncodeTRTLLM(kvevents.Batch{Events: []kvevents.Event{stored}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engines[0].pub.Publish(trt); err != nil {
		t.Fatal(err)
	}
	engines[0].sent++
	engines[1].storeChain(t, tokens, true)
	st := waitBatches(t, svc, engines)
	for i, w := range st.Workers {
		if w.DecodeErrors != 0 {
			t.Fatalf("worker %d: %d decode errors", i, w.DecodeErrors)
		}
	}
	m, err := kvindex.MatchMap(context.Background(), idx, chain(tokens))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range engines {
		if d := m[e.id][kvfleet.TierDevice]; d != 2 {
			t.Errorf("%s: depth %d, want 2 (match %v)", e.id, d, m)
		}
	}
}
