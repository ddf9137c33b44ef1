package plan

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/forecast"
	"github.com/kvgate/kvgate/planner-sidecar/perfmodel"
)

// PoolLimits bounds one pool.
type PoolLimits struct {
	Min, Max       int
	GPUsPerReplica int // 0 counts as 1
}

// SLAConfig configures the SLA planner.
type SLAConfig struct {
	// TTFT and ITL are the p90 latency targets.
	TTFT, ITL time.Duration
	// Horizon is how far ahead load is forecast: set it to the time a new
	// replica takes to become ready, so capacity arrives with the load.
	Horizon time.Duration
	// Pools to size: "prefill" and "decode" (disaggregated) and/or
	// "aggregated". A pool missing from an observation is seen as idle.
	Pools map[string]PoolLimits
	// GPUBudget bounds Σ replicas × GPUs per replica over all pools (0 = none).
	GPUBudget int
	// UpUtilization: a pool scales up, at once, as soon as its forecast load
	// needs more than current × UpUtilization replicas' SLA capacity, to
	// ceil(need / UpUtilization). In (0, 1]; default DefaultUpUtilization.
	UpUtilization float64
	// DownUtilization: a pool scales down only when
	// ceil(need / DownUtilization) < current for DownAfter decisions in a
	// row (to the largest such size seen over those decisions), at least
	// Cooldown after its last change, and only if the survivors' expected
	// latencies meet the targets. In (0, UpUtilization]; default
	// DefaultDownUtilization.
	DownUtilization float64
	DownAfter       int           // default DefaultDownAfter
	Cooldown        time.Duration // default 0 (DownAfter alone)
	// Correction of the targets by observed/expected latency (EWMA weight
	// CorrectionAlpha, clamped to [CorrectionMin, CorrectionMax]);
	// CorrectionAlpha < 0 disables it. Defaults DefaultCorrection*.
	CorrectionAlpha, CorrectionMin, CorrectionMax float64

	// ErrorHeadroom (k) sizes for the upper end of the forecast rather
	// than its mean: the rate planned for is forecast + k × the mean
	// absolute error of this pool's past rate forecasts at the same
	// horizon (an EWMA, updated as each forecast comes due). A smooth load
	// the forecaster follows gets little headroom, a noisy or turning one
	// gets as much as the forecaster has recently been wrong by. 0 = off.
	ErrorHeadroom float64
	// PeakHold: a scale-down never goes below what the highest request
	// rate observed over this window needs. Set it to the provisioning
	// delay: capacity shed now cannot be back sooner, so the pool keeps
	// what the recent load proved it can need. 0 = off.
	PeakHold time.Duration
	// BacklogDrain makes sizing queue-aware: requests already waiting in a
	// pool (PoolObservation.QueueDepth) need capacity to be served within
	// this time on top of the forecast arrivals (their prompt tokens for
	// prefill, their output tokens for decode). Without it a backlog built
	// during a ramp is invisible to a rate-based planner. 0 = off.
	BacklogDrain time.Duration
	// PeakMemory bounds speculation by what the load has done: while the
	// pool's smoothed work (the level rate × the forecast lengths, in
	// replicas' worth) is below its own highest over this window, the
	// work planned for (forecast, error headroom and all) is capped at the
	// most work observed in one interval over the window. A load that
	// swings faster than capacity can follow (its forecast error is as
	// large as the swing) is then held at its envelope rather than
	// provisioned for the forecast's overshoot plus headroom on top; a load
	// rising to a new high (its smoothed work at its maximum) is not
	// capped, so a ramp keeps its trend and headroom. The backlog term is
	// never capped. Set it to the load's period (a day). 0 = off,
	// the default: it trades attainment on a load that steps past its old
	// high for GPU-hours on one that keeps to it (BENCHMARKS.md, planner).
	PeakMemory time.Duration
}

