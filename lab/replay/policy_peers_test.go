package replay

import (
	"testing"
	"time"

	"github.com/kvgate/kvgate/extproc/loadview"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

func peerSimulation(t *testing.T, policy string, workers int) *simulation {
	t.Helper()
	reqs, err := LoadTrace("testdata/conversation_head300.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{Workers: workers, Seed: 1, Policies: []string{policy}}
	if err := opt.fill(); err != nil {
		t.Fatal(err)
	}
	s, err := newSimulation(policy, 0, reqs, &opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

// llm-d's profile: on idle engines (equal queues and KV usage) the deepest
// prefix holder wins; a holder of fewer blocks scores 0 on the prefix term
// (min-max over holders), like a worker holding none.
func TestLLMDProfilePrefersDeepestHolder(t *testing.T) {
	s := peerSimulation(t, PolicyLLMD, 3)
	m := new(kvindex.Match)
	m.Add(s.workers[1].ID, kvfleet.Depths{3})
	m.Add(s.workers[2].ID, kvfleet.Depths{1})
	for range 20 {
		if got := s.pickLLMD(m); got != 1 {
			t.Fatalf("picked worker %d, want 1 (the deepest holder)", got)
		}
	}
	// No holder: every score ties, and the pick is spread at random.
	seen := map[int]bool{}
	for range 60 {
		seen[s.pickLLMD(nil)] = true
	}
	if len(seen) != 3 {
		t.Fatalf("ties went to %v, want all three workers", seen)
	}
}

// SGLang's router: cache affinity above cache_threshold of the prompt,
// the smallest tree below it, and the least-loaded worker once in-flight
// counts are imbalanced by both thresholds.
func TestSGLangCacheAwareRouter(t *testing.T) {
	s := peerSimulation(t, PolicySGLang, 3)
	a := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if w := s.pickSGLang(a, 0); w != 0 {
		t.Fatalf("first request went to %d, want 0 (all trees empty: the first smallest)", w)
	}
	// Worker 0's tree holds a; a prompt sharing 4 of 10 blocks (> 0.3) follows it.
	b := append([]uint64{1, 2, 3, 4}, 21, 22, 23, 24, 25, 26)
	if w := s.pickSGLang(b, time.Second); w != 0 {
		t.Fatalf("40%% match went to %d, want 0", w)
	}
	// 2 of 10 (0.2 ≤ 0.3): the smallest tree, worker 1.
	c := append([]uint64{1, 2}, 31, 32, 33, 34, 35, 36, 37, 38)
	if w := s.pickSGLang(c, 2*time.Second); w != 1 {
		t.Fatalf("20%% match went to %d, want 1 (smallest tree)", w)
	}
	// 70 in flight on worker 0, 2 on the others: spread 68 > 64 and 70 > 1.5×2.
	var tks []*loadview.Ticket
	for range 70 {
		tks = append(tks, s.load.Begin(s.workers[0].ID, 0, 0, epoch))
	}
	for _, w := range s.workers[1:] {
		tks = append(tks, s.load.Begin(w.ID, 0, 0, epoch), s.load.Begin(w.ID, 0, 0, epoch))
	}
	tks = append(tks, s.load.Begin(s.workers[1].ID, 0, 0, epoch))
	if w := s.pickSGLang(a, 3*time.Second); w != 2 {
		t.Fatalf("imbalanced: went to %d, want 2 (least loaded)", w)
	}
	if n, _ := s.sglang.match(a); n != len(a) {
		t.Fatalf("the imbalanced pick was not inserted: match %d", n)
	}
	for _, tk := range tks {
		tk.Finish(loadview.OutcomeCompleted)
	}
	// Eviction trims the least recently sent blocks past the bound.
	s.sglang.evict(sglangEvictionInterval+3*time.Second, 4)
	for w, b := range s.sglang.blocks {
		if len(b) > 4 {
			t.Fatalf("worker %d's tree holds %d blocks after eviction to 4", w, len(b))
		}
	}
}

// kvgate-flow replays through the extproc's queue: at 4× the trace's rate
// on two workers the fleet saturates, requests wait (a queue wait is
// measured) and every request ends routed or refused; goodput counts only
// the requests within the SLA.
func TestKvgateFlowReplayWaitsPastSaturation(t *testing.T) {
	reqs, err := LoadTrace("testdata/conversation_head300.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(t.Context(), "slice", reqs, Options{Workers: 2, Seed: 3, RateScale: 4, Policies: []string{PolicyKvgate, PolicyKvgateFlow}})
	if err != nil {
		t.Fatal(err)
	}
	f, k := res.Policies[PolicyKvgateFlow], res.Policies[PolicyKvgate]
	if f.QueueWaitP99Ms <= 0 {
		t.Fatalf("no request waited: %+v", f)
	}
	if len(f.TTFTsMs)+f.Refused != 300 || f.ShedRate != float64(f.Refused)/300 {
		t.Fatalf("%d answered + %d refused of 300 (shed rate %v)", len(f.TTFTsMs), f.Refused, f.ShedRate)
	}
	for _, r := range []*PolicyResult{f, k} {
		met := 0
		for _, ms := range r.TTFTsMs {
			if ms <= msOf(DefaultGoodputSLA) {
				met++
			}
		}
		if r.SLAAttainment != float64(met)/300 || r.GoodputRPS <= 0 {
			t.Fatalf("attainment %v goodput %v, want %d/300 met", r.SLAAttainment, r.GoodputRPS, met)
		}
	}
}
