package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/lab/replay"
)

// liveOptions drives a wall-clock replay over HTTP through a gateway (the
// demo's, or a real Envoy in front of kvgate extproc and real engines).
type liveOptions struct {
	model string
	// span compresses the trace's arrivals into about this long (0: the
	// trace's own timing divided by compression).
	span        time.Duration
	compression float64
	maxTokens   int // cap on each request's output tokens (0: the trace's)
	// answered, when set, counts requests as their responses end (for
	// progress lines while the replay runs).
	answered *atomic.Int64
}

// liveRequest is what one request's response showed.
type liveRequest struct {
	prompt, cached, outputs int
	ttft, e2e, lastChunk    time.Duration
	sentAt                  time.Duration // since the replay's first request was due
	chosen                  string
	err                     error
}

// liveReplay sends the trace's requests as streaming token-id completions
// through the gateway at base, arrivals scaled, and measures what a client
// sees: cached prompt tokens (usage.prompt_tokens_details.cached_tokens),
// time to first token, inter-token latency, end-to-end latency and, from
// kvgate's x-kvgate-debug header, which worker served each request.
func liveReplay(ctx context.Context, base string, reqs []replay.TraceRequest, o liveOptions) (*replay.PolicyResult, []liveRequest, error) {
	if len(reqs) == 0 {
		return nil, nil, errors.New("no requests")
	}
	scale := 1.0
	if o.compression > 0 {
		scale = 1 / o.compression
	}
	if span := time.Duration(reqs[len(reqs)-1].Timestamp-reqs[0].Timestamp) * time.Millisecond; o.span > 0 && span > 0 {
		scale = float64(o.span) / float64(span)
	}
	results := make([]liveRequest, len(reqs))
	client := &http.Client{Timeout: 5 * time.Minute}
	start := time.Now()
	var wg sync.WaitGroup
	for i, r := range reqs {
		at := time.Duration(float64(time.Duration(r.Timestamp-reqs[0].Timestamp)*time.Millisecond) * scale)
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil, nil, ctx.Err()
		case <-time.After(time.Until(start.Add(at))):
		}
		out := r.OutputLength
		if o.maxTokens > 0 {
			out = min(out, o.maxTokens)
		}
		wg.Add(1)
		go func(i int, tokens []uint32, out int) {
			defer wg.Done()
			sentAt := time.Since(start)
			results[i] = sendCompletion(ctx, client, base, o.model, tokens, max(out, 1))
			results[i].sentAt = sentAt
			if o.answered != nil {
				o.answered.Add(1)
			}
		}(i, replay.Tokens(nil, r), out)
	}
	wg.Wait()
	elapsed := time.Since(start)

	var prompt, cached, ok int
	var ttfts, e2es, itls []float64
	perWorker := map[string]int{}
	for _, r := range results {
		if r.err != nil {
			continue
		}
		ok++
		prompt += r.prompt
		cached += r.cached
		ttfts = append(ttfts, ms(r.ttft))
		e2es = append(e2es, ms(r.e2e))
		if r.outputs > 1 {
			itls = append(itls, ms(r.lastChunk-r.ttft)/float64(r.outputs-1))
		}
		if r.chosen != "" {
			perWorker[r.chosen]++
		}
	}
	slices.Sort(ttfts)
	slices.Sort(e2es)
	slices.Sort(itls)
	res := &replay.PolicyResult{
		HitRatio:  float64(cached) / float64(max(prompt, 1)),
		TTFTP50Ms: pctl(ttfts, 0.5), TTFTP90Ms: pctl(ttfts, 0.9), TTFTP99Ms: pctl(ttfts, 0.99),
		ITLP50Ms: pctl(itls, 0.5), E2EP90Ms: pctl(e2es, 0.9),
		ThroughputRPS: float64(ok) / elapsed.Seconds(),
		TTFTsMs:       ttfts, Elapsed: elapsed,
		HitOverTime: liveHitOverTime(results),
	}
	if len(perWorker) > 0 {
		most, total := 0, 0
		for _, n := range perWorker {
			most, total = max(most, n), total+n
		}
		// max / mean of requests per worker, over the workers that served any.
		res.LoadImbalance = float64(most) / (float64(total) / float64(len(perWorker)))
	}
	return res, results, nil
}

// liveHitOverTime buckets the answered requests by when they were sent, as
// the in-process replay buckets arrivals (lab/replay simulation: span/60,
// at least a second); a live replay is often only seconds long, so here the
// bucket is span/30, at least a millisecond, to still draw a line.
func liveHitOverTime(results []liveRequest) []replay.HitPoint {
	var span time.Duration
	for _, r := range results {
		if r.err == nil {
			span = max(span, r.sentAt)
		}
	}
	bucket := max(time.Millisecond, span/30)
	n := int(span/bucket) + 1
	prompt, cached := make([]int, n), make([]int, n)
	for _, r := range results {
		if r.err != nil {
			continue
		}
		b := min(int(r.sentAt/bucket), n-1)
		prompt[b] += r.prompt
		cached[b] += r.cached
	}
	var pts []replay.HitPoint
	for b := range prompt {
		if prompt[b] > 0 {
			pts = append(pts, replay.HitPoint{At: bucket * time.Duration(b), HitRatio: float64(cached[b]) / float64(prompt[b])})
		}
	}
	return pts
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func pctl(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

var chosenRe = regexp.MustCompile(`chosen=(\S+)`)

// sendCompletion streams one token-id completion through the gateway.
func sendCompletion(ctx context.Context, c *http.Client, base, model string, tokens []uint32, maxTokens int) liveRequest {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": tokens, "max_tokens": maxTokens, "stream": true,
		"stream_options": map[string]bool{"include_usage": true}})
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return liveRequest{err: err}
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-kvgate-debug", "1")
	t := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return liveRequest{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return liveRequest{err: fmt.Errorf("status %d: %s", resp.StatusCode, b)}
	}
	var r liveRequest
	if m := chosenRe.FindStringSubmatch(resp.Header.Get("x-kvgate-debug")); m != nil {
		r.chosen = m[1]
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data: ")) || bytes.Equal(line, []byte("data: [DONE]")) {
			continue
		}
		var chunk struct {
			Choices []json.RawMessage `json:"choices"`
			Usage   *struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if json.Unmarshal(line[len("data: "):], &chunk) != nil {
			continue
		}
		if len(chunk.Choices) > 0 {
			now := time.Since(t)
			if r.outputs == 0 {
				r.ttft = now
			}
			r.outputs++
			r.lastChunk = now
		}
		if chunk.Usage != nil {
			r.prompt = chunk.Usage.PromptTokens
			if chunk.Usage.PromptTokensDetails != nil {
				r.cached = chunk.Usage.PromptTokensDetails.CachedTokens
			}
		}
	}
	r.e2e = time.Since(t)
	if err := sc.Err(); err != nil {
		return liveRequest{err: err}
	}
	if r.prompt == 0 {
		return liveRequest{err: errors.New("stream ended without a usage chunk")}
	}
	return r
}
