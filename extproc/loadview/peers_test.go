package loadview

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func history(samples ...OwnSample) *OwnHistory {
	h := NewOwnHistory(len(samples))
	for _, s := range samples {
		h.Add(s)
	}
	return h
}

func TestOwnHistoryNearest(t *testing.T) {
	h := NewOwnHistory(3)
	if _, ok := h.Nearest(t0); ok {
		t.Fatal("empty history returned a sample")
	}
	for i := range 4 { // the first is evicted: the ring holds 3
		h.Add(OwnSample{At: t0.Add(ms(50 * i)), Routed: uint64(i)})
	}
	cases := []struct {
		at   time.Duration
		want uint64
	}{
		{ms(70), 1},    // 50 is 20 away, 100 is 30 away
		{ms(75), 2},    // a tie goes to the later sample
		{ms(140), 3},   // 150 is nearest
		{ms(900), 3},   // after the newest: the newest
		{-ms(1000), 1}, // before the oldest kept (t0 was evicted): the oldest
	}
	for _, c := range cases {
		s, ok := h.Nearest(t0.Add(c.at))
		if !ok || s.Routed != c.want {
			t.Errorf("Nearest(t0%+v) = sample %d (ok %v), want %d", c.at, s.Routed, ok, c.want)
		}
	}
}

// Two peers each published {2, 2048, 10} on w1 at t0; this replica had
// {1, 1024, 5} there at its sample nearest t0 (t0−10ms; the next one,
// t0+40ms, is farther) and has {4, 4096, 20} now. Each peer is assumed to
// have changed as this replica did since: +3 requests, +3072 tokens,
// +15 blocks, so each is at {5, 5120, 25} and both at {10, 10240, 50}.
func TestPeerEstimateExtrapolatesOwnChange(t *testing.T) {
	snap := map[kvfleet.WorkerID]picker.Load{w1: {InflightRequests: 2, PrefillTokens: 2048, DecodeBlocks: 10}}
	own := history(
		OwnSample{At: t0.Add(-ms(10)), Loads: map[kvfleet.WorkerID]picker.Load{w1: {InflightRequests: 1, PrefillTokens: 1024, DecodeBlocks: 5}}},
		OwnSample{At: t0.Add(ms(40)), Loads: map[kvfleet.WorkerID]picker.Load{w1: {InflightRequests: 3, PrefillTokens: 3072, DecodeBlocks: 15}}},
	)
	v := NewPeerView([]PeerSnapshot{{At: t0, Workers: snap, Share: 1}, {At: t0, Workers: snap, Share: 1}}, own)
	if v.Replicas != 2 {
		t.Fatalf("replicas %d, want 2", v.Replicas)
	}
	if got, want := v.PublishedLoad(w1), (picker.Load{InflightRequests: 4, PrefillTokens: 4096, DecodeBlocks: 20}); got != want {
		t.Errorf("published %+v, want %+v", got, want)
	}
	now := picker.Load{InflightRequests: 4, PrefillTokens: 4096, DecodeBlocks: 20}
	if got, want := v.Estimate(w1, now), (picker.Load{InflightRequests: 10, PrefillTokens: 10240, DecodeBlocks: 50}); got != want {
		t.Errorf("estimate %+v, want %+v", got, want)
	}
	// No own change since the baseline: the snapshot as published.
	if got, want := v.Estimate(w1, picker.Load{InflightRequests: 1, PrefillTokens: 1024, DecodeBlocks: 5}), v.PublishedLoad(w1); got != want {
		t.Errorf("estimate with no own change %+v, want the published %+v", got, want)
	}
	// A worker nobody had load on, where this replica now has 2 in flight:
	// each peer likely sent 2 as well.
	if got, want := v.Estimate(w2, picker.Load{InflightRequests: 2}), (picker.Load{InflightRequests: 4}); got != want {
		t.Errorf("estimate on %s %+v, want %+v", w2, got, want)
	}
}