// applyDefaults fills the unset fields of a configuration built in code
// (defaults.go; the configuration file's section has them applied already).
func (c *SLAConfig) applyDefaults() {
	if c.UpUtilization == 0 {
		c.UpUtilization = DefaultUpUtilization
	}
	if c.DownUtilization == 0 {
		c.DownUtilization = min(DefaultDownUtilization, c.UpUtilization)
	}
	if c.DownAfter == 0 {
		c.DownAfter = DefaultDownAfter
	}
	if c.CorrectionAlpha == 0 {
		c.CorrectionAlpha = DefaultCorrectionAlpha
	}
	if c.CorrectionMin == 0 {
		c.CorrectionMin = DefaultCorrectionMin
	}
	if c.CorrectionMax == 0 {
		c.CorrectionMax = DefaultCorrectionMax
	}
}

// Validate reports the first unusable setting.
func (c SLAConfig) Validate() error {
	c.applyDefaults()
	switch {
	case c.TTFT <= 0 || c.ITL <= 0:
		return fmt.Errorf("plan: ttft and itl targets must be > 0")
	case len(c.Pools) == 0:
		return fmt.Errorf("plan: no pools to size")
	case c.UpUtilization <= 0 || c.UpUtilization > 1:
		return fmt.Errorf("plan: up utilization must be in (0, 1]")
	case c.DownUtilization <= 0 || c.DownUtilization > c.UpUtilization:
		return fmt.Errorf("plan: down utilization must be in (0, up utilization]")
	case c.DownAfter < 1:
		return fmt.Errorf("plan: down_after must be >= 1")
	case c.CorrectionAlpha > 1 || c.CorrectionMin <= 0 || c.CorrectionMax < c.CorrectionMin:
		return fmt.Errorf("plan: correction alpha must be <= 1 and 0 < min <= max")
	case math.IsNaN(c.ErrorHeadroom) || c.ErrorHeadroom < 0 || c.ErrorHeadroom > 10:
		return fmt.Errorf("plan: error headroom %v outside [0, 10]", c.ErrorHeadroom)
	case c.PeakHold < 0 || c.PeakHold > 24*time.Hour:
		return fmt.Errorf("plan: peak hold %v outside [0, 24h]", c.PeakHold)
	case c.BacklogDrain < 0 || c.BacklogDrain > 24*time.Hour:
		return fmt.Errorf("plan: backlog drain %v outside [0, 24h]", c.BacklogDrain)
	case c.PeakMemory < 0 || c.PeakMemory > 7*24*time.Hour:
		return fmt.Errorf("plan: peak memory %v outside [0, 168h]", c.PeakMemory)
	}
	mins := 0
	for name, l := range c.Pools {
		switch name {
		case PoolPrefill, PoolDecode, PoolAggregated:
		default:
			return fmt.Errorf("plan: pool %q is not one of prefill, decode, aggregated", name)
		}
		if l.Min < 0 || l.Max < max(l.Min, 1) || l.GPUsPerReplica < 0 {
			return fmt.Errorf("plan: pool %s: want 0 <= min <= max, max >= 1, gpus_per_replica >= 0", name)
		}
		mins += l.Min * gpus(l)
	}
	if c.GPUBudget > 0 && mins > c.GPUBudget {
		return fmt.Errorf("plan: the pools' minimums need %d GPUs, over the budget of %d", mins, c.GPUBudget)
	}
	return nil
}

func gpus(l PoolLimits) int { return max(l.GPUsPerReplica, 1) }

// SLA sizes prefill and decode (or aggregated) pools from a load forecast
// and a performance model, to meet TTFT and ITL targets (Dynamo's SLA
// planner, with hysteresis, a GPU budget and a drain protocol). Decide is
// deterministic in the sequence of observations: replaying a journal
// through a fresh SLA reproduces its decisions.
type SLA struct {
	cfg   SLAConfig
	model *perfmodel.Model
	pools map[string]*poolState
	names []string
}

// poolState is what the SLA remembers of one pool between decisions.
type poolState struct {
	rate, input, output, hit forecast.Forecaster
	sawLengths               bool
	correction               perfmodel.Correction
	below                    int // consecutive decisions a scale-down was wanted
	belowMax                 int // largest scale-down size wanted over those
	lastChange               time.Time
	changed                  bool
	// due holds rate forecasts not yet comparable with an observation;
	// rateMAE is the EWMA of their absolute errors once they came due,
	// seasonMAE that of the seasonal forecasts (made while a period was
	// seen).
	due                 []dueRate
	rateMAE, seasonMAE  float64
	sawDue, sawSeasonal bool
	// season forecasts the rate from its own past periods, once it has
	// one (forecast.Seasonal).
	season *forecast.Seasonal
	// recent holds the observed rates of the last PeakHold.
	recent []forecast.Sample
	// envelope and levelHigh are the most work observed in an interval
	// and the highest smoothed work over PeakMemory, in replicas' worth.
	envelope, levelHigh windowMax
}

