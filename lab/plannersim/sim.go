package plannersim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// Epoch maps simulated time onto the time.Time a plan.Observation carries.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Result is one policy's run.
type Result struct {
	Policy        string  `json:"-"`
	Requests      int     `json:"-"`              // scored: arriving after the load's warm-up
	SLAAttainment float64 `json:"sla_attainment"` // fraction of requests meeting both TTFT and ITL targets
	GPUHours      float64 `json:"gpu_hours"`
	TTFTP90Ms     float64 `json:"ttft_p90_ms"`
	ITLP90Ms      float64 `json:"itl_p90_ms"`
	ScaleEvents   int     `json:"scale_events"` // decisions that changed a pool's target, counted per pool
	// TTFTAttainment and ITLAttainment split SLAAttainment by target.
	TTFTAttainment float64 `json:"-"`
	ITLAttainment  float64 `json:"-"`
	// MeanInSystem is the time-averaged number of requests in the fleet
	// (queued or on a replica) over the horizon, sampled every second;
	// MeanLatencyMs the mean arrival-to-last-token time (Little's law:
	// MeanInSystem ≈ arrival rate × MeanLatency on a steady load).
	MeanInSystem  float64 `json:"-"`
	MeanLatencyMs float64 `json:"-"`
	// Static is the per-pool size of a static fleet, nil for others.
	Static   map[string]int `json:"-"`
	Timeline []Point        `json:"-"`
}

// Point is the fleet at one decision time, for charts.
type Point struct {
	T        time.Duration
	Serving  map[string]int // ready + provisioning, per pool
	Ready    map[string]int
	Billed   int     // GPUs billed (ready + provisioning + draining)
	Rate     float64 // requests per second arriving over the interval
	TTFTP90  float64 // ms, requests whose first token came in the interval
	ITLP90   float64 // ms, requests finished in the interval
	Decision string  // the policy's reason
}

// Initializer is implemented by policies that know their starting size
// (static fleets); others start at Config.Initial.
type Initializer interface {
	Initial() map[string]int
}

// flight is one request's progress.
type flight struct {
	arrival    time.Duration
	firstToken time.Duration
	prefill    *replica // the replica holding the request (agg: the only one)
	decode     *replica
	done       bool
}

// run is one policy's simulation.
type run struct {
	cfg    Config
	load   *Load
	policy plan.Policy
	fleet  *fleet
	obs    *observer
	fl     []flight

	ttft, itl []float64 // ms per request, by request
	e2eSum    float64   // ms, summed over scored requests
	scored    int
	completed int
	events    int // loop iterations, for cancellation checks
}

// Run simulates load on a fleet sized by policy. The load must be
// normalized (Load.Normalize); Run does not change it.
func Run(ctx context.Context, cfg Config, load *Load, policy plan.Policy) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := load.Validate(); err != nil {
		return nil, err
	}
	for i, r := range load.Requests {
		if r.HashIDs == nil {
			return nil, fmt.Errorf("load %s: request %d has no hash ids (call Normalize)", load.Name, i)
		}
	}
	s := &run{
		cfg: cfg, load: load, policy: policy,
		fleet: newFleet(cfg, load.WarmUp, load.End()),
		fl:    make([]flight, len(load.Requests)),
		ttft:  make([]float64, len(load.Requests)),
		itl:   make([]float64, len(load.Requests)),
	}
	s.obs = newObserver(s.fleet)
	initial := cfg.Initial
	if in, ok := policy.(Initializer); ok {
		initial = in.Initial()
	}
	for _, p := range s.fleet.order {
		n, ok := initial[p.name]
		if !ok {
			n = cfg.MinReplicas
		}
		n = min(max(n, cfg.MinReplicas), cfg.MaxReplicas)
		p.target = n
		for range n {
			if _, err := s.fleet.add(p, 0, 0); err != nil {
				return nil, err
			}
		}
	}
	if err := s.loop(ctx); err != nil {
		return nil, fmt.Errorf("policy %s: %w", policy.Name(), err)
	}
	return s.result(), nil
}