// Completions are extrapolated too, and the result never goes negative.
func TestPeerEstimateFollowsCompletionsAndClamps(t *testing.T) {
	own := history(OwnSample{At: t0, Loads: map[kvfleet.WorkerID]picker.Load{w1: {InflightRequests: 3, DecodeBlocks: 30}}})
	peer := PeerSnapshot{At: t0, Workers: map[kvfleet.WorkerID]picker.Load{w1: {InflightRequests: 3, DecodeBlocks: 30}}, Share: 1}
	v := NewPeerView([]PeerSnapshot{peer}, own)
	// This replica finished 2 of its 3 since: so, likely, did the peer.
	if got, want := v.Estimate(w1, picker.Load{InflightRequests: 1, DecodeBlocks: 10}), (picker.Load{InflightRequests: 1, DecodeBlocks: 10}); got != want {
		t.Errorf("estimate %+v, want %+v", got, want)
	}
	// A peer with less than this replica's drop: 1 − 3 is clamped to 0.
	small := PeerSnapshot{At: t0, Workers: map[kvfleet.WorkerID]picker.Load{w1: {InflightRequests: 1}}, Share: 1}
	v = NewPeerView([]PeerSnapshot{small}, own)
	if got := v.Estimate(w1, picker.Load{}); got != (picker.Load{}) {
		t.Errorf("estimate %+v, want zero (clamped)", got)
	}
}

// The share scales the extrapolation: 0 leaves the snapshot as published,
// 0.5 adds half this replica's change. No history: no extrapolation.
func TestPeerEstimateShare(t *testing.T) {
	own := history(OwnSample{At: t0, Loads: map[kvfleet.WorkerID]picker.Load{w1: {InflightRequests: 2}}})
	snap := map[kvfleet.WorkerID]picker.Load{w1: {InflightRequests: 2}}
	now := picker.Load{InflightRequests: 6}
	cases := []struct {
		share float64
		own   *OwnHistory
		want  int
	}{
		{0, own, 2},
		{0.5, own, 4}, // 2 + 0.5 × (6 − 2)
		{1, own, 6},
		{math.NaN(), own, 2},
		{100, own, 2 + 4*4}, // capped at maxShare
		{1, nil, 2},
		{1, NewOwnHistory(4), 2},
	}
	for _, c := range cases {
		v := NewPeerView([]PeerSnapshot{{At: t0, Workers: snap, Share: c.share}}, c.own)
		if got := v.Estimate(w1, now).InflightRequests; got != c.want {
			t.Errorf("share %v (history %v): %d in flight, want %d", c.share, c.own != nil, got, c.want)
		}
	}
	var none *PeerView
	if got := none.Estimate(w1, now); got != (picker.Load{}) {
		t.Errorf("nil view: %+v", got)
	}
	if got := (&PeerView{}).Estimate(w1, now); got != (picker.Load{}) {
		t.Errorf("empty view: %+v", got)
	}
}

func TestShareTracker(t *testing.T) {
	var s ShareTracker
	if got := s.Share(); got != 1 {
		t.Fatalf("share before evidence %v, want 1", got)
	}
	s.Observe(100, 500, t0) // the first observation is only the baseline
	if got := s.Share(); got != 1 {
		t.Fatalf("share after the baseline %v, want 1", got)
	}
	// The peer routed 12 while this replica routed 36: (12+4)/(36+4).
	s.Observe(112, 536, t0)
	if got, want := s.Share(), 16.0/40.0; math.Abs(got-want) > 1e-12 {
		t.Fatalf("share %v, want %v", got, want)
	}
	// One time constant of silence: both sums decay by e.
	s.Observe(112, 536, t0.Add(ShareTimeConstant))
	if got, want := s.Share(), (12/math.E+4)/(36/math.E+4); math.Abs(got-want) > 1e-12 {
		t.Fatalf("share after %v %v, want %v", ShareTimeConstant, got, want)
	}
	// A live peer that routes nothing while this replica routes 400:
	// its share falls towards 0.
	var idle ShareTracker
	idle.Observe(7, 0, t0)
	idle.Observe(7, 400, t0.Add(ms(500)))
	if got, want := idle.Share(), 4.0/404.0; math.Abs(got-want) > 1e-12 {
		t.Fatalf("idle peer's share %v, want %v", got, want)
	}
	// A counter going backwards adds nothing and becomes the new baseline.
	idle.Observe(3, 400, t0.Add(ms(500)))
	idle.Observe(5, 400, t0.Add(ms(500)))
	if got, want := idle.Share(), 6.0/404.0; math.Abs(got-want) > 1e-12 {
		t.Fatalf("share after a counter reset %v, want %v", got, want)
	}
}

