package enginemetrics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// engine is a test /metrics server whose page can be swapped.
type engine struct {
	mu   sync.Mutex
	page string
	hits atomic.Int64
	srv  *httptest.Server
}

func newEngine(t *testing.T, page string) *engine {
	e := &engine{page: page}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		e.mu.Lock()
		p := e.page
		e.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprint(w, p)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *engine) set(page string) {
	e.mu.Lock()
	e.page = page
	e.mu.Unlock()
}

func (e *engine) url() string { return e.srv.URL + "/metrics" }

func runScraper(t *testing.T, cfg Config) *Scraper {
	t.Helper()
	s := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return s
}

// eventually waits for cond (lab/testkit/poll); the deadline only
// bounds a broken test and asserts nothing about speed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.True(t, what, 30*time.Second, cond)
}

func waitSample(t *testing.T, s *Scraper, w kvfleet.WorkerID, ok func(Sample) bool) Sample {
	t.Helper()
	var got Sample
	eventually(t, "sample of "+w.String(), func() bool {
		var have bool
		got, have = s.Get(w, time.Now())
		return have && ok(got)
	})
	return got
}

func TestScraperSharedDataParallelPage(t *testing.T) {
	e := newEngine(t, vllmDP2Page)
	s := runScraper(t, Config{Interval: yamlconf.Duration(10 * time.Millisecond)})
	const model = "meta-llama/Llama-3.1-8B-Instruct"
	w0 := kvfleet.WorkerID{Endpoint: "10.0.0.1:8000", DPRank: 0}
	w1 := kvfleet.WorkerID{Endpoint: "10.0.0.1:8000", DPRank: 1}
	if err := s.setTargets(map[kvfleet.WorkerID]target{w0: {URL: e.url(), Model: model}, w1: {URL: e.url(), Model: model}}); err != nil {
		t.Fatal(err)
	}
	s0 := waitSample(t, s, w0, func(Sample) bool { return true })
	s1 := waitSample(t, s, w1, func(Sample) bool { return true })
	if s0.Running != 7 || s0.Waiting != 2 || s0.KVUsage != 0.4375 || s0.NumGPUBlocks != 27802 {
		t.Errorf("rank 0: %+v", s0)
	}
	if s1.Running != 3 || s1.Waiting != 0 || s1.KVUsage != 0.125 || s1.NumGPUBlocks != 27790 {
		t.Errorf("rank 1: %+v", s1)
	}
	// New values are picked up.
	e.set(strings.ReplaceAll(vllmDP2Page, `engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0`, `engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 11.0`))
	waitSample(t, s, w1, func(x Sample) bool { return x.Running == 11 })
	if st := s.Stats(); st.Targets != 1 || st.Successes == 0 {
		t.Errorf("stats %+v: want one URL and successes", st)
	}
}

func TestScraperSGLangAndModelFilter(t *testing.T) {
	e := newEngine(t, sglangPage)
	s := runScraper(t, Config{Interval: yamlconf.Duration(10 * time.Millisecond)})
	good := kvfleet.WorkerID{Endpoint: "a:1"}
	wrongModel := kvfleet.WorkerID{Endpoint: "b:1"}
	other := newEngine(t, sglangPage)
	if err := s.setTargets(map[kvfleet.WorkerID]target{
		good:       {URL: e.url(), Model: "Qwen/Qwen3-8B"},
		wrongModel: {URL: other.url(), Model: "meta-llama/Llama-3.1-8B-Instruct"},
	}); err != nil {
		t.Fatal(err)
	}
	got := waitSample(t, s, good, func(Sample) bool { return true })
	if got.Running != 31 || got.Waiting != 9 || got.KVUsage != 0.71 || got.KVCapacityTokens != 146776 {
		t.Errorf("sglang: %+v", got)
	}
	eventually(t, "missing counted", func() bool { return s.Stats().Missing > 0 })
	if _, ok := s.Get(wrongModel, time.Now()); ok {
		t.Error("sample for a worker whose model is not on the page")
	}
}