// The loop handles, in time order, four kinds of events; at equal times:
// replicas becoming ready, then arrivals (so that a request arriving when a
// step ends joins the next step, as lab/replay does), then engine step
// ends, then metric samples and decisions (which see everything up to
// their time).
func (s *run) loop(ctx context.Context) error {
	next := 0
	horizon := s.load.End()
	nextSample, nextDecide := sampleEvery, s.cfg.Interval
	for {
		if s.events++; s.events%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		tReady, hasReady := s.fleet.nextReady()
		tEng, eng, hasEng := s.nextEngine()
		tArr, hasArr := time.Duration(0), next < len(s.load.Requests)
		if hasArr {
			tArr = s.load.Requests[next].Arrival
		}
		tTick := min(nextSample, nextDecide)
		hasTick := tTick <= horizon
		switch {
		case hasReady && (!hasArr || tReady <= tArr) && (!hasEng || tReady <= tEng) && (!hasTick || tReady <= tTick):
			s.fleet.accrue(tReady)
			if err := s.becomeReady(tReady); err != nil {
				return err
			}
		case hasArr && (!hasEng || tArr <= tEng) && (!hasTick || tArr <= tTick):
			s.fleet.accrue(tArr)
			if err := s.arrive(next, tArr); err != nil {
				return err
			}
			next++
		case hasEng && (!hasTick || tEng <= tTick):
			s.fleet.accrue(tEng)
			for _, o := range eng.eng.Advance(tEng) {
				if err := s.output(eng, o, tEng); err != nil {
					return err
				}
			}
		case hasTick:
			s.fleet.accrue(tTick)
			if tTick == nextSample {
				s.obs.sample(tTick > s.load.WarmUp)
				nextSample += sampleEvery
			}
			if tTick == nextDecide {
				if err := s.decide(tTick); err != nil {
					return err
				}
				nextDecide += s.cfg.Interval
			}
		default:
			s.fleet.accrue(horizon)
			if s.completed != len(s.load.Requests) {
				return fmt.Errorf("%d of %d requests completed, and nothing left to run", s.completed, len(s.load.Requests))
			}
			return nil
		}
	}
}

// nextEngine is the replica whose engine has the earliest event.
func (s *run) nextEngine() (time.Duration, *replica, bool) {
	var best *replica
	var bt time.Duration
	for _, p := range s.fleet.order {
		for _, r := range p.replicas {
			if r.state == provisioning {
				continue
			}
			if t, ok := r.eng.NextEventTime(); ok && (best == nil || t < bt) {
				best, bt = r, t
			}
		}
	}
	return bt, best, best != nil
}

