package replay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/kvgate/kvgate/extproc/loadview"
	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/ingest"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/picker"
)

// epoch maps virtual time onto the time.Time that loadview and Recent take.
var epoch = time.Unix(1_000_000_000, 0)

// simulation is one policy's replay on a fresh fleet. It is a discrete-
// event loop over two kinds of events, in time order: trace arrivals and
// engine step ends. At equal times arrivals go first, so that a request
// arriving when a step ends joins the next step.
type simulation struct {
	policy string
	opt    *Options
	reqs   []TraceRequest

	engines []*enginesim.Engine
	workers []picker.Worker
	load    *loadview.View
	idx     *kvindex.Memory   // dynamo, kvgate: fed by KV events
	ingest  []*ingest.Worker  // per engine
	recent  *loadview.Recent  // approx-prefix: kvgate's own decisions
	pending *loadview.Pending // kvgate: own decisions beside the index
	est     []*picker.ThroughputEstimator
	pick    picker.Config
	rnd     *rand.Rand
	rr      int
	seed    uint64 // block-hash seed (no LoRA, no namespace)
	ingErr  error

	tiers []*enginesim.StoreTier // with Options.HostBlocks
	// sglang is SGLang's approximate tree (PolicySGLang).
	sglang *sglangTree
	// flow is kvgate-flow's waiting room (flow.go); dispatching marks a
	// request leaving it, which is not admitted again.
	flow        *flowState
	dispatching bool
	// clients is each request's outcome and deadline (abandon.go).
	clients *clientState

	flights []flight
	cands   []picker.Candidate
	dec     picker.Decision
	// termSum adds up each listed term's column at the chosen worker,
	// over picks (picker policies): PolicyResult.TermMeans.
	termSum [picker.NumTerms]float64
	picks   int

	// results
	routed                []int
	ttft, e2e, itl        []float64
	cachedTok, promptTok  int64
	bucket                time.Duration
	bucketCached, bucketP []int64
	firstArrival, lastEnd time.Duration
	completed             int
}

type flight struct {
	ticket   *loadview.Ticket
	worker   int
	uncached int64
	arrival  time.Duration
}