// The herd the extrapolation prevents, with the real picker: a burst of
// requests sharing one cached prefix arrives round-robin at 3 replicas
// within one staleness window (the peers' snapshots, taken when the burst
// began, show nothing). One replica seeing everything sends the holder n1
// requests before the first goes elsewhere (the oracle). Three replicas
// reading only the stale snapshot each send it n1: 3·n1, the herd.
// Extrapolating each peer's load from the replica's own change (share 1
// each, as Envoy's even spread gives) brings it back to n1, plus at most
// the 2 decisions the other replicas made earlier in the same round, which
// a replica cannot see.
func TestExtrapolationStopsTheHerd(t *testing.T) {
	cases := []struct {
		name   string
		policy string
		prompt int // tokens, block size 16
		prefix int // blocks cached on the holder
		decode bool
	}{
		// The router's accounting: decode blocks dominate, n1 is small.
		{"kvgate policy, router accounting", picker.PolicyKvgate, 5120, 256, true},
		// Prefill-bound: only queued prefill tells the holder from the
		// others, so the holder absorbs many before spreading.
		{"dynamo policy, prefill only", picker.PolicyDynamo, 8192, 480, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkHerd(t, c.policy, c.prompt, c.prefix, c.decode) })
	}
}

func checkHerd(t *testing.T, policy string, prompt, prefix int, decode bool) {
	const (
		workers  = 4
		requests = 120
		replicas = 3
	)
	ids := make([]kvfleet.WorkerID, workers)
	for i := range ids {
		ids[i] = kvfleet.WorkerID{Endpoint: fmt.Sprintf("10.0.0.%d:8000", i+1)}
	}
	holder := ids[0]
	cfg := picker.DefaultConfig()
	cfg.Policy = policy
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	req := picker.Request{Stage: picker.StageAggregated, PromptTokens: prompt, BlockSize: 16, Blocks: prompt / 16, ExpectedOutputTokens: 32}
	// route sends the burst through n replicas round-robin and returns how
	// many went to the holder before the first went elsewhere; peerLoad is
	// a replica's view of the others' load on w given its own.
	route := func(n int, peerLoad func(w kvfleet.WorkerID, own picker.Load) picker.Load) int {
		views := make([]*View, n)
		for i := range views {
			views[i] = New()
		}
		for i := range requests {
			v := views[i%n]
			cands := make([]picker.Candidate, workers)
			for j, id := range ids {
				own := v.Snapshot(id)
				l, p := own, peerLoad(id, own)
				l.InflightRequests += p.InflightRequests
				l.PrefillTokens += p.PrefillTokens
				l.DecodeBlocks += p.DecodeBlocks
				cands[j] = picker.Candidate{Worker: picker.Worker{ID: id, Endpoint: id.Endpoint}, Load: l}
				if id == holder {
					cands[j].Depths = kvfleet.Depths{prefix, prefix, prefix, prefix}
				}
			}
			d, err := picker.Pick(req, cands, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			chosen := cands[d.Primary]
			if chosen.Worker.ID != holder {
				return i
			}
			decodeBlocks := int64(0)
			if decode {
				decodeBlocks = int64(prompt+32) / 16
			}
			v.Begin(holder, int64(prompt-prefix*16), decodeBlocks, t0)
		}
		return requests
	}
	none := func(kvfleet.WorkerID, picker.Load) picker.Load { return picker.Load{} }
	n1 := route(1, none)
	stale := route(replicas, none) // the peers' snapshots from before the burst: empty
	// Each replica's peers: their empty snapshots from the burst's start,
	// extrapolated from its own change since (its own load was empty then).
	start := history(OwnSample{At: t0, Loads: map[kvfleet.WorkerID]picker.Load{}})
	empty := PeerSnapshot{At: t0, Workers: map[kvfleet.WorkerID]picker.Load{}, Share: 1}
	pv := NewPeerView([]PeerSnapshot{empty, empty}, start)
	extrapolated := route(replicas, pv.Estimate)
	t.Logf("requests on the prefix holder before the first spill: 1 replica %d, %d on stale snapshots %d, %d extrapolating %d",
		n1, replicas, stale, replicas, extrapolated)
	if n1 < 1 || n1 >= requests/replicas {
		t.Fatalf("the oracle sent %d of %d to the holder first: the scenario does not test spreading", n1, requests)
	}
	if stale != replicas*n1 {
		t.Fatalf("stale snapshots sent %d to the holder, want %d × 1 replica's %d (the herd)", stale, replicas, n1)
	}
	if extrapolated < n1 || extrapolated > n1+replicas-1 {
		t.Fatalf("extrapolating replicas sent %d to the holder, want 1 replica's %d plus at most %d", extrapolated, n1, replicas-1)
	}
}
