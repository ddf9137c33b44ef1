// Package extproc is kvgate's request path behind Envoy: for each request
// the ext_proc server (extproc/server) calls Router.Route, which
// preprocesses the body once (extproc/preprocess), asks the fleet index which
// workers hold its prefix, asks the pure picker (picker/) for a worker given
// kvgate's own load accounting (extproc/loadview), and answers with the
// destination. Everything with I/O or a clock happens here; the decision
// itself does not.
package extproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/enginemetrics"
	"github.com/kvgate/kvgate/extproc/loadview"
	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/indexer/kvindex"
	"github.com/kvgate/kvgate/internal/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

// pool is the workers serving one base model (and its LoRA adapters).
type pool struct {
	model   string
	workers []picker.Worker
	// approx marks workers without KV events: their cache is inferred from
	// kvgate's own recent decisions.
	approx map[kvfleet.WorkerID]bool
	hasPD  bool // the pool has prefill-only workers
}

// fleet is the current worker set, replaced whole when discovery reports
// a change, so a request sees one consistent view without locking.
type fleet struct {
	pools map[string]*pool
	all   []picker.Worker // every worker, for requests without a model
}

// Router implements server.Router.
type Router struct {
	cfg     config.Extproc
	reg     *preprocess.Registry
	idx     kvindex.Index
	load    *loadview.View
	recent  *loadview.Recent
	pending *loadview.Pending // decisions not yet in the index (pendingcredit.go)
	fleet   atomic.Pointer[fleet]
	pick    picker.Config
	pd      picker.PDConfig
	log     *slog.Logger
	metrics *metrics
	debug   *decisionLog
	debugOK debugAccess            // who gets the x-kvgate-debug header
	health  *healthChecker         // nil when disabled
	engines *enginemetrics.Scraper // nil when disabled
	outlier *outlierDetector       // nil when disabled
	shared  *sharedLoad            // nil unless the Redis backend shares load
	now     func() time.Time

	mu         sync.Mutex // guards rnd and throughput
	rnd        *rand.Rand
	throughput map[kvfleet.WorkerID]*picker.ThroughputEstimator
}

var _ server.Router = (*Router)(nil)

// NewRouter builds the request path from the configuration.
func NewRouter(cfg config.Config, reg *preprocess.Registry, idx kvindex.Index, log *slog.Logger) (*Router, error) {
	if log == nil {
		log = slog.Default()
	}
	x := cfg.Extproc
	pc := picker.DefaultConfig()
	pc.Policy = x.Policy
	pc.Temperature = x.Temperature
	pc.Fallbacks = x.Fallbacks
	pc.TierWeights = [kvfleet.NumTiers]float64{x.TierWeights.Device, x.TierWeights.Host, x.TierWeights.Disk, x.TierWeights.External}
	if err := pc.Validate(); err != nil {
		return nil, fmt.Errorf("extproc picker: %w", err)
	}
	pd := picker.DefaultPDConfig()
	pd.Picker = pc
	pd.MinUncachedTokens = x.PD.MinUncachedTokens
	pd.KVBytesPerToken = x.PD.KVBytesPerToken
	pd.TransferBytesPerSec = x.PD.TransferGBps * 1e9
	if err := pd.Validate(); err != nil {
		return nil, fmt.Errorf("extproc pd: %w", err)
	}
	recent, err := loadview.NewRecent(loadview.RecentConfig{TTL: x.ApproximateTTL.D(), MaxEntries: loadview.DefaultRecentConfig().MaxEntries})
	if err != nil {
		return nil, err
	}
	pending, err := loadview.NewPending(loadview.DefaultPendingConfig())
	if err != nil {
		return nil, err
	}
	debugOK, err := newDebugAccess(x.DebugHeader)
	if err != nil {
		return nil, err
	}
	r := &Router{
		cfg: x, reg: reg, idx: idx, load: loadview.New(), recent: recent, pending: pending, debugOK: debugOK,
		pick: pc, pd: pd, log: log,
		metrics: newMetrics(), debug: newDecisionLog(x.DecisionsKept), now: time.Now,
		rnd:        rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6b766761)),
		throughput: map[kvfleet.WorkerID]*picker.ThroughputEstimator{},
	}
	if !x.Outlier.Disabled {
		r.outlier = newOutlierDetector(x.Outlier)
	}
	if !x.HealthCheck.Disabled {
		r.health = newHealthChecker(x.HealthCheck)
		if r.outlier != nil {
			r.health.onRecover = func(endpoint string) { r.outlier.recovered(endpoint, r.now()) }
		}
	}
	if cfg.Index.Backend == "redis" && !x.SharedLoad.Disabled {
		if h, ok := idx.(redisClientHolder); ok {
			r.shared = newSharedLoad(h.RedisClient(), cfg.Index.Redis.Prefix, x.SharedLoad, r.load.SnapshotAll, r.load.Begun, log)
		} else {
			log.Warn("extproc.shared_load: the index gives no Redis client to share load through; replicas count only their own load")
		}
	}
	if !x.EngineMetrics.Disabled {
		emc := x.EngineMetrics // the scraper's own section, as parsed
		emc.Log = log
		r.engines = enginemetrics.New(emc)
	}
	workers, err := cfg.Workers()
	if err != nil {
		return nil, err
	}
	if err := r.SetMembers(workers); err != nil {
		return nil, err
	}
	return r, nil
}