// dueRate is one decision's rate forecasts for time T: the forecaster's,
// and the seasonal one (NaN without a period).
type dueRate struct {
	T              time.Time
	base, seasonal float64
}

// Bounds on the per-pool histories, whatever the interval: a forecast or
// a rate sample older than these windows is dropped first anyway.
const (
	maxDue    = 1024
	maxRecent = 1024
	// errorAlpha weighs a newly due forecast error in rateMAE: about the
	// last five errors count.
	errorAlpha = 0.3
)

var _ Policy = (*SLA)(nil)

// NewSLA builds the policy; fc makes one fresh forecaster per pool and
// signal (rate, mean input and output length). cfg must Validate.
func NewSLA(cfg SLAConfig, model *perfmodel.Model, fc func() forecast.Forecaster) *SLA {
	return NewSLAForecasts(cfg, model, func(string, string) forecast.Forecaster { return fc() })
}

// The signals an SLA forecasts per pool (NewSLAForecasts).
const (
	SignalRequestRate  = "request_rate"
	SignalInputTokens  = "input_tokens"
	SignalOutputTokens = "output_tokens"
)

// NewSLAForecasts is NewSLA with a forecaster chosen per pool and signal
// (SignalRequestRate, SignalInputTokens, SignalOutputTokens): the
// simulator's oracle planner reads each signal's future from the load.
func NewSLAForecasts(cfg SLAConfig, model *perfmodel.Model, fc func(pool, signal string) forecast.Forecaster) *SLA {
	cfg.applyDefaults()
	s := &SLA{cfg: cfg, model: model, pools: map[string]*poolState{}}
	for name := range cfg.Pools {
		s.names = append(s.names, name)
		s.pools[name] = &poolState{
			rate: fc(name, SignalRequestRate), input: fc(name, SignalInputTokens), output: fc(name, SignalOutputTokens),
			// The hit rate moves with the workload mix, not with load: it is
			// smoothed, never extrapolated.
			hit:        forecast.NewEWMA(0.3),
			season:     forecast.NewSeasonal(),
			correction: perfmodel.NewCorrection(max(cfg.CorrectionAlpha, 0), cfg.CorrectionMin, cfg.CorrectionMax),
			envelope:   windowMax{window: cfg.PeakMemory},
			levelHigh:  windowMax{window: cfg.PeakMemory},
		}
	}
	slices.Sort(s.names)
	return s
}

// Name implements Policy.
func (s *SLA) Name() string { return "planner" }

// Config returns the configuration with defaults applied.
func (s *SLA) Config() SLAConfig { return s.cfg }

// poolPlan is one pool's sizing, before the budget.
type poolPlan struct {
	obs        PoolObservation
	need       float64 // replicas' worth of SLA capacity the forecast needs
	downNeed   float64 // replicas' worth a scale-down must keep
	want       int     // size if scaling up now
	downTo     int     // size a scale-down would go to
	rate       float64 // mean forecast at the horizon
	upRate     float64 // the rate a scale-up provisions for
	downRate   float64 // the rate a scale-down must still serve
	input      float64
	output     float64
	hit        float64
	prefillTPS float64
	decodeTPS  float64
}

// Decide implements Policy.
func (s *SLA) Decide(obs Observation) Decision {
	d := Decision{
		Time: obs.Time, Desired: map[string]int{}, Active: map[string]int{}, Action: map[string]string{},
		Drain: map[string][]string{}, Remove: map[string][]string{}, Terms: map[string]float64{},
	}
	plans := map[string]*poolPlan{}
	for _, name := range s.names {
		plans[name] = s.size(name, obs, d.Terms)
	}
	targets := s.budget(plans, d.Terms)
	var reasons []string
	for _, name := range s.names {
		reasons = append(reasons, s.act(name, plans[name], targets[name], obs.Time, &d))
	}
	d.Reason = strings.Join(reasons, "; ")
	return d
}

