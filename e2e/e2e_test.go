package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// The short end-to-end subset, run by `make test`: two simulated engines
// and `kvgate extproc` with its embedded memory index, as real processes,
// driven through a gateway that plays Envoy. The e2e build tag adds the
// Redis Cluster variant and the kill/restart tests (e2e_full_test.go).
func TestMemoryIndexFleet(t *testing.T) {
	f := startFleet(t, fleetOptions{engines: 2})
	t.Run("RequestsReachThePrefixHolder", func(t *testing.T) { checkPrefixAffinity(t, f, f.admin, 1) })
	t.Run("StreamingThroughTheGateway", func(t *testing.T) { checkStreaming(t, f) })
	t.Run("LoadReleasedAfterConcurrentRequests", func(t *testing.T) { checkConcurrentRelease(t, f) })
	t.Run("LoadReleasedAfterClientCancelsMidStream", func(t *testing.T) { checkCancelRelease(t, f) })
}

const (
	sharedPrefixBlocks = 32
	sharedPrefixTokens = sharedPrefixBlocks * blockSize
)

// checkPrefixAffinity sends a long prompt once, waits until the index
// (scraped at metricsAt) holds it, then sends follow-ups sharing the
// prefix: each must land on the engine that served the first and be
// served from its prefix cache. It returns that engine and the prefix.
func checkPrefixAffinity(t *testing.T, f *fleet, metricsAt string, seed uint64) (int, []int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0xe2e))
	prefix := randomTokens(rng, sharedPrefixTokens)
	before := f.engineCounters(t)
	if _, err := f.complete(concat(prefix, randomTokens(rng, 40)), 4, false); err != nil {
		t.Fatal(err)
	}
	holder := servedBy(t, before, f.engineCounters(t))
	f.waitIndexed(t, metricsAt, sharedPrefixBlocks)
	for i := range 4 {
		before := f.engineCounters(t)
		r, err := f.complete(concat(prefix, randomTokens(rng, 40)), 4, true)
		if err != nil {
			t.Fatal(err)
		}
		after := f.engineCounters(t)
		if got := servedBy(t, before, after); got != holder {
			t.Fatalf("follow-up %d went to engine %d (%s), the prefix is on engine %d (%s); x-kvgate-debug: %s", i, got, f.engines[got].endpoint, holder, f.engines[holder].endpoint, r.header.Get("x-kvgate-debug"))
		}
		if c := r.usage.cached(); c < sharedPrefixTokens-blockSize {
			t.Errorf("follow-up %d: usage reports %d cached tokens, want >= %d (the shared prefix less one block)", i, c, sharedPrefixTokens-blockSize)
		}
		for e := range f.engines {
			d := after.hits[e] - before.hits[e]
			switch {
			case e == holder && d < sharedPrefixTokens-blockSize:
				t.Errorf("follow-up %d: engine %d's vllm:prefix_cache_hits_total rose by %v, want >= %d", i, e, d, sharedPrefixTokens-blockSize)
			case e != holder && d != 0:
				t.Errorf("follow-up %d: engine %d, which did not serve it, counted %v prefix-cache hits", i, e, d)
			}
		}
	}
	return holder, prefix
}

// sseEvent is one data: line of a streamed chat completion.
type sseEvent struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

// openStream starts a streamed chat completion through the gateway.
func (f *fleet) openStream(ctx context.Context, t *testing.T, content string, maxTokens int) (*http.Response, *bufio.Scanner) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"model": modelName, "max_tokens": maxTokens, "stream": true,
		"stream_options": map[string]bool{"include_usage": true},
		"messages":       []map[string]string{{"role": "system", "content": "You are terse."}, {"role": "user", "content": content}},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.gateway+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("content-type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		t.Fatalf("stream: content-type %q, want text/event-stream", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return resp, sc
}

func checkStreaming(t *testing.T, f *fleet) {
	const maxTokens = 32
	resp, sc := f.openStream(context.Background(), t, "Stream me a short poem about caches.", maxTokens)
	defer resp.Body.Close()
	var contentChunks, events int
	var text strings.Builder
	var final *usage
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("stream: line %q is not an SSE data line", line)
		}
		if done {
			t.Fatalf("stream: %q after data: [DONE]", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		events++
		var ev sseEvent
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("stream event %d: %v: %s", events, err, data)
		}
		if ev.Usage != nil {
			final = ev.Usage
		}
		for _, c := range ev.Choices {
			if c.Delta.Content != "" {
				contentChunks++
				text.WriteString(c.Delta.Content)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if !done {
		t.Fatal("stream ended without data: [DONE]")
	}
	if contentChunks < 2 {
		t.Errorf("stream carried %d content chunks, want the %d tokens spread over several events", contentChunks, maxTokens)
	}
	if final == nil {
		t.Fatal("stream carried no usage chunk (stream_options.include_usage)")
	}
	if final.CompletionTokens < 2 || final.CompletionTokens > maxTokens || final.PromptTokens == 0 {
		t.Errorf("usage %+v: want 2..%d completion tokens and a prompt", *final, maxTokens)
	}
	if text.Len() == 0 {
		t.Error("stream: no text")
	}
	f.waitNoOpenTickets(t)
}

func checkConcurrentRelease(t *testing.T, f *fleet) {
	rng := rand.New(rand.NewPCG(7, 7))
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range cap(errs) {
		prompt := randomTokens(rng, 100+10*i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.complete(prompt, 16, false); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	f.waitNoOpenTickets(t)
}

// checkCancelRelease opens a stream long enough to still be generating
// when the first chunk arrives, cancels it there, and checks both the
// engine (the request is aborted) and the extproc (its ticket closed).
func checkCancelRelease(t *testing.T, f *fleet) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, sc := f.openStream(ctx, t, "Write a very long story.", 20000)
	defer resp.Body.Close()
	gotContent := false
	for !gotContent && sc.Scan() {
		var ev sseEvent
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && data != "[DONE]" && json.Unmarshal([]byte(data), &ev) == nil {
			for _, c := range ev.Choices {
				gotContent = gotContent || c.Delta.Content != ""
			}
		}
	}
	if !gotContent {
		t.Fatalf("stream ended before its first content chunk: %v", sc.Err())
	}
	// The first chunk reached the client while the engine still
	// generates: the stream is relayed incrementally, not buffered.
	if running := f.enginesRunning(t); running != 1 {
		t.Errorf("engines report %v running requests while the client holds the first chunk of a 20000-token stream, want 1", running)
	}
	cancel()
	waitFor(t, "engines abort the cancelled request", 30*1e9, func() error {
		if r := f.enginesRunning(t); r != 0 {
			return fmt.Errorf("vllm:num_requests_running = %v", r)
		}
		return nil
	})
	f.waitNoOpenTickets(t)
}

func (f *fleet) enginesRunning(t *testing.T) float64 {
	t.Helper()
	var sum float64
	for _, e := range f.engines {
		select {
		case <-e.proc.Exited():
			continue
		default:
		}
		m, err := scrape("http://" + e.endpoint + "/metrics")
		if err != nil {
			t.Fatalf("engine %s metrics: %v", e.endpoint, err)
		}
		sum += m["vllm:num_requests_running"] + m["vllm:num_requests_waiting"]
	}
	return sum
}