// SetMembers replaces the worker set (config.Config.Workers at start,
// discovery on every change). Data-parallel ranks share their engine's HTTP
// endpoint: vLLM's API server balances across them, so they are one
// destination with separate caches; each is a candidate and the request is
// sent to the shared endpoint. Requests in flight keep the view they
// started with; workers that left keep their accounting until their
// requests finish.
func (r *Router) SetMembers(workers []kvfleet.Worker) error {
	f := &fleet{pools: map[string]*pool{}}
	for _, w := range workers {
		if _, _, ok := r.reg.Lookup(w.Model); !ok {
			return fmt.Errorf("worker %s: model %q has no tokenizer loaded", w.ID, w.Model)
		}
		p := f.pools[w.Model]
		if p == nil {
			p = &pool{model: w.Model, approx: map[kvfleet.WorkerID]bool{}}
			f.pools[w.Model] = p
		}
		pw := picker.WorkerFrom(w)
		p.workers = append(p.workers, pw)
		p.hasPD = p.hasPD || w.Role == picker.RolePrefill
		if w.Approximate() {
			p.approx[w.ID] = true
		}
		f.all = append(f.all, pw)
	}
	if r.outlier != nil {
		poolOf := make(map[string]string, len(workers))
		for _, w := range workers {
			poolOf[w.ID.Endpoint] = w.Model
		}
		r.outlier.setTargets(poolOf)
	}
	if r.health != nil {
		eps := make([]string, 0, len(f.all))
		for _, w := range f.all {
			eps = append(eps, w.Endpoint)
		}
		r.health.setTargets(eps)
	}
	if r.engines != nil {
		if err := r.engines.SetWorkers(workers); err != nil {
			r.log.Warn("engine metrics targets", "err", err)
		}
	}
	if old := r.fleet.Swap(f); old != nil {
		for _, w := range old.all {
			if !slices.ContainsFunc(f.all, func(n picker.Worker) bool { return n.ID == w.ID }) {
				r.recent.ForgetWorker(w.ID)
				r.pending.ForgetWorker(w.ID)
			}
		}
	}
	return nil
}