func newSimulation(policy string, idx uint64, reqs []TraceRequest, opt *Options) (*simulation, error) {
	s := &simulation{
		policy:  policy,
		opt:     opt,
		reqs:    reqs,
		load:    loadview.New(),
		rnd:     rand.New(rand.NewPCG(opt.Seed, 0x7265706c6179+idx)),
		seed:    blockhash.Seed("", ""),
		flights: make([]flight, len(reqs)),
		routed:  make([]int, opt.Workers),
	}
	s.clients = newClientState(len(reqs), opt)
	s.pick = picker.DefaultConfig()
	s.pick.Fallbacks = 0
	switch policy {
	case PolicyKvgate, PolicyKvgateEventsOnly, PolicyKvgateFlow:
		if opt.Kvgate != nil {
			s.pick = *opt.Kvgate
			s.pick.Fallbacks = 0
		}
		s.pick.Policy = picker.PolicyKvgate
	case PolicyDynamo, PolicyApproxPrefix:
		s.pick.Policy = picker.PolicyDynamo
	}
	if policy == PolicyDynamo || policy == PolicyLLMD || policy == PolicyKvgate || policy == PolicyKvgateEventsOnly || policy == PolicyKvgateFlow {
		s.idx = kvindex.NewMemory(kvindex.MemoryConfig{})
	}
	if policy == PolicyKvgateFlow {
		f, err := newFlowState(len(reqs), opt)
		if err != nil {
			return nil, err
		}
		s.flow = f
	}
	if policy == PolicyKvgate || policy == PolicyKvgateFlow {
		r, err := loadview.NewPending(loadview.RecentConfig{TTL: PendingPrefixTTL, MaxEntries: min(1<<26, max(1<<18, 4*opt.Workers*opt.GPUBlocks))})
		if err != nil {
			return nil, err
		}
		s.pending = r
	}
	if policy == PolicyApproxPrefix {
		// Dynamo's approximate indexer TTL (120 s), with room for every
		// (block, worker) pair the fleet's caches could hold.
		r, err := loadview.NewRecent(loadview.RecentConfig{TTL: 120 * time.Second, MaxEntries: min(1<<26, max(1<<18, 4*opt.Workers*opt.GPUBlocks))})
		if err != nil {
			return nil, err
		}
		s.recent = r
	}
	ecfg := opt.engineConfig()
	for i := 0; i < opt.Workers; i++ {
		id := kvfleet.WorkerID{Endpoint: fmt.Sprintf("10.0.0.%d:8000", i+1), DPRank: 0}
		if i >= 250 {
			id.Endpoint = fmt.Sprintf("10.0.%d.%d:8000", i/250, i%250+1)
		}
		s.workers = append(s.workers, picker.Worker{ID: id, Endpoint: id.Endpoint, Role: picker.RoleBoth})
		var on func([]kvevents.Event)
		if s.idx != nil {
			w := ingest.NewWorker(id, s.idx, ingest.Config{BlockSize: opt.BlockSize, MaxBlocks: 2*(opt.GPUBlocks+opt.HostBlocks) + 1024})
			s.ingest = append(s.ingest, w)
			on = func(evs []kvevents.Event) {
				if err := w.Apply(context.Background(), kvevents.Batch{Events: evs}); err != nil && s.ingErr == nil {
					s.ingErr = err
				}
			}
		}
		cfg := ecfg
		if opt.HostBlocks > 0 {
			tier, err := enginesim.NewStoreTier(enginesim.StoreTierConfig{HostBlocks: opt.HostBlocks, CopyBlockBytes: opt.HostBlockBytes}, on)
			if err != nil {
				s.close()
				return nil, err
			}
			s.tiers = append(s.tiers, tier)
			cfg.KVTier = tier
		}
		e, err := enginesim.New(cfg, on)
		if err != nil {
			s.close()
			return nil, err
		}
		s.engines = append(s.engines, e)
		est, err := picker.NewThroughputEstimator(picker.DefaultThroughputAlpha, 0)
		if err != nil {
			return nil, err
		}
		s.est = append(s.est, &est)
	}
	s.firstArrival = opt.arrival(reqs[0])
	span := opt.arrival(reqs[len(reqs)-1]) - s.firstArrival
	s.bucket = max(time.Second, span/60)
	n := int(span/s.bucket) + 1
	s.bucketCached, s.bucketP = make([]int64, n), make([]int64, n)
	return s, nil
}

// close drops the host tiers' arenas.
func (s *simulation) close() {
	for _, t := range s.tiers {
		_ = t.Close()
	}
	s.tiers = nil
}

