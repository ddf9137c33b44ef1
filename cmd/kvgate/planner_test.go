package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/planner-sidecar/journal"
)

const plannerTestModel = "Qwen/Qwen3-0.6B"

// startPlannerEngines runs n simulated vLLM engines on loopback ports, at
// speed-up 5 so that first tokens (a few ms) stay above vLLM's lowest TTFT
// bucket (1 ms) and their p90 is resolvable.
func startPlannerEngines(t *testing.T, n int) []string {
	t.Helper()
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatalf("test model files: %v", err)
	}
	var eps []string
	for i := range n {
		s, err := enginesim.NewServer(enginesim.ServerConfig{
			Model: plannerTestModel, TokenizerDir: dir, Seed: uint64(i + 1),
			Engine: enginesim.Config{BlockSize: 16, NumGPUBlocks: 4096, SpeedUp: 5},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
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
		go func() { done <- s.Serve(ctx, ln, time.Second) }()
		t.Cleanup(func() { cancel(); <-done; s.Close() })
		eps = append(eps, ln.Addr().String())
	}
	return eps
}

// plannerLoad keeps sending completions to the engines until the test ends.
func plannerLoad(t *testing.T, eps []string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ctx.Err() == nil; j++ {
				body, _ := json.Marshal(map[string]any{"model": plannerTestModel,
					"prompt": strings.Repeat("a planner watches the fleet ", 10+(i+j)%7), "max_tokens": 8})
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ep+"/v1/completions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// The done-when check: the planner, advisory, against a fleet of
// simulated engines under load, profiles one of them, journals a
// decision per interval with the observed load, and explains it.
func TestPlannerAdvisoryAgainstSimulatedFleet(t *testing.T) {
	eps := startPlannerEngines(t, 2)
	dir := t.TempDir()
	profile := filepath.Join(dir, "profile.json")
	var out, errb bytes.Buffer
	code := dispatch([]string{"planner", "profile", "--engine", "http://" + eps[0], "--out", profile,
		"--inputs", "64,512", "--concurrency", "1,4", "--contexts", "128", "--batches", "1,4", "--requests", "4", "--output-tokens", "8"},
		nil, &out, &errb)
	if code != 0 {
		t.Fatalf("profile: exit %d\n%s%s", code, out.String(), errb.String())
	}
	plannerLoad(t, eps)
	jpath := filepath.Join(dir, "planner.jsonl")
	out.Reset()
	errb.Reset()
	bare := filepath.Join(dir, "bare.yaml") // the flags say it all
	os.WriteFile(bare, []byte("planner: {}\n"), 0o644)
	code = dispatch([]string{"planner", "--config", bare, "--advisory", "--profile", profile, "--engines", strings.Join(eps, ","),
		"--interval", "400ms", "--steps", "4", "--journal", jpath, "--admin", "127.0.0.1:0"}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("planner: exit %d\n%s", code, errb.String())
	}
	entries, err := journal.ReadFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 {
		t.Fatalf("%d journal lines, want 4", len(entries))
	}
	for i, e := range entries {
		o, ok := e.Observation.Pools["aggregated"]
		if !e.Advisory || e.Applied || !ok || o.Replicas != 2 || e.Decision.Desired["aggregated"] < 1 {
			t.Errorf("entry %d: %+v", i, e)
		}
		// The first scrape only primes the counters; every later interval
		// saw the load. (Mean output is not exactly max_tokens: generated
		// tokens are counted per step, requests when they finish, and a
		// scrape falls between the two.)
		if i > 0 && (o.RequestRate <= 0 || o.MeanInputTokens <= 0 || o.MeanOutputTokens <= 0 || o.TTFTP90 <= 0) {
			t.Errorf("entry %d observed nothing: %+v", i, o)
		}
	}
	out.Reset()
	if code := dispatch([]string{"planner", "explain", "--journal", jpath}, nil, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "advisory (not applied)") || !strings.Contains(out.String(), "pool aggregated") {
		t.Fatalf("explain: %d\n%s", code, out.String())
	}
}

func TestPlannerConfigFileAndBadInput(t *testing.T) {
	eps := startPlannerEngines(t, 1)
	dir := t.TempDir()
	profile := filepath.Join(dir, "p.json")
	os.WriteFile(profile, []byte(`{"prefill":[{"input_tokens":100,"concurrency":1,"ttft_seconds":0.05,"tokens_per_second":5000}],
"decode":[{"context_tokens":100,"batch":4,"itl_seconds":0.01,"tokens_per_second":400}]}`), 0o644)
	fleet := filepath.Join(dir, "fleet.json")
	cfg := filepath.Join(dir, "kvgate.yaml")
	os.WriteFile(cfg, []byte(`
planner:
  interval: 200ms
  profile: `+profile+`
  admin: 127.0.0.1:0
  pools: [{name: aggregated, min: 2, max: 3, endpoints: ["`+eps[0]+`"]}]
  actuator: {kind: file, file: `+fleet+`}
`), 0o644)
	var out, errb bytes.Buffer
	if code := dispatch([]string{"planner", "--config", cfg, "--steps", "2"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	// Not advisory: the file actuator wrote the pool's size, the minimum.
	data, err := os.ReadFile(fleet)
	if err != nil || !strings.Contains(string(data), `"aggregated": 2`) {
		t.Fatalf("fleet file: %s %v", data, err)
	}
	bare := filepath.Join(dir, "bare.yaml")
	os.WriteFile(bare, []byte("planner: {}\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"planner", "--config", bare, "--engines", eps[0]}, "planner.profile: required"},
		{[]string{"planner", "--config", bare, "--engines", "nohost"}, `--engines: "nohost"`},
		{[]string{"planner", "--config", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
		{[]string{"planner", "--config", bare, "--profile", cfg, "--engines", eps[0]}, "planner.profile"},
		{[]string{"planner", "profile", "--engine", "http://" + eps[0]}, "--engine and --out are required"},
		{[]string{"planner", "profile", "--engine", "x", "--out", "y", "--batches", "a"}, `--batches: "a"`},
		{[]string{"planner", "explain"}, "--journal is required"},
		{[]string{"planner", "explain", "--journal", cfg}, "journal line"},
		{[]string{"planner", "explain", "--journal", cfg, "--at", "yesterday"}, "want RFC 3339"},
	} {
		errb.Reset()
		if code := dispatch(c.args, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}
