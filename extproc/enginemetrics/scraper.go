package enginemetrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// target is where one worker's metrics are read (SetWorkers derives it).
type target struct {
	URL string // http://ip:port/metrics
	// Model, when set, keeps only series whose model_name label (if any)
	// equals it.
	Model string
}

// Stats counts scrapes, by outcome.
type Stats struct {
	Targets   int64 // distinct URLs scraped now
	Scrapes   int64 // requests made
	Successes int64 // pages that gave every worker on them a sample
	// Failures by reason.
	Timeouts   int64 // no complete answer within Timeout
	Transport  int64 // connection refused, reset, DNS, ...
	HTTPStatus int64 // a status other than 200
	Oversize   int64 // page larger than MaxBodyBytes
	Parse      int64 // not a valid text exposition, or a bad value
	Missing    int64 // a worker's series absent from the page
	BadTargets int64 // targets refused by SetWorkers (bad URL)
}

// Scraper polls workers' /metrics pages. Workers whose targets share a URL
// (the data-parallel ranks behind one vLLM API server) share one request;
// each gets the series labelled with its rank.
type Scraper struct {
	cfg Config

	mu      sync.RWMutex
	workers map[kvfleet.WorkerID]target
	byURL   map[string]map[kvfleet.WorkerID]string // URL → worker → model
	samples map[kvfleet.WorkerID]Sample
	changed chan struct{}

	targets                                         atomic.Int64
	scrapes, successes, timeouts, transport, status atomic.Int64
	oversize, parseErrors, missing, badTargets      atomic.Int64
}

// New returns a scraper with no targets; call Run to start polling.
func New(cfg Config) *Scraper {
	return &Scraper{
		cfg:     cfg.withDefaults(),
		workers: map[kvfleet.WorkerID]target{},
		byURL:   map[string]map[kvfleet.WorkerID]string{},
		samples: map[kvfleet.WorkerID]Sample{},
		changed: make(chan struct{}, 1),
	}
}

// SetWorkers replaces the scraped set with workers: each is read at
// http://<endpoint>/metrics (vLLM's and SGLang's API server serve it beside
// the OpenAI routes) and keeps only its model's series. Data-parallel ranks
// of one engine share the page. Workers no longer listed, or whose endpoint
// or model changed, lose their samples; a worker whose URL is bad is left
// out, counted, and reported in the error, the others applied.
func (s *Scraper) SetWorkers(workers []kvfleet.Worker) error {
	targets := make(map[kvfleet.WorkerID]target, len(workers))
	for _, w := range workers {
		targets[w.ID] = target{URL: "http://" + w.ID.Endpoint + "/metrics", Model: w.Model}
	}
	return s.setTargets(targets)
}

// setTargets replaces the target set (SetWorkers; tests give URLs of their
// own servers directly).
func (s *Scraper) setTargets(targets map[kvfleet.WorkerID]target) error {
	var errs []error
	good := make(map[kvfleet.WorkerID]target, len(targets))
	for w, t := range targets {
		if err := checkURL(t.URL); err != nil {
			errs = append(errs, fmt.Errorf("enginemetrics: target %s: %w", w, err))
			continue
		}
		good[w] = t
	}
	s.badTargets.Add(int64(len(errs)))
	byURL := map[string]map[kvfleet.WorkerID]string{}
	for w, t := range good {
		if byURL[t.URL] == nil {
			byURL[t.URL] = map[kvfleet.WorkerID]string{}
		}
		byURL[t.URL][w] = t.Model
	}
	s.mu.Lock()
	for w := range s.samples {
		if t, ok := good[w]; !ok || t != s.workers[w] {
			delete(s.samples, w)
		}
	}
	s.workers, s.byURL = good, byURL
	s.mu.Unlock()
	s.targets.Store(int64(len(byURL)))
	select {
	case s.changed <- struct{}{}:
	default:
	}
	// Sorted so that the error reads the same every time.
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

func checkURL(raw string) error {
	if len(raw) > 2048 {
		return fmt.Errorf("URL longer than 2048 bytes")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Errorf("%q: want http(s)://host:port/path", raw)
	}
	return nil
}

// Get returns w's latest sample; ok is false when there is none or it is
// older than the staleness bound at now.
func (s *Scraper) Get(w kvfleet.WorkerID, now time.Time) (Sample, bool) {
	s.mu.RLock()
	smp, ok := s.samples[w]
	s.mu.RUnlock()
	if !ok || now.Sub(smp.At) > s.cfg.Staleness.D() {
		return Sample{}, false
	}
	return smp, true
}

// Stats returns the counters.
func (s *Scraper) Stats() Stats {
	return Stats{
		Targets: s.targets.Load(), Scrapes: s.scrapes.Load(), Successes: s.successes.Load(),
		Timeouts: s.timeouts.Load(), Transport: s.transport.Load(), HTTPStatus: s.status.Load(),
		Oversize: s.oversize.Load(), Parse: s.parseErrors.Load(), Missing: s.missing.Load(),
		BadTargets: s.badTargets.Load(),
	}
}

// Run polls every target URL until ctx ends, one goroutine per URL, started
// and stopped as SetWorkers changes the set. A slow target delays only its
// own next scrape (ticks are dropped, never queued).
func (s *Scraper) Run(ctx context.Context) {
	var wg sync.WaitGroup
	running := map[string]context.CancelFunc{}
	defer func() {
		for _, cancel := range running {
			cancel()
		}
		wg.Wait()
	}()
	for {
		s.mu.RLock()
		for u, cancel := range running {
			if _, ok := s.byURL[u]; !ok {
				cancel()
				delete(running, u)
			}
		}
		for u := range s.byURL {
			if _, ok := running[u]; !ok {
				uctx, cancel := context.WithCancel(ctx)
				running[u] = cancel
				wg.Go(func() { s.poll(uctx, u) })
			}
		}
		s.mu.RUnlock()
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		}
	}
}