func (s *simulation) run(ctx context.Context) (*PolicyResult, error) {
	defer s.close()
	next := 0
	var toks []uint32
	progressEvery := max(1, len(s.reqs)/100)
	for {
		tEng, w, busy := s.nextEngineEvent()
		// A client's deadline goes after arrivals and engine events at the
		// same time: a first token exactly at the deadline counts.
		if d, i, ok := s.nextDeadline(); ok && (next >= len(s.reqs) || d < s.opt.arrival(s.reqs[next])) && (!busy || d < tEng) {
			if err := s.abandon(i, d); err != nil {
				return nil, err
			}
			continue
		}
		if next < len(s.reqs) {
			at := s.opt.arrival(s.reqs[next])
			if !busy || at <= tEng {
				if next%progressEvery == 0 {
					if err := ctx.Err(); err != nil {
						return nil, err
					}
					if s.opt.Progress != nil {
						s.opt.Progress(s.policy, next, len(s.reqs))
					}
				}
				toks = nil // the engine keeps the prompt until the request ends
				toks = Tokens(toks, s.reqs[next])
				if err := s.route(next, toks, at); err != nil {
					return nil, err
				}
				next++
				continue
			}
		}
		if !busy {
			break
		}
		for _, o := range s.engines[w].Advance(tEng) {
			s.observe(o)
		}
		if err := s.pumpFlow(tEng); err != nil {
			return nil, err
		}
		if s.ingErr != nil {
			return nil, fmt.Errorf("KV events of %s: %w", s.workers[w].ID, s.ingErr)
		}
		if len(s.tiers) > 0 {
			if err := s.tiers[w].Err(); err != nil {
				return nil, fmt.Errorf("host tier of %s: %w", s.workers[w].ID, err)
			}
		}
	}
	if s.opt.Progress != nil {
		s.opt.Progress(s.policy, len(s.reqs), len(s.reqs))
	}
	if s.completed+s.refused()+s.abandoned() != len(s.reqs) {
		return nil, fmt.Errorf("%d of %d requests completed (%d refused, %d abandoned)", s.completed, len(s.reqs), s.refused(), s.abandoned())
	}
	r := s.result()
	s.goodput(r)
	var hostTok uint64
	for _, e := range s.engines {
		hostTok += e.Stats().TierHitTokens
	}
	if s.promptTok > 0 && hostTok > 0 {
		r.HostHitRatio = float64(hostTok) / float64(s.promptTok)
	}
	for _, w := range s.ingest {
		for _, n := range w.Stats().Rejected {
			r.IndexRejects += n
		}
	}
	return r, nil
}

// nextEngineEvent is the earliest engine event and its engine.
func (s *simulation) nextEngineEvent() (time.Duration, int, bool) {
	best, w, ok := time.Duration(0), -1, false
	for i, e := range s.engines {
		if t, has := e.NextEventTime(); has && (!ok || t < best) {
			best, w, ok = t, i, true
		}
	}
	return best, w, ok
}

// route chooses a worker for request i arriving at `at` and submits it.
func (s *simulation) route(i int, toks []uint32, at time.Duration) error {
	if s.flow != nil && !s.dispatching && s.admitFlow(i, at) {
		return nil // waiting, or refused
	}
	r := s.reqs[i]
	now := epoch.Add(at)
	bs := s.opt.BlockSize
	var chain []uint64
	if s.policy == PolicyApproxPrefix || s.policy == PolicySGLang || s.idx != nil {
		chain = blockhash.SequenceHashes(blockhash.LocalHashes(toks, bs, s.seed))
	}
	expected := min(max(1, r.OutputLength), picker.MaxOutputTokens)
	var w int
	var depths kvfleet.Depths
	switch s.policy {
	case PolicyRandom:
		w = s.rnd.IntN(len(s.engines))
	case PolicyRoundRobin:
		w = s.rr
		s.rr = (s.rr + 1) % len(s.engines)
	case PolicyLeastLoaded:
		w = s.leastLoaded()
	case PolicySGLang:
		w = s.pickSGLang(chain, at)
	case PolicyLLMD:
		m := new(kvindex.Match)
		if err := s.idx.Match(context.Background(), chain, m); err != nil {
			return fmt.Errorf("index match: %w", err)
		}
		w = s.pickLLMD(m)
		depths, _ = m.Lookup(s.workers[w].ID)
	default:
		m := new(kvindex.Match)
		if s.recent != nil {
			s.recent.Match(chain, now, m)
		} else {
			if err := s.idx.Match(context.Background(), chain, m); err != nil {
				return fmt.Errorf("index match: %w", err)
			}
			if s.pending != nil {
				s.pending.Merge(m, chain, now)
			}
		}
		// Candidates as extproc's gatherer (extproc/gather.go) builds them: index
		// depths, kvgate's own load accounting and the measured prefill rate.
		s.cands = s.cands[:0]
		for j, wk := range s.workers {
			l := s.load.Snapshot(wk.ID)
			if est := s.est[j]; est.Samples() > 0 {
				l.PrefillTokensPerSec = est.Rate()
			}
			d, _ := m.Lookup(wk.ID)
			s.cands = append(s.cands, picker.Candidate{Worker: wk, Depths: d, Load: l})
		}
		s.steerOffSaturated()
		preq := picker.Request{Stage: picker.StageAggregated, PromptTokens: len(toks), BlockSize: bs, Blocks: len(chain), ExpectedOutputTokens: expected}
		if err := picker.PickInto(&s.dec, preq, s.cands, s.pick, s.rnd); err != nil {
			return fmt.Errorf("trace line %d: pick: %w", r.Line, err)
		}
		w = s.dec.Primary
		depths = s.cands[w].Depths
		for id, v := range s.dec.Terms[w].Parts {
			s.termSum[id] += v
		}
		s.picks++
	}
	id := s.workers[w].ID
	// Load accounting as extproc's book stage (extproc/book.go) does it.
	uncached := int64(len(toks) - depths[kvfleet.TierDevice]*bs)
	decodeBlocks := int64((len(toks) + expected + bs - 1) / bs)
	s.flights[i] = flight{ticket: s.load.Begin(id, uncached, decodeBlocks, now), worker: w, uncached: uncached, arrival: at}
	if s.recent != nil {
		s.recent.Record(id, chain, now)
	}
	if s.pending != nil {
		s.pending.Record(id, chain, now)
	}
	s.routed[w]++
	err := s.engines[w].Submit(enginesim.Request{ID: strconv.Itoa(i), Tokens: toks, MaxTokens: max(1, r.OutputLength), Arrival: at})
	if err != nil {
		return fmt.Errorf("trace line %d: %w", r.Line, err)
	}
	return nil
}

