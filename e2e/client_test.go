package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

var httpClient = &http.Client{Timeout: 60 * time.Second}

// usage is the OpenAI usage block as vLLM fills it.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u usage) cached() int {
	if u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// reply is one non-streamed response through the gateway.
type reply struct {
	status int
	header http.Header
	body   []byte
	usage  usage
}

// post sends body to the gateway path and reads the whole answer.
func (f *fleet) post(path string, body any, header map[string]string) (reply, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return reply{}, err
	}
	req, err := http.NewRequest(http.MethodPost, f.gateway+path, bytes.NewReader(b))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("content-type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, header: resp.Header}
	if r.body, err = io.ReadAll(io.LimitReader(resp.Body, 8<<20)); err != nil {
		return r, fmt.Errorf("POST %s: reading the body: %w", path, err)
	}
	if r.status != http.StatusOK {
		return r, fmt.Errorf("POST %s: status %d: %.500s", path, r.status, r.body)
	}
	var parsed struct {
		Usage *usage `json:"usage"`
	}
	if err := json.Unmarshal(r.body, &parsed); err != nil || parsed.Usage == nil {
		return r, fmt.Errorf("POST %s: no usage in %.500s (%v)", path, r.body, err)
	}
	r.usage = *parsed.Usage
	return r, nil
}

// complete sends a token-id completion (exact control over which tokens,
// hence which KV blocks, two requests share).
func (f *fleet) complete(tokens []int, maxTokens int, debug bool) (reply, error) {
	h := map[string]string{}
	if debug {
		h["x-kvgate-debug"] = "1"
	}
	return f.post("/v1/completions", map[string]any{"model": modelName, "prompt": tokens, "max_tokens": maxTokens}, h)
}

// randomTokens returns n token ids of ordinary Qwen3 vocabulary, seeded so
// a failing run can be reproduced.
func randomTokens(rng *rand.Rand, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 1000 + rng.IntN(50000)
	}
	return out
}

func concat(a, b []int) []int { return append(append([]int(nil), a...), b...) }

// scrape reads a Prometheus text endpoint and returns the sum over label
// sets of each sample name, and each labelled sample under its name and
// labels as written (`name{outcome="ok"}`).
func scrape(url string) (map[string]float64, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, labelled := line, "", ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if j := strings.LastIndexByte(rest, '}'); j >= 0 {
			labelled = name + rest[:j+1]
			rest = rest[j+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("GET %s: malformed sample %q", url, line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("GET %s: sample %q: %w", url, line, err)
		}
		out[name] += v
		if labelled != "" {
			out[labelled] += v
		}
	}
	return out, sc.Err()
}

// engineCounters is what the engines themselves report: which one served
// a request, and how many prompt tokens their prefix caches supplied.
type engineCounters struct{ served, hits []float64 }

func (f *fleet) engineCounters(t *testing.T) engineCounters {
	t.Helper()
	var c engineCounters
	for _, e := range f.engines {
		select {
		case <-e.proc.Exited():
			c.served, c.hits = append(c.served, 0), append(c.hits, 0)
			continue
		default:
		}
		m, err := scrape("http://" + e.endpoint + "/metrics")
		if err != nil {
			t.Fatalf("engine %s metrics: %v", e.endpoint, err)
		}
		c.served = append(c.served, m["vllm:request_success_total"])
		c.hits = append(c.hits, m["vllm:prefix_cache_hits_total"])
	}
	return c
}

// servedBy returns the one engine whose finished-request counter moved
// between two snapshots taken around a single request.
func servedBy(t *testing.T, before, after engineCounters) int {
	t.Helper()
	who := -1
	for i := range before.served {
		switch d := after.served[i] - before.served[i]; {
		case d == 1 && who == -1:
			who = i
		case d != 0:
			t.Fatalf("request counters moved on several engines: before %v, after %v", before.served, after.served)
		}
	}
	if who < 0 {
		t.Fatalf("no engine counted the request: before %v, after %v", before.served, after.served)
	}
	return who
}

// waitFor polls check until it returns nil or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, check func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var err error
	for {
		if err = check(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: still not true after %s: %v", what, timeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitIndexed waits until the index (extproc's embedded one, or the
// Redis indexer's) holds at least blocks (block, worker) entries.
func (f *fleet) waitIndexed(t *testing.T, metricsAt string, blocks int) {
	t.Helper()
	waitFor(t, "index holds the prompt's blocks", 30*time.Second, func() error {
		m, err := scrape("http://" + metricsAt + "/metrics")
		if err != nil {
			return err
		}
		if got := m["kvgate_indexer_worker_blocks"]; got < float64(blocks) {
			return fmt.Errorf("kvgate_indexer_worker_blocks = %v, want >= %d", got, blocks)
		}
		return nil
	})
	// Not a timing assertion: a documented bound on the extproc's view of
	// the Redis registry lagging the indexer's writes (zero for memory).
	time.Sleep(f.registryLag)
}

// waitNoOpenTickets waits until the extproc's load accounting is empty.
func (f *fleet) waitNoOpenTickets(t *testing.T) {
	t.Helper()
	waitFor(t, "kvgate_extproc_open_tickets returns to 0", 30*time.Second, func() error {
		m, err := scrape("http://" + f.admin + "/metrics")
		if err != nil {
			return err
		}
		v, ok := m["kvgate_extproc_open_tickets"]
		if !ok {
			return fmt.Errorf("kvgate_extproc_open_tickets missing")
		}
		if v != 0 {
			return fmt.Errorf("kvgate_extproc_open_tickets = %v", v)
		}
		return nil
	})
}