// sizing is one pool's sizing as it proceeds (SLA.size): the plan, and
// the intermediate values the decision's terms record.
type sizing struct {
	name string
	st   *poolState
	o    PoolObservation // cleaned
	p    *poolPlan

	peak, level, mae, headroom float64
	period                     time.Duration
	useSeason                  float64
	prefillNeed, decodeNeed    float64
	backlog                    float64
	workSeen, workLevel        float64
	envelope, capped           float64
}

// size observes one pool and computes its need: the observation cleaned,
// the model corrected and the forecasters fed, the rate forecast with its
// error headroom, the work per request, the replicas' worth of capacity
// needed, and the sizes up and down.
func (s *SLA) size(name string, obs Observation, terms map[string]float64) *poolPlan {
	z := &sizing{name: name, st: s.pools[name], o: cleanObservation(obs.Pools[name])}
	s.correctModel(z)
	z.peak = s.observe(z.st, obs.Time, z.o)
	z.p = &poolPlan{obs: z.o}
	s.forecastRate(z, obs.Time)
	s.forecastWork(z)
	s.needs(z, obs.Time)
	lim := s.cfg.Pools[name]
	p := z.p
	if math.IsNaN(p.need) || math.IsInf(p.need, 0) {
		p.need = float64(lim.Max)
	}
	if math.IsNaN(p.downNeed) || math.IsInf(p.downNeed, 0) {
		p.downNeed = float64(lim.Max)
	}
	p.want = clampInt(ceilEps(p.need/s.cfg.UpUtilization), lim.Min, lim.Max)
	p.downTo = clampInt(ceilEps(p.downNeed/s.cfg.DownUtilization), lim.Min, lim.Max)
	z.record(terms)
	return p
}

// finite is v, or 0 when v is not a finite non-negative number (a scrape
// of nothing, a division by zero upstream).
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0
	}
	return v
}

// cleanObservation makes the observed rates and lengths finite and the
// hit rate a fraction.
func cleanObservation(o PoolObservation) PoolObservation {
	o.RequestRate, o.MeanInputTokens, o.MeanOutputTokens = finite(o.RequestRate), finite(o.MeanInputTokens), finite(o.MeanOutputTokens)
	o.CacheHitRate = min(finite(o.CacheHitRate), 1)
	return o
}

// correctModel corrects the model by how this interval's latencies
// compared with what the profile expects at the load each serving replica
// carried.
func (s *SLA) correctModel(z *sizing) {
	o, st := z.o, z.st
	if s.cfg.CorrectionAlpha > 0 && o.Replicas > 0 && o.RequestRate > 0 && st.sawLengths {
		n := float64(o.Replicas)
		in, out := o.MeanInputTokens, o.MeanOutputTokens
		var expTTFT, expITL time.Duration
		if z.name != PoolDecode {
			expTTFT = s.model.ExpectedTTFT(in, o.RequestRate*in*(1-o.CacheHitRate)/n)
		}
		if z.name != PoolPrefill {
			expITL = s.model.ExpectedITL(in+out/2, o.RequestRate*out/n)
		}
		st.correction.Observe(o.TTFTP90, expTTFT, o.ITLP90, expITL)
	}
}

// observe feeds the pool's forecasters this interval's load and returns
// the recent peak rate.
func (s *SLA) observe(st *poolState, t time.Time, o PoolObservation) float64 {
	// Score the rate forecasts that have come due against this interval's
	// rate before the forecaster sees it.
	s.scoreForecasts(st, t, o.RequestRate)
	st.rate.Observe(t, o.RequestRate)
	// Lengths are undefined in an interval without requests; they keep
	// their last forecast instead of dropping to zero.
	if o.RequestRate > 0 && (o.MeanInputTokens > 0 || o.MeanOutputTokens > 0) {
		st.input.Observe(t, o.MeanInputTokens)
		st.output.Observe(t, o.MeanOutputTokens)
		st.hit.Observe(t, o.CacheHitRate)
		st.sawLengths = true
	}
	st.season.Observe(t, o.RequestRate)
	return s.holdPeak(st, t, o.RequestRate)
}