// Run does the router's background work (engine health probes, engine
// metrics scraping) until ctx ends.
func (r *Router) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if r.health != nil {
		wg.Add(1)
		go func() { defer wg.Done(); r.health.run(ctx) }()
	}
	if r.engines != nil {
		wg.Add(1)
		go func() { defer wg.Done(); r.engines.Run(ctx) }()
	}
	if r.shared != nil {
		wg.Add(1)
		go func() { defer wg.Done(); r.shared.run(ctx) }()
	}
	wg.Wait()
}

// Load exposes kvgate's own accounting (tests and metrics read it).
func (r *Router) Load() *loadview.View { return r.load }

// Route implements server.Router.
func (r *Router) Route(ctx context.Context, req *server.Request) (*server.Decision, *server.RouteError) {
	start := r.now()
	var res *preprocess.Result
	var err error
	chat, completion := strings.HasPrefix(req.Path, "/v1/chat/completions"), strings.HasPrefix(req.Path, "/v1/completions")
	switch {
	case req.Body == nil && req.Method == http.MethodPost && (chat || completion):
		// A POST without a body (Envoy sends end_of_stream on the headers)
		// is a request the engine would refuse: say so instead of routing it.
		want := "prompt"
		if chat {
			want = "messages"
		}
		r.metrics.requests.WithLabelValues("", "bad_request").Inc()
		return nil, routeError(http.StatusBadRequest, "request body is empty: want a JSON object with model and "+want, "invalid_request_error", "")
	case req.Body == nil:
		return r.routeWithoutBody(req)
	case chat:
		res, err = r.reg.ChatContext(ctx, req.Body)
	case completion:
		res, err = r.reg.CompletionContext(ctx, req.Body)
	default:
		return r.routeWithoutBody(req)
	}
	if err != nil {
		var oe *openai.Error
		if errors.Is(err, preprocess.ErrCancelled) {
			// Nobody is left to answer: the stream's context ended.
			r.metrics.requests.WithLabelValues("", "client_cancel").Inc()
			return nil, routeError(http.StatusServiceUnavailable, "request cancelled", "service_unavailable", "")
		}
		if errors.As(err, &oe) {
			r.metrics.requests.WithLabelValues("", outcomeFor(oe.Status)).Inc()
			return nil, &server.RouteError{Status: oe.Status, Body: oe.JSON()}
		}
		r.metrics.requests.WithLabelValues("", "bad_request").Inc()
		return nil, routeError(http.StatusBadRequest, err.Error(), "invalid_request_error", "")
	}
	if res.Approximate != "" {
		r.metrics.approximate.Inc()
		r.log.Debug("routing without a prefix key", "request_id", req.RequestID, "reason", res.Approximate)
	}
	p := r.fleet.Load().pools[res.Model.Name]
	if p == nil {
		r.metrics.requests.WithLabelValues(res.Served, "no_worker").Inc()
		return nil, routeError(http.StatusServiceUnavailable, fmt.Sprintf("no worker serves model %s", res.Served), "service_unavailable", "no_eligible_worker")
	}
	match := r.match(ctx, p, res.Sequence, start)
	cands := r.candidates(p, match, req.SubsetHint)
	if len(cands) == 0 {
		r.metrics.requests.WithLabelValues(res.Served, "no_worker").Inc()
		return nil, routeError(http.StatusServiceUnavailable, "no eligible worker for model "+res.Served, "service_unavailable", "no_eligible_worker")
	}
	if reason := r.admit(cands); reason != "" {
		r.metrics.requests.WithLabelValues(res.Served, "shed").Inc()
		e := routeError(http.StatusTooManyRequests, "kvgate is shedding load: "+reason, "rate_limit_exceeded", "shed")
		e.Headers = map[string]string{"x-kvgate-shed-reason": reason}
		return nil, e
	}
	expected := int(min(res.MaxTokens, picker.MaxOutputTokens)) // parsing bounds it; the picker must never see more
	if expected <= 0 {
		expected = r.cfg.ExpectedOutputTokens
	}
	preq := picker.Request{Stage: picker.StageAggregated, PromptTokens: len(res.Tokens), BlockSize: res.Model.BlockSize, Blocks: len(res.Sequence), ExpectedOutputTokens: expected}

	var dec picker.Decision
	var prefill *picker.Candidate
	pdNote := ""
	pd := r.cfg.PD.Enabled && p.hasPD
	var prefillCands, decodeCands []picker.Candidate
	if pd {
		prefillCands = byRole(cands, picker.RolePrefill)
		decodeCands = byRole(cands, picker.RoleDecode)
	}
	r.mu.Lock()
	if pd {
		var pdd picker.PDDecision
		pdd, err = picker.DecidePD(preq, prefillCands, decodeCands, r.pd, r.rnd)
		if err == nil {
			dec, cands, pdNote = pdd.Decode, decodeCands, pdd.Reason
			if pdd.Disaggregate {
				prefill = &prefillCands[pdd.Prefill.Primary]
				r.metrics.pd.WithLabelValues("disaggregated").Inc()
			} else {
				r.metrics.pd.WithLabelValues("aggregated").Inc()
			}
		}
	} else {
		dec, err = picker.Pick(preq, cands, r.pick, r.rnd)
	}
	r.mu.Unlock()
	if err != nil {
		// The picker's reason names workers and bounds: log it, never tell
		// the client.
		r.log.Warn("picker refused the request", "request_id", req.RequestID, "model", res.Served, "err", err)
		r.metrics.requests.WithLabelValues(res.Served, "no_worker").Inc()
		return nil, routeError(http.StatusServiceUnavailable, "no eligible worker for model "+res.Served, "service_unavailable", "no_eligible_worker")
	}
	chosen := cands[dec.Primary]
	depth := chosen.Depths.Max()
	uncached := int64(len(res.Tokens) - chosen.Depths[kvfleet.TierDevice]*res.Model.BlockSize)
	decodeBlocks := int64((len(res.Tokens) + expected + res.Model.BlockSize - 1) / res.Model.BlockSize)
	now := r.now()
	t := &ticket{router: r, worker: chosen.Worker.ID, chain: res.Sequence, start: now, uncached: uncached, decodeBlocks: decodeBlocks, model: res.Served}
	t.load = r.load.Begin(chosen.Worker.ID, uncached, decodeBlocks, now)
	if prefill != nil {
		// The prefill leg is accounted on the prefill worker until the
		// first token: the decode worker receives KV, not a prefill.
		t.prefill = r.load.Begin(prefill.Worker.ID, uncached, 0, now)
	}
	if p.approx[chosen.Worker.ID] {
		r.recent.Record(chosen.Worker.ID, res.Sequence, now)
	}
	r.recordPending(p, chosen.Worker.ID, res.Sequence, now)
	if prefill != nil {
		r.recordPending(p, prefill.Worker.ID, res.Sequence, now)
	}
	d := &server.Decision{Endpoint: chosen.Worker.Endpoint, Ticket: t}
	for _, fb := range dec.Fallbacks {
		d.Fallbacks = append(d.Fallbacks, cands[fb].Worker.Endpoint)
		t.fallbackIDs = append(t.fallbackIDs, cands[fb].Worker.ID)
	}
	t.fallbacks = d.Fallbacks
	if prefill != nil {
		d.Prefiller = prefill.Worker.Endpoint
	}
	r.metrics.requests.WithLabelValues(res.Served, "routed").Inc()
	r.metrics.picks.WithLabelValues(chosen.Worker.ID.String()).Inc()
	if len(res.Sequence) > 0 {
		r.metrics.overlap.Observe(float64(depth) / float64(len(res.Sequence)))
	}
	entry := decisionEntry{
		Time: now, RequestID: req.RequestID, Model: res.Served, Tokens: len(res.Tokens), Blocks: len(res.Sequence),
		Chosen: chosen.Worker.ID.String(), Endpoint: d.Endpoint, Fallbacks: d.Fallbacks, Prefiller: d.Prefiller, PD: pdNote,
		Candidates: topCandidates(cands, dec, 4),
	}
	r.debug.add(entry)
	if req.Debug {
		// Only to clients extproc.debug_header grants it: the header shows
		// every candidate's cached depth (issue 15: a prompt's variant
		// revealed whether it was cached).
		outcome := "refused"
		if r.debugOK.grants(req) {
			outcome = "granted"
			d.DebugHeader = entry.header()
		}
		r.metrics.debugHeader.WithLabelValues(outcome).Inc()
	}
	r.log.Debug("routed", "request_id", req.RequestID, "model", res.Served, "worker", entry.Chosen, "tokens", entry.Tokens, "cached_blocks", depth, "blocks", entry.Blocks)
	return d, nil
}

