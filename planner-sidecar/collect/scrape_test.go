package collect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

const testModel = "Qwen/Qwen3-0.6B"

// startEngine runs a real simulated vLLM engine on a loopback port.
// Speed-up 2 keeps first tokens (about 10 ms) above vLLM's lowest TTFT
// bucket (1 ms), so the p90 is resolvable.
func startEngine(t *testing.T) string {
	t.Helper()
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatalf("test model files: %v", err)
	}
	s, err := enginesim.NewServer(enginesim.ServerConfig{
		Model: testModel, TokenizerDir: dir,
		Engine: enginesim.Config{BlockSize: 16, NumGPUBlocks: 4096, SpeedUp: 2},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, 2*time.Second) }()
	t.Cleanup(func() {
		cancel()
		<-done
		s.Close()
	})
	return ln.Addr().String()
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// complete sends one completion and returns the usage the engine reports.
func complete(t *testing.T, ep, prompt string, maxTokens int) usage {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": testModel, "prompt": prompt, "max_tokens": maxTokens})
	resp, err := http.Post("http://"+ep+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Usage usage `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 {
		t.Fatalf("completion: %s %v", resp.Status, err)
	}
	return r.Usage
}

func TestScraperAgainstEngineSimulator(t *testing.T) {
	a, b := startEngine(t), startEngine(t)
	s := NewScraper(map[string][]string{"aggregated": {a, b}}, "", 5*time.Second)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	obs, errs := s.Collect(context.Background(), t0, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if o := obs.Pools["aggregated"]; o.Replicas != 2 || o.RequestRate != 0 || o.TTFTP90 != 0 {
		t.Fatalf("priming scrape: %+v", o)
	}
	var prompt, completion, n int
	for i := range 6 {
		ep := []string{a, b}[i%2]
		// The same long prompt twice per engine: the second is a prefix hit.
		u := complete(t, ep, strings.Repeat("the planner sizes pools ", 20+i/2), 8+i)
		prompt += u.PromptTokens
		completion += u.CompletionTokens
		n++
	}
	// The interval is what the caller says it is: 10 s.
	obs, errs = s.Collect(context.Background(), t0.Add(10*time.Second), nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	o := obs.Pools["aggregated"]
	if o.Replicas != 2 || !slices.Equal(o.Ready, slices.Sorted(slices.Values([]string{a, b}))) {
		t.Errorf("replicas: %+v", o)
	}
	if want := float64(n) / 10; o.RequestRate != want {
		t.Errorf("rate %v, want %v", o.RequestRate, want)
	}
	if want := float64(prompt) / float64(n); o.MeanInputTokens != want {
		t.Errorf("mean input %v, want %v (usage)", o.MeanInputTokens, want)
	}
	if want := float64(completion) / float64(n); o.MeanOutputTokens != want {
		t.Errorf("mean output %v, want %v (usage)", o.MeanOutputTokens, want)
	}
	// Decode steps of an idle engine take 5.74 ms / 2, under vLLM's lowest
	// ITL bucket (10 ms): the ITL p90 cannot be resolved and is reported
	// unmeasured rather than interpolated.
	if o.TTFTP90 <= 0 || o.ITLP90 != 0 {
		t.Errorf("latencies: ttft %s (want measured) itl %s (want unmeasured)", o.TTFTP90, o.ITLP90)
	}
	if o.QueueDepth != 0 {
		t.Errorf("queue %v after all requests finished", o.QueueDepth)
	}

	// Draining: the idle engine is reported idle; an unlisted one, gone.
	obs, _ = s.Collect(context.Background(), t0.Add(20*time.Second), map[string]string{b: "aggregated", "10.9.9.9:1": "aggregated"})
	o = obs.Pools["aggregated"]
	if o.Replicas != 1 || o.Draining != 2 || !slices.Equal(o.Idle, slices.Sorted(slices.Values([]string{b, "10.9.9.9:1"}))) || o.RequestRate != 0 {
		t.Errorf("draining: %+v", o)
	}
}

func TestScraperCounterResetAndErrors(t *testing.T) {
	page := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if page == "" {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, page)
	}))
	defer srv.Close()
	ep := strings.TrimPrefix(srv.URL, "http://")
	s := NewScraper(map[string][]string{"decode": {ep}}, "", time.Second).WithTargets(50*time.Millisecond, time.Second)
	t0 := time.Unix(1000, 0)
	gen := func(ttftCount, prompt int) string {
		return fmt.Sprintf(`# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.05"} 0
vllm:time_to_first_token_seconds_bucket{le="0.1"} %d
vllm:time_to_first_token_seconds_bucket{le="+Inf"} %d
vllm:time_to_first_token_seconds_sum 1
vllm:time_to_first_token_seconds_count %d
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total %d
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 3
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc 0.25
`, ttftCount, ttftCount, ttftCount, prompt)
	}
	page = gen(100, 10000)
	s.Collect(context.Background(), t0, nil)
	// The engine restarted: counters start again from zero.
	page = gen(4, 400)
	obs, errs := s.Collect(context.Background(), t0.Add(2*time.Second), nil)
	o := obs.Pools["decode"]
	if len(errs) != 0 || o.RequestRate != 2 || o.MeanInputTokens != 100 || o.QueueDepth != 3 || o.KVUsage != 0.25 {
		t.Fatalf("after reset: %+v %v", o, errs)
	}
	// p90 of 4 observations all in (0.05, 0.1]: 0.05 + 0.05 × 3.6/4 = 0.095 s.
	if o.TTFTP90 != 95*time.Millisecond {
		t.Errorf("ttft p90 %s, want 95ms", o.TTFTP90)
	}
	// Within 50 ms: none; no ITL data.
	if o.Attainment == nil || o.Attainment.TTFT != 0 || o.Attainment.ITL != -1 {
		t.Errorf("attainment %+v", o.Attainment)
	}
	page = ""
	_, errs = s.Collect(context.Background(), t0.Add(4*time.Second), nil)
	var se *SourceError
	if len(errs) != 1 || !errors.As(errs[0], &se) || se.Source != "engine" || !strings.Contains(se.Error(), "503") {
		t.Fatalf("errors: %v", errs)
	}
	page = "not a metrics page {{{"
	_, errs = s.Collect(context.Background(), t0.Add(6*time.Second), nil)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "parse /metrics") {
		t.Fatalf("errors: %v", errs)
	}
}

func TestScraperUsesExtprocPicksAndInflight(t *testing.T) {
	engine := `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running 0
`
	picks := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, engine) }))
	defer srv.Close()
	ep := strings.TrimPrefix(srv.URL, "http://")
	ext := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `# TYPE kvgate_extproc_picks_total counter
kvgate_extproc_picks_total{worker="%[1]s#0"} %[2]d
kvgate_extproc_picks_total{worker="%[1]s#1"} %[2]d
# TYPE kvgate_extproc_worker_inflight_requests gauge
kvgate_extproc_worker_inflight_requests{worker="%[1]s#0"} 1
`, ep, picks)
	}))
	defer ext.Close()
	s := NewScraper(map[string][]string{"aggregated": {ep}}, strings.TrimPrefix(ext.URL, "http://"), time.Second)
	t0 := time.Unix(1000, 0)
	s.Collect(context.Background(), t0, nil)
	picks = 50
	obs, errs := s.Collect(context.Background(), t0.Add(10*time.Second), map[string]string{ep: "aggregated"})
	o := obs.Pools["aggregated"]
	// Two ranks × 50 picks over 10 s; the engine is idle but extproc still
	// has one request in flight to it, so it is not idle.
	if len(errs) != 0 || o.RequestRate != 10 || o.Draining != 1 || len(o.Idle) != 0 {
		t.Fatalf("%+v %v", o, errs)
	}
}