// forecastRate forecasts the request rate at the horizon, from the
// forecaster or the load's own seasons, and the rates scaling up and down
// plan for.
func (s *SLA) forecastRate(z *sizing, t time.Time) {
	st, p := z.st, z.p
	base := max(st.rate.Predict(s.cfg.Horizon), 0)
	seasonal := math.NaN()
	if z.period, _ = st.season.Period(); z.period > 0 {
		seasonal = max(st.season.Predict(s.cfg.Horizon), 0)
	}
	if len(st.due) < maxDue {
		st.due = append(st.due, dueRate{T: t.Add(s.cfg.Horizon), base: base, seasonal: seasonal})
	}
	// A load that repeats (diurnal, weekly) is forecast from its own last
	// periods once its history shows one and those forecasts have been
	// closer at this horizon than the forecaster's: a trend read a
	// quarter period before a turn is carried past it, and the error
	// headroom then grows with the overshoot (the 10-minute sine's
	// journal: holt's mean error at 150 s was half the swing).
	z.mae, z.useSeason = st.rateMAE, 0.0
	p.rate = base
	if z.period > 0 && st.sawSeasonal && st.seasonMAE < st.rateMAE {
		p.rate, z.mae, z.useSeason = seasonal, st.seasonMAE, 1
	}
	// The upper end of the forecast: what scaling up provisions for.
	z.headroom = s.cfg.ErrorHeadroom * z.mae
	p.upRate = p.rate + z.headroom
	// A scale-down must hold over the whole window until a replica shed
	// now could be back: the forecasts are monotonic in the horizon (flat,
	// linear or a damped trend), so the window's largest is at one of its
	// ends — now (the level) or the horizon — and never below the recent
	// peak.
	z.level = max(st.rate.Predict(0), 0)
	p.downRate = max(p.upRate, z.level+z.headroom, z.peak)
}

// forecastWork forecasts the requests' lengths and hit rate, and what one
// replica serves of them within the (corrected) latency targets.
func (s *SLA) forecastWork(z *sizing) {
	st, p := z.st, z.p
	p.input = max(st.input.Predict(s.cfg.Horizon), 0)
	p.output = max(st.output.Predict(s.cfg.Horizon), 0)
	p.hit = min(max(st.hit.Predict(0), 0), 1)

	ttft := perfmodel.Target(s.cfg.TTFT, st.correction.TTFT)
	itl := perfmodel.Target(s.cfg.ITL, st.correction.ITL)
	p.prefillTPS = s.model.PrefillThroughput(p.input, ttft)
	p.decodeTPS = s.model.DecodeThroughput(p.input+p.output/2, itl)
}

// needAt is the replicas' worth of SLA capacity a rate needs, by phase.
func (p *poolPlan) needAt(rate float64) (prefill, decode float64) {
	return rate * p.input * (1 - p.hit) / p.prefillTPS, rate * p.output / p.decodeTPS
}

// poolShare is the pool's share of a (prefill, decode) pair of needs. An
// aggregated replica runs prefill and decode in the same engine steps,
// and a mixed step costs about the sum of its parts (the step model of
// Dynamo's mocker, lab/enginesim/timing.go): the fractions of a replica
// each phase needs add up. max() would assume the phases overlap for
// free and undersize.
func poolShare(pool string, prefill, decode float64) float64 {
	switch pool {
	case PoolPrefill:
		return prefill
	case PoolDecode:
		return decode
	}
	return prefill + decode
}