func (s *run) becomeReady(t time.Duration) error {
	for _, p := range s.fleet.order {
		for _, r := range p.replicas {
			if r.state == provisioning && r.readyAt <= t {
				r.state, r.busySince = ready, t
			}
		}
		// Requests that found no ready replica go now.
		queued := p.queue
		p.queue = nil
		for _, i := range queued {
			if err := s.route(p, i, t); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *run) firstPool() *pool { return s.fleet.order[0] }

func (s *run) arrive(i int, t time.Duration) error {
	s.fl[i].arrival = t
	p := s.firstPool()
	r := s.load.Requests[i]
	s.obs.arrival(p.name, r)
	if s.cfg.Mode == Disaggregated {
		s.obs.arrival(plan.PoolDecode, r)
	}
	return s.route(p, i, t)
}

// route submits request i to pool p's least-loaded ready replica, or queues
// it at the pool until one is ready.
func (s *run) route(p *pool, i int, t time.Duration) error {
	rep := p.pick()
	if rep == nil {
		p.queue = append(p.queue, i)
		return nil
	}
	r := s.load.Requests[i]
	req := enginesim.Request{ID: strconv.Itoa(i), Tokens: r.tokens(), MaxTokens: r.OutputTokens, Arrival: t}
	switch {
	case s.cfg.Mode == Aggregated:
		s.fl[i].prefill = rep
	case p.name == plan.PoolPrefill:
		// The prefill side samples the first token and hands the KV on.
		req.MaxTokens = 1
		s.fl[i].prefill = rep
	default:
		// The decode side gets the prompt's KV and generates the rest.
		req.KVTransferred = true
		req.MaxTokens = r.OutputTokens - 1
		s.fl[i].decode = rep
	}
	if err := rep.eng.Submit(req); err != nil {
		return fmt.Errorf("request %d (%d input, %d output tokens): %w", i, r.InputTokens, r.OutputTokens, err)
	}
	rep.inflight++
	return nil
}

func (s *run) output(rep *replica, o enginesim.Output, t time.Duration) error {
	i, err := strconv.Atoi(o.ID)
	if err != nil || i < 0 || i >= len(s.fl) {
		return fmt.Errorf("engine output for unknown request %q", o.ID)
	}
	f := &s.fl[i]
	r := s.load.Requests[i]
	onPrefill := f.decode == nil // the decode side's records come after the prefill's
	if !o.Done {
		if onPrefill {
			f.firstToken = o.FirstTokenAt
			s.ttft[i] = ms(o.FirstTokenAt - f.arrival)
			s.obs.firstToken(s.firstPool().name, s.ttft[i], o.CachedTokens, o.PromptTokens)
		}
		return nil
	}
	rep.inflight--
	defer s.leaveIfDrained(rep)
	if onPrefill && s.cfg.Mode == Disaggregated && r.OutputTokens > 1 {
		return s.route(s.fleet.pools[plan.PoolDecode], i, t)
	}
	// Mean ITL from the first token (sampled on the prefill side when
	// disaggregated) to the last: what a client streaming the answer sees,
	// the KV hand-over included.
	if r.OutputTokens > 1 {
		s.itl[i] = ms(o.FinishedAt-f.firstToken) / float64(r.OutputTokens-1)
	}
	f.done = true
	s.completed++
	if f.arrival >= s.load.WarmUp {
		s.e2eSum += ms(o.FinishedAt - f.arrival)
		s.scored++
	}
	pool := s.firstPool().name
	if s.cfg.Mode == Disaggregated {
		pool = plan.PoolDecode
	}
	s.obs.finished(pool, s.itl[i], r.OutputTokens > 1)
	return nil
}

func (s *run) leaveIfDrained(rep *replica) {
	if rep.state != draining || rep.inflight > 0 {
		return
	}
	for _, p := range s.fleet.order {
		if slices.Contains(p.replicas, rep) {
			s.fleet.remove(p, rep)
		}
	}
}

func (s *run) decide(t time.Duration) error {
	obs := s.obs.observation(Epoch.Add(t), s.cfg.Interval)
	util := s.obs.utilization(t)
	if u, ok := s.policy.(UtilizationObserver); ok {
		for pool, busy := range util {
			u.ObserveUtilization(pool, busy)
		}
	}
	d := s.policy.Decide(obs)
	for _, p := range s.fleet.order {
		s.fleet.drainNamed(p, d.Drain[p.name], d.Remove[p.name])
		target, ok := d.Active[p.name]
		if !ok {
			target, ok = d.Desired[p.name]
		}
		if !ok {
			target = p.target
		}
		if err := s.fleet.scale(p, target, t); err != nil {
			return err
		}
	}
	s.obs.point(t, obs, d.Reason)
	s.obs.reset()
	return nil
}

func (s *run) result() *Result {
	res := &Result{
		Policy:      s.policy.Name(),
		GPUHours:    s.fleet.gpuSec / 3600,
		ScaleEvents: s.fleet.events,
		Timeline:    s.obs.timeline,
	}
	if s.obs.systemSamples > 0 {
		res.MeanInSystem = s.obs.systemSum / float64(s.obs.systemSamples)
	}
	res.MeanLatencyMs = s.e2eSum / float64(max(s.scored, 1))
	if in, ok := s.policy.(Initializer); ok {
		res.Static = in.Initial()
	}
	ttftTarget, itlTarget := ms(s.cfg.TTFT), ms(s.cfg.ITL)
	var okBoth, okTTFT, okITL int
	var ttfts, itls []float64
	for i, r := range s.load.Requests {
		if r.Arrival < s.load.WarmUp {
			continue
		}
		res.Requests++
		ttfts = append(ttfts, s.ttft[i])
		a, b := s.ttft[i] <= ttftTarget, s.itl[i] <= itlTarget
		if a {
			okTTFT++
		}
		if b {
			okITL++
		}
		if a && b {
			okBoth++
		}
		if r.OutputTokens > 1 {
			itls = append(itls, s.itl[i])
		}
	}
	n := float64(res.Requests)
	res.SLAAttainment, res.TTFTAttainment, res.ITLAttainment = float64(okBoth)/n, float64(okTTFT)/n, float64(okITL)/n
	res.TTFTP90Ms = percentile(ttfts, 0.9)
	res.ITLP90Ms = percentile(itls, 0.9)
	return res
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is the nearest-rank q-quantile of v (sorted in place); 0 for
// an empty slice.
func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	k := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(max(k, 0), len(v)-1)]
}
