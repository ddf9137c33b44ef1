package extproc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/extproc/loadview"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

// A request routed to a worker whose KV events have not arrived yet still
// draws the next request with the same prefix there: every worker publishes
// events (none is approximate) and the index stays empty throughout.
func TestPendingPrefixDrawsTheNextRequestBeforeKVEvents(t *testing.T) {
	r := newRig(t, nil, envoyharness.DefaultConfig())
	body := chatBody("qwen3", strings.Repeat("Draft the migration plan for the billing database, step by step. ", 30))
	res, err := r.reg.Chat(body)
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.harness.Start(context.Background(), post(body))
	if err != nil {
		t.Fatal(err)
	}
	if first.Forward == nil {
		t.Fatalf("first request not routed: %+v", first.Local)
	}
	holder := first.Forward.Upstream
	// The second arrives while the first is still in flight (its prefill
	// under way, no BlockStored yet): its load alone would send it
	// elsewhere.
	second, err := r.harness.Start(context.Background(), post(body))
	if err != nil {
		t.Fatal(err)
	}
	if second.Forward == nil || second.Forward.Upstream != holder {
		t.Fatalf("second request went to %+v, want %s, where its prefix is being computed", second.Forward, holder)
	}
	finishResponse(t, first, holder)
	finishResponse(t, second, holder)
	waitIdle(t, r.router)

	// The credit is the whole chain on the holder, and ends at the TTL.
	p := r.router.fleet.Load().pools["qwen3"]
	w := kvfleet.WorkerID{Endpoint: holder}
	now := time.Now()
	if got := depthsIn(matchNow(r.router, p, res.Sequence, now), w)[kvfleet.TierDevice]; got != len(res.Sequence) {
		t.Fatalf("pending depth on %s = %d, want %d", holder, got, len(res.Sequence))
	}
	if got := matchNow(r.router, p, res.Sequence, now.Add(loadview.PendingTTL+time.Second)); depthsIn(got, w) != (kvfleet.Depths{}) {
		t.Fatalf("credit past the TTL: %v", got.Map())
	}
}