// needs is the replicas' worth of capacity the planned rates need, with
// the waiting requests' work, capped by the work recently seen once the
// load is past its high.
func (s *SLA) needs(z *sizing, t time.Time) {
	o, p := z.o, z.p
	z.prefillNeed, z.decodeNeed = p.needAt(p.upRate)
	prefillDown, decodeDown := p.needAt(p.downRate)
	// Queue-aware: the waiting requests' work, spread over BacklogDrain,
	// is capacity on top of the arrivals'.
	var prefillBacklog, decodeBacklog float64
	if s.cfg.BacklogDrain > 0 && o.QueueDepth > 0 && !math.IsNaN(o.QueueDepth) && !math.IsInf(o.QueueDepth, 0) {
		perSecond := o.QueueDepth / s.cfg.BacklogDrain.Seconds()
		prefillBacklog, decodeBacklog = p.needAt(perSecond)
	}
	z.backlog = poolShare(z.name, prefillBacklog, decodeBacklog)
	p.need, p.downNeed = poolShare(z.name, z.prefillNeed, z.decodeNeed), poolShare(z.name, prefillDown, decodeDown)
	// Peak memory (SLAConfig.PeakMemory), in the pool's work rather than
	// its request rate — prompt tokens per second for prefill, output
	// tokens for decode, at the model's per-replica throughputs — since a
	// load's lengths move with its rate (the Azure trace's prompts grow
	// by half into its busiest minutes): the replicas' worth of work
	// observed this interval, and the smoothed level's.
	if s.cfg.PeakMemory > 0 {
		pre, dec := o.RequestRate*o.MeanInputTokens*(1-o.CacheHitRate)/p.prefillTPS, o.RequestRate*o.MeanOutputTokens/p.decodeTPS
		z.workSeen = finite(poolShare(z.name, pre, dec))
		levelPre, levelDec := p.needAt(z.level)
		z.workLevel = finite(poolShare(z.name, levelPre, levelDec))
		z.envelope = z.st.envelope.add(t, z.workSeen)
		if high := z.st.levelHigh.add(t, z.workLevel); z.workLevel < high {
			// Below its recent high: plan for no more than the most work
			// seen. At a new high the forecast and headroom stand.
			z.capped = 1
			ceiling := max(z.envelope, z.workLevel)
			p.need, p.downNeed = min(p.need, ceiling), min(p.downNeed, ceiling)
		}
	}
	p.need += z.backlog
	p.downNeed += z.backlog
}

// record writes the sizing's terms into the decision, prefixed with the
// pool's name.
func (z *sizing) record(terms map[string]float64) {
	p, st := z.p, z.st
	t := func(k string, v float64) { terms[z.name+"."+k] = v }
	t("forecast_request_rate", p.rate)
	t("forecast_level_request_rate", z.level)
	t("forecast_mae_request_rate", z.mae)
	t("forecaster_mae_request_rate", st.rateMAE)
	t("seasonal_mae_request_rate", st.seasonMAE)
	t("seasonal_period_seconds", z.period.Seconds())
	t("seasonal_forecast_used", z.useSeason)
	t("error_headroom_request_rate", z.headroom)
	t("peak_request_rate", z.peak)
	t("work_seen_replicas", z.workSeen)
	t("work_level_replicas", z.workLevel)
	t("work_envelope_replicas", z.envelope)
	t("work_envelope_capped", z.capped)
	t("planned_up_request_rate", p.upRate)
	t("planned_down_request_rate", p.downRate)
	t("backlog_requests", z.o.QueueDepth)
	t("backlog_need_replicas", z.backlog)
	t("forecast_input_tokens", p.input)
	t("forecast_output_tokens", p.output)
	t("expected_hit_rate", p.hit)
	t("ttft_correction", st.correction.TTFT)
	t("itl_correction", st.correction.ITL)
	t("prefill_tokens_per_second_per_replica", p.prefillTPS)
	t("decode_tokens_per_second_per_replica", p.decodeTPS)
	t("prefill_need_replicas", z.prefillNeed)
	t("decode_need_replicas", z.decodeNeed)
	t("need_replicas", p.need)
	t("down_need_replicas", p.downNeed)
	t("up_size", float64(p.want))
	t("down_size", float64(p.downTo))
}