func (s *Scraper) poll(ctx context.Context, u string) {
	// A random phase spreads a fleet's scrapes over the interval instead of
	// firing them all at once.
	phase := time.NewTimer(rand.N(s.cfg.Interval.D()))
	select {
	case <-ctx.Done():
		phase.Stop()
		return
	case <-phase.C:
	}
	tick := time.NewTicker(s.cfg.Interval.D())
	defer tick.Stop()
	lastReason := ""
	for {
		reason, err := s.scrape(ctx, u)
		if ctx.Err() != nil {
			return
		}
		// Log when a target's state changes, not on every failed scrape.
		if reason != lastReason {
			if err != nil {
				s.cfg.Log.Warn("enginemetrics: scrape failing", "url", u, "reason", reason, "err", err)
			} else {
				s.cfg.Log.Info("enginemetrics: scrape ok", "url", u)
			}
			lastReason = reason
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// scrape fetches u once and stores a sample for each worker on it. It
// returns the failure reason ("" on success) and the error.
func (s *Scraper) scrape(ctx context.Context, u string) (string, error) {
	s.scrapes.Add(1)
	body, reason, err := s.fetch(ctx, u)
	if err != nil {
		if ctx.Err() == nil {
			s.count(reason)
		}
		return reason, err
	}
	pg, err := parse(body)
	if err != nil {
		s.parseErrors.Add(1)
		return "parse", fmt.Errorf("%s: %w", u, err)
	}
	at := time.Now()

	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.byURL[u]
	var firstErr error
	var reasonOut string
	for w, model := range ws {
		smp, err := pg.sample(selector{model: model, rank: w.DPRank, byRank: len(ws) > 1})
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: worker %s: %w", u, w, err)
				reasonOut = "parse"
				if errors.Is(err, errMissing) {
					reasonOut = "missing"
				}
			}
			continue
		}
		smp.At = at
		s.samples[w] = smp
	}
	switch reasonOut {
	case "":
		s.successes.Add(1)
	case "missing":
		s.missing.Add(1)
	default:
		s.parseErrors.Add(1)
	}
	return reasonOut, firstErr
}

func (s *Scraper) fetch(ctx context.Context, u string) ([]byte, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, "transport", err
	}
	// Ask for the text format: prometheus_client would otherwise be free to
	// answer OpenMetrics, whose timestamps the text parser rejects.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return nil, failReason(ctx, err), fmt.Errorf("%s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Drain a little so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, "status", fmt.Errorf("%s: HTTP %s", u, resp.Status)
	}
	if resp.ContentLength > s.cfg.MaxBodyBytes {
		return nil, "oversize", fmt.Errorf("%s: Content-Length %d over %d bytes", u, resp.ContentLength, s.cfg.MaxBodyBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxBodyBytes+1))
	if err != nil {
		return nil, failReason(ctx, err), fmt.Errorf("%s: reading body: %w", u, err)
	}
	if int64(len(body)) > s.cfg.MaxBodyBytes {
		return nil, "oversize", fmt.Errorf("%s: page over %d bytes", u, s.cfg.MaxBodyBytes)
	}
	return body, "", nil
}

func failReason(ctx context.Context, err error) string {
	var ne net.Error
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return "timeout"
	}
	return "transport"
}

func (s *Scraper) count(reason string) {
	switch reason {
	case "timeout":
		s.timeouts.Add(1)
	case "status":
		s.status.Add(1)
	case "oversize":
		s.oversize.Add(1)
	default:
		s.transport.Add(1)
	}
}