// match asks the index, deepened by the prefixes routed but not yet
// confirmed by KV events (pendingcredit.go), and, for workers without KV
// events, kvgate's own recent decisions. An index failure or timeout
// routes on load alone: counted, never a 5xx.
func (r *Router) match(ctx context.Context, p *pool, chain []uint64, now time.Time) kvindex.Match {
	if len(chain) == 0 {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, r.cfg.IndexTimeout.D())
	defer cancel()
	m, err := r.idx.Match(ictx, chain)
	if err != nil {
		r.metrics.indexErrors.Inc()
		r.log.Warn("index match failed; routing on load only", "err", err)
		m = kvindex.Match{}
	}
	m = r.pending.Merge(m, chain, now)
	if len(p.approx) > 0 {
		for w, d := range r.recent.Match(chain, now) {
			if p.approx[w] {
				if m == nil {
					m = kvindex.Match{}
				}
				m[w] = d
			}
		}
	}
	return m
}

// candidates lists the pool's workers with their cached depths and load,
// restricted to the proxy's subset hint when it sent one.
func (r *Router) candidates(p *pool, m kvindex.Match, hint []string) []picker.Candidate {
	var allowed map[string]bool
	if hint != nil {
		allowed = make(map[string]bool, len(hint))
		for _, h := range hint {
			allowed[h] = true
		}
	}
	loads := r.load.SnapshotAll()
	now := r.now()
	cands := make([]picker.Candidate, 0, len(p.workers))
	r.mu.Lock()
	defer r.mu.Unlock()
	warming, usable := 0, 0
	for _, w := range p.workers {
		if allowed != nil && !allowed[w.Endpoint] {
			continue
		}
		ejected, weight := r.outlier.state(w.Endpoint, now)
		// Ejected workers stay listed (the debug header shows why) but the
		// picker excludes them: no traffic, not even as a fallback.
		w.Ejected = ejected
		if !r.health.healthy(w.Endpoint) {
			w.Unhealthy = true // failed its health probes: eligible again after one success
		}
		if !w.Unhealthy && !w.Draining && !w.Ejected {
			usable++
			if weight < 1 && r.rnd.Float64() >= weight {
				w.Warming = true
				warming++
			}
		}
		l := loads[w.ID]
		if peer := r.shared.peerEstimate(w.ID, l); peer != (picker.Load{}) {
			// The other replicas' load (their last publish, extrapolated
			// by this replica's own change since): without it every
			// replica sends a burst to the same idle worker.
			l.InflightRequests += peer.InflightRequests
			l.PrefillTokens += peer.PrefillTokens
			l.DecodeBlocks += peer.DecodeBlocks
		}
		if r.engines != nil {
			if smp, ok := r.engines.Get(w.ID, now); ok {
				l.HaveEngine, l.Waiting, l.Running, l.KVUsage = true, smp.Waiting, smp.Running, smp.KVUsage
				l.KVCapacityBlocks = smp.NumGPUBlocks
			}
		}
		if est := r.throughput[w.ID]; est != nil && est.Samples() > 0 {
			l.PrefillTokensPerSec = est.Rate()
		}
		cands = append(cands, picker.Candidate{Worker: w, Depths: m[w.ID], Load: l})
	}
	if warming > 0 && warming == usable {
		// Every usable worker is ramping and this draw left them all out:
		// slow start shapes traffic, it must never refuse it.
		for i := range cands {
			cands[i].Worker.Warming = false
		}
	}
	return cands
}