// scoreForecasts folds the errors of the rate forecasts due by t (made a
// horizon ago) into the pool's mean absolute errors.
func (s *SLA) scoreForecasts(st *poolState, t time.Time, rate float64) {
	n := 0
	for _, f := range st.due {
		if f.T.After(t) {
			break
		}
		err := math.Abs(rate - f.base)
		if !st.sawDue {
			st.rateMAE, st.sawDue = err, true
		} else {
			st.rateMAE = errorAlpha*err + (1-errorAlpha)*st.rateMAE
		}
		if !math.IsNaN(f.seasonal) {
			err := math.Abs(rate - f.seasonal)
			if !st.sawSeasonal {
				st.seasonMAE, st.sawSeasonal = err, true
			} else {
				st.seasonMAE = errorAlpha*err + (1-errorAlpha)*st.seasonMAE
			}
		}
		n++
	}
	st.due = st.due[n:]
}

// holdPeak records the rate observed at t and returns the highest rate
// observed over the last PeakHold (0 when PeakHold is off).
func (s *SLA) holdPeak(st *poolState, t time.Time, rate float64) float64 {
	if s.cfg.PeakHold <= 0 {
		return 0
	}
	st.recent = append(st.recent, forecast.Sample{T: t, V: rate})
	drop := max(len(st.recent)-maxRecent, 0)
	for drop < len(st.recent) && t.Sub(st.recent[drop].T) > s.cfg.PeakHold {
		drop++
	}
	st.recent = st.recent[drop:]
	peak := 0.0
	for _, x := range st.recent {
		peak = max(peak, x.V)
	}
	return peak
}

// ceilEps is ceil that forgives float noise (3.0000000001 is 3).
func ceilEps(v float64) int {
	if v <= 0 {
		return 0
	}
	if v > 1e9 {
		return 1e9
	}
	return int(math.Ceil(v - 1e-9))
}

func clampInt(v, lo, hi int) int { return min(max(v, lo), hi) }

// budget caps each pool's size so that Σ size × GPUs fits the budget. Each
// pool asks for max(up-size, current): what it would grow to or hold. If
// all asks fit, nothing is capped (caps are the pools' max). Otherwise every
// pool gets its minimum, then replicas go one at a time to the pool whose
// size covers the smallest fraction of its need (ties by name), as long as
// it fits and the pool asked for more.
func (s *SLA) budget(plans map[string]*poolPlan, terms map[string]float64) map[string]int {
	caps := map[string]int{}
	asks := map[string]int{}
	total := 0
	for _, name := range s.names {
		p := plans[name]
		caps[name] = s.cfg.Pools[name].Max
		asks[name] = max(p.want, p.obs.Replicas+p.obs.Pending)
		total += asks[name] * gpus(s.cfg.Pools[name])
	}
	if s.cfg.GPUBudget <= 0 || total <= s.cfg.GPUBudget {
		return caps
	}
	used := 0
	for _, name := range s.names {
		caps[name] = s.cfg.Pools[name].Min
		used += caps[name] * gpus(s.cfg.Pools[name])
	}
	for {
		best, bestCover := "", math.Inf(1)
		for _, name := range s.names {
			p := plans[name]
			if caps[name] >= asks[name] || used+gpus(s.cfg.Pools[name]) > s.cfg.GPUBudget {
				continue
			}
			cover := math.Inf(1)
			if p.need > 0 {
				cover = float64(caps[name]) / p.need
			}
			if cover < bestCover || best == "" {
				best, bestCover = name, cover
			}
		}
		if best == "" {
			break
		}
		caps[best]++
		used += gpus(s.cfg.Pools[best])
	}
	for _, name := range s.names {
		if caps[name] < asks[name] {
			terms[name+".budget_cap"] = float64(caps[name])
		}
	}
	return caps
}