// leastLoaded is the worker with the fewest requests in flight (kvgate's
// own count); ties are broken at random.
func (s *simulation) leastLoaded() int {
	best, ties, bestN := 0, 0, 0
	for j, wk := range s.workers {
		n := s.load.Snapshot(wk.ID).InflightRequests
		switch {
		case j == 0 || n < bestN:
			best, bestN, ties = j, n, 1
		case n == bestN:
			ties++
			if s.rnd.IntN(ties) == 0 {
				best = j
			}
		}
	}
	return best
}

// observe handles an engine record: the first token releases the prefill
// accounting and feeds the throughput estimate (extproc's ticket.FirstByte);
// completion releases the rest and records the request's figures.
func (s *simulation) observe(o enginesim.Output) {
	i, err := strconv.Atoi(o.ID)
	if err != nil || i < 0 || i >= len(s.flights) {
		return
	}
	f := &s.flights[i]
	if !o.Done {
		s.clients.settled[i] = true
		f.ticket.PrefillDone()
		secs := (o.FirstTokenAt - f.arrival).Seconds()
		if f.uncached > 0 && secs > 0 {
			_ = s.est[f.worker].Observe(f.uncached, secs)
		}
		return
	}
	f.ticket.Finish(loadview.OutcomeCompleted)
	s.completed++
	s.lastEnd = max(s.lastEnd, o.FinishedAt)
	ttft := o.FirstTokenAt - o.Arrival
	if s.flow != nil {
		ttft += s.flow.waited[i] // from the request's arrival, its wait included
	}
	s.ttft = append(s.ttft, msOf(ttft))
	s.clients.ttft[i] = ttft
	s.e2e = append(s.e2e, msOf(o.FinishedAt-o.Arrival))
	if o.OutputTokens >= 2 {
		s.itl = append(s.itl, msOf(o.MeanITL()))
	}
	s.cachedTok += int64(o.CachedTokens)
	s.promptTok += int64(o.PromptTokens)
	b := min(int((o.Arrival-s.firstArrival)/s.bucket), len(s.bucketP)-1)
	s.bucketCached[b] += int64(o.CachedTokens)
	s.bucketP[b] += int64(o.PromptTokens)
	f.ticket = nil
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