// redisClientHolder is the Redis index opened by indexer.OpenIndex.
type redisClientHolder interface {
	RedisClient() redis.UniversalClient
}

// byRole keeps the candidates that can serve a P/D leg: prefill-only
// workers for the prefill leg; decode-only and aggregated workers for the
// decode leg (they also serve requests that stay aggregated).
func byRole(cands []picker.Candidate, role picker.Role) []picker.Candidate {
	var out []picker.Candidate
	for _, c := range cands {
		if c.Worker.Role == role || (role == picker.RoleDecode && c.Worker.Role == picker.RoleBoth) {
			out = append(out, c)
		}
	}
	return out
}

// admit applies the pool's admission bounds; it returns why a request is
// shed, or "".
func (r *Router) admit(cands []picker.Candidate) string {
	a := r.cfg.Admission
	if a.MaxInflight == 0 && a.MaxQueuedPrefillTokens == 0 {
		return ""
	}
	inflight, queued := 0, int64(0)
	for _, c := range cands {
		inflight += c.Load.InflightRequests
		queued += c.Load.PrefillTokens
	}
	switch {
	case a.MaxInflight > 0 && inflight >= a.MaxInflight:
		return fmt.Sprintf("pool in-flight requests at the bound (%d)", a.MaxInflight)
	case a.MaxQueuedPrefillTokens > 0 && queued >= a.MaxQueuedPrefillTokens:
		return fmt.Sprintf("pool queued prefill tokens at the bound (%d)", a.MaxQueuedPrefillTokens)
	}
	return ""
}