// act applies hysteresis, cooldown, the survivors' check and the drain
// protocol to one pool and writes its part of the decision.
func (s *SLA) act(name string, p *poolPlan, capSize int, now time.Time, d *Decision) string {
	st := s.pools[name]
	o := p.obs
	cur := o.Replicas + o.Pending
	active := cur
	action := "hold"
	var drain []string
	remove := slices.Clone(o.Idle)
	slices.Sort(remove)
	if len(remove) > o.Draining {
		remove = remove[:o.Draining]
	}
	want := min(p.want, capSize)
	downTo := min(p.downTo, capSize)
	var why string

	switch {
	case want > cur:
		action, active = "up", want
		st.below, st.belowMax = 0, 0
		why = fmt.Sprintf("%s up %d→%d: forecast %.2f req/s (planned %.2f with headroom) needs %.2f replicas at the SLA", name, cur, want, p.rate, p.upRate, p.need)
	case downTo < cur || capSize < cur:
		if capSize < cur {
			// Over the GPU budget: shrink now, no hysteresis.
			downTo = capSize
			st.below = s.cfg.DownAfter
			st.belowMax = capSize
		} else {
			st.below++
			if st.below == 1 {
				st.belowMax = downTo
			}
			st.belowMax = max(st.belowMax, downTo)
		}
		target := st.belowMax
		switch {
		case st.below < s.cfg.DownAfter:
			why = fmt.Sprintf("%s hold %d: down to %d wanted for %d of %d decisions", name, cur, downTo, st.below, s.cfg.DownAfter)
		case st.changed && now.Sub(st.lastChange) < s.cfg.Cooldown && capSize >= cur:
			why = fmt.Sprintf("%s hold %d: cooldown, last change %s ago", name, cur, now.Sub(st.lastChange))
		case o.Pending > 0 && capSize >= cur:
			why = fmt.Sprintf("%s hold %d: %d replicas still provisioning", name, cur, o.Pending)
		default:
			if ok, miss := s.survivorsMeetSLA(name, p, target); !ok && capSize >= cur {
				why = fmt.Sprintf("%s hold %d: %d survivors would miss the SLA (%s)", name, cur, target, miss)
				break
			}
			action, active = "down", target
			st.below, st.belowMax = 0, 0
			k := cur - target
			ready := slices.Clone(o.Ready)
			slices.Sort(ready)
			if len(ready) >= k {
				// The last names drain: a StatefulSet removes its highest
				// ordinals first, so these are the ones a scale-down takes.
				drain = ready[len(ready)-k:]
				why = fmt.Sprintf("%s down %d→%d: draining %s", name, cur, target, strings.Join(drain, ","))
			} else {
				why = fmt.Sprintf("%s down %d→%d without draining (replicas not named)", name, cur, target)
			}
		}
	default:
		st.below, st.belowMax = 0, 0
		why = fmt.Sprintf("%s hold %d: need %.2f replicas", name, cur, p.need)
	}
	if action != "hold" {
		st.lastChange, st.changed = now, true
	}
	stillDraining := o.Draining + len(drain) - len(remove)
	d.Desired[name] = active + stillDraining
	d.Active[name] = active
	d.Action[name] = action
	if len(drain) > 0 {
		d.Drain[name] = drain
	}
	if len(remove) > 0 {
		d.Remove[name] = remove
		why += fmt.Sprintf(", removing idle %s", strings.Join(remove, ","))
	}
	return why
}

// survivorsMeetSLA checks that n replicas would meet the targets under the
// forecast by the profile's expected latencies, corrected.
func (s *SLA) survivorsMeetSLA(name string, p *poolPlan, n int) (bool, string) {
	if n <= 0 {
		if p.downRate > 0 {
			return false, "no replicas for forecast load"
		}
		return true, ""
	}
	if p.downRate == 0 {
		return true, ""
	}
	st := s.pools[name]
	if name != PoolDecode {
		load := p.downRate * p.input * (1 - p.hit) / float64(n)
		if name == PoolAggregated {
			// The prefill share of an aggregated replica is what decode leaves.
			share := 1 - p.downRate*p.output/p.decodeTPS/float64(n)
			if share <= 0 {
				return false, "decode alone would fill them"
			}
			load /= share
		}
		exp := time.Duration(float64(s.model.ExpectedTTFT(p.input, load)) * st.correction.TTFT)
		if exp > s.cfg.TTFT {
			return false, fmt.Sprintf("expected TTFT %s > %s", exp.Round(time.Millisecond), s.cfg.TTFT)
		}
	}
	if name != PoolPrefill {
		load := p.downRate * p.output / float64(n)
		exp := time.Duration(float64(s.model.ExpectedITL(p.input+p.output/2, load)) * st.correction.ITL)
		if exp > s.cfg.ITL {
			return false, fmt.Sprintf("expected ITL %s > %s", exp.Round(time.Millisecond), s.cfg.ITL)
		}
	}
	return true, ""
}