func TestScraperStaleness(t *testing.T) {
	e := newEngine(t, vllmV0Page)
	const stale = 3 * time.Second
	s := runScraper(t, Config{Interval: yamlconf.Duration(10 * time.Millisecond), Staleness: yamlconf.Duration(stale)})
	w := kvfleet.WorkerID{Endpoint: "a:1"}
	if err := s.setTargets(map[kvfleet.WorkerID]target{w: {URL: e.url()}}); err != nil {
		t.Fatal(err)
	}
	got := waitSample(t, s, w, func(Sample) bool { return true })
	// Get is judged against the caller's clock: find the sample's time, then
	// ask just inside and just past the bound.
	if _, ok := s.Get(w, got.At.Add(stale)); !ok {
		t.Error("sample exactly at the staleness bound reported stale")
	}
	// Stop scraping so that At no longer moves, then look past the bound.
	if err := s.setTargets(nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get(w, time.Now()); ok {
		t.Error("removed worker still has a sample")
	}
	s2 := New(Config{Staleness: yamlconf.Duration(stale)})
	s2.samples[w] = Sample{Running: 1, At: time.Unix(1000, 0)}
	if _, ok := s2.Get(w, time.Unix(1000, 0).Add(stale+time.Nanosecond)); ok {
		t.Error("sample past the staleness bound reported")
	}
	if x, ok := s2.Get(w, time.Unix(1000, 0).Add(stale)); !ok || x.Running != 1 {
		t.Error("sample within the staleness bound not reported")
	}
}

func TestScraperFailuresCounted(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/500", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "engine sleeping", http.StatusInternalServerError)
	})
	big := strings.Repeat("# padding comment to make the page large\n", 100) + vllmV0Page
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, big) })
	mux.HandleFunc("/bigchunked", func(w http.ResponseWriter, r *http.Request) {
		for range 100 {
			fmt.Fprint(w, "# padding comment to make the page large\n")
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/garbage", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "vllm:num_requests_running{engine=\"0\" \x00\xff 1\n")
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/big", http.StatusFound) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })

	// An address with nothing listening: connection refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String() + "/metrics"
	l.Close()

	s := runScraper(t, Config{Interval: yamlconf.Duration(10 * time.Millisecond), Timeout: 50 * time.Millisecond, MaxBodyBytes: 1024})
	targets := map[kvfleet.WorkerID]target{}
	for i, path := range []string{"/slow", "/500", "/big", "/bigchunked", "/garbage", "/redirect"} {
		targets[kvfleet.WorkerID{Endpoint: fmt.Sprintf("w%d:1", i)}] = target{URL: srv.URL + path}
	}
	targets[kvfleet.WorkerID{Endpoint: "refused:1"}] = target{URL: refused}
	if err := s.setTargets(targets); err != nil {
		t.Fatal(err)
	}
	eventually(t, "every failure reason", func() bool {
		st := s.Stats()
		return st.Timeouts > 0 && st.HTTPStatus >= 2 && st.Oversize >= 2 && st.Parse > 0 && st.Transport > 0
	})
	st := s.Stats()
	if st.Successes != 0 {
		t.Errorf("stats %+v: successes from failing targets", st)
	}
	for w := range targets {
		if _, ok := s.Get(w, time.Now()); ok {
			t.Errorf("%s has a sample", w)
		}
	}
}

func TestScraperTargetChanges(t *testing.T) {
	a := newEngine(t, vllmV0Page)
	b := newEngine(t, sglangPage)
	s := runScraper(t, Config{Interval: yamlconf.Duration(10 * time.Millisecond)})
	w := kvfleet.WorkerID{Endpoint: "x:1"}
	if err := s.setTargets(map[kvfleet.WorkerID]target{w: {URL: a.url()}}); err != nil {
		t.Fatal(err)
	}
	waitSample(t, s, w, func(x Sample) bool { return x.Running == 12 })

	// The worker moves to another URL: its old sample is dropped at once and
	// the new page's values arrive.
	if err := s.setTargets(map[kvfleet.WorkerID]target{w: {URL: b.url()}}); err != nil {
		t.Fatal(err)
	}
	if x, ok := s.Get(w, time.Now()); ok && x.Running == 12 {
		t.Error("old URL's sample survived the target change")
	}
	waitSample(t, s, w, func(x Sample) bool { return x.Running == 31 })
	if st := s.Stats(); st.Targets != 1 {
		t.Errorf("targets %d, want 1", st.Targets)
	}

	// Bad URLs are refused and counted; the good ones still apply.
	w2 := kvfleet.WorkerID{Endpoint: "y:1"}
	err := s.setTargets(map[kvfleet.WorkerID]target{
		w:                               {URL: b.url()},
		w2:                              {URL: a.url()},
		{Endpoint: "bad1:1"}:            {URL: "ftp://host/metrics"},
		{Endpoint: "bad2:1"}:            {URL: "http://"},
		{Endpoint: "bad3:1"}:            {URL: "http://user:pw@host/metrics"},
		{Endpoint: "bad4:1", DPRank: 1}: {URL: "://nope"},
	})
	if err == nil || !strings.Contains(err.Error(), "bad1:1#0") {
		t.Errorf("setTargets error %v, want one naming the bad targets", err)
	}
	if st := s.Stats(); st.BadTargets != 4 || st.Targets != 2 {
		t.Errorf("stats %+v: want 4 bad targets, 2 URLs", st)
	}
	waitSample(t, s, w2, func(x Sample) bool { return x.Running == 12 })

	// Removing everything stops the pollers of both URLs.
	if err := s.setTargets(nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get(w2, time.Now()); ok {
		t.Error("sample survived removal")
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{Interval: yamlconf.Duration(-1), Timeout: -1, MaxBodyBytes: -1, Staleness: yamlconf.Duration(-1)}.withDefaults()
	if c.Interval.D() != DefaultInterval || c.Timeout != DefaultTimeout || c.MaxBodyBytes != DefaultMaxBodyBytes || c.Staleness.D() != DefaultStaleness {
		t.Errorf("defaults not applied: %+v", c)
	}
	if c := (Config{Interval: yamlconf.Duration(time.Nanosecond)}).withDefaults(); c.Interval.D() != minInterval {
		t.Errorf("interval %v, want the %v floor", c.Interval, minInterval)
	}
}

// SetWorkers reads each worker's page at http://<endpoint>/metrics, one
// request for the data-parallel ranks that share it, filtered by model.
func TestScraperSetWorkers(t *testing.T) {
	e := newEngine(t, vllmDP2Page)
	s := runScraper(t, Config{Interval: yamlconf.Duration(10 * time.Millisecond)})
	ep := strings.TrimPrefix(e.srv.URL, "http://")
	const model = "meta-llama/Llama-3.1-8B-Instruct"
	w0 := kvfleet.Worker{ID: kvfleet.WorkerID{Endpoint: ep}, Model: model}
	w1 := kvfleet.Worker{ID: kvfleet.WorkerID{Endpoint: ep, DPRank: 1}, Model: model}
	if err := s.SetWorkers([]kvfleet.Worker{w0, w1}); err != nil {
		t.Fatal(err)
	}
	if s1 := waitSample(t, s, w1.ID, func(Sample) bool { return true }); s1.Running != 3 {
		t.Errorf("rank 1: %+v", s1)
	}
	if st := s.Stats(); st.Targets != 1 {
		t.Errorf("stats %+v: want the ranks on one URL", st)
	}
	other := kvfleet.Worker{ID: kvfleet.WorkerID{Endpoint: ep, DPRank: 1}, Model: "Qwen/Qwen3-8B"}
	if err := s.SetWorkers([]kvfleet.Worker{other}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get(other.ID, time.Now()); ok {
		t.Error("a worker whose model changed kept its sample")
	}
	eventually(t, "missing counted for a model absent from the page", func() bool { return s.Stats().Missing > 0 })
}