// routeWithoutBody routes requests kvgate cannot key on a prompt (GET
// /v1/models, header-only requests, unknown paths) to the least-loaded
// eligible worker.
func (r *Router) routeWithoutBody(req *server.Request) (*server.Decision, *server.RouteError) {
	p := &pool{workers: r.fleet.Load().all}
	cands := r.candidates(p, nil, req.SubsetHint)
	r.mu.Lock()
	dec, err := picker.Pick(picker.Request{Stage: picker.StageAggregated, BlockSize: 1}, cands, r.pick, r.rnd)
	r.mu.Unlock()
	if err != nil || len(cands) == 0 {
		r.metrics.requests.WithLabelValues("", "no_worker").Inc()
		return nil, routeError(http.StatusServiceUnavailable, "no eligible worker", "service_unavailable", "no_eligible_worker")
	}
	chosen := cands[dec.Primary]
	now := r.now()
	t := &ticket{router: r, worker: chosen.Worker.ID, start: now}
	t.load = r.load.Begin(chosen.Worker.ID, 0, 0, now)
	d := &server.Decision{Endpoint: chosen.Worker.Endpoint, Ticket: t}
	for _, fb := range dec.Fallbacks {
		d.Fallbacks = append(d.Fallbacks, cands[fb].Worker.Endpoint)
		t.fallbackIDs = append(t.fallbackIDs, cands[fb].Worker.ID)
	}
	t.fallbacks = d.Fallbacks
	r.metrics.requests.WithLabelValues("", "routed").Inc()
	return d, nil
}

func routeError(status int, msg, typ, code string) *server.RouteError {
	e := &openai.Error{Status: status, Message: msg, Type: typ, Code: code}
	return &server.RouteError{Status: status, Body: e.JSON()}
}

func outcomeFor(status int) string {
	switch status {
	case http.StatusNotFound:
		return "unknown_model"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusServiceUnavailable:
		return "preprocess_timeout"
	}
	return "bad_request"
}
