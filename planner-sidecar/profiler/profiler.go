// Package profiler measures an engine (vLLM, SGLang, or kvgate's engine
// simulator — anything speaking the OpenAI completions API with streaming)
// for the planner's performance model: TTFT and prefill throughput over a
// grid of input lengths and concurrencies, ITL and decode throughput over
// a grid of context lengths and batch sizes. It is what
// `kvgate planner profile` runs.
package profiler

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/perfmodel"
)

// OptionsError is an error about the options themselves (bad usage), as
// opposed to the engine failing.
type OptionsError struct{ Err error }

func (e *OptionsError) Error() string { return e.Err.Error() }
func (e *OptionsError) Unwrap() error { return e.Err }

// Options says what to measure.
type Options struct {
	// Engine is the engine's base URL (http://host:port).
	Engine string
	// Model is the served model name ("" = the first of /v1/models).
	Model string
	// InputLengths × Concurrency is the prefill grid.
	InputLengths []int
	Concurrency  []int
	// ContextLengths × Batches is the decode grid.
	ContextLengths []int
	Batches        []int
	// Requests is the prefill requests per point (at least 2 × concurrency).
	Requests int
	// OutputTokens is what each decode request generates.
	OutputTokens int
	// Timeout bounds one request.
	Timeout time.Duration
	// Seed makes the random prompts reproducible.
	Seed uint64
	// Progress, when set, is told about each point as it is measured.
	Progress io.Writer
}

// Defaults fills zero fields.
func (o *Options) Defaults() {
	if len(o.InputLengths) == 0 {
		o.InputLengths = []int{256, 1024, 4096}
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1, 2, 4, 8}
	}
	if len(o.ContextLengths) == 0 {
		o.ContextLengths = []int{512, 2048}
	}
	if len(o.Batches) == 0 {
		o.Batches = []int{1, 8, 32}
	}
	if o.Requests == 0 {
		o.Requests = 16
	}
	if o.OutputTokens == 0 {
		o.OutputTokens = 64
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
}

// validate bounds the grid so a typo cannot run for days.
func (o *Options) validate() error {
	check := func(name string, vs []int, hi int) error {
		if len(vs) > 32 {
			return fmt.Errorf("profile: --%s: at most 32 values", name)
		}
		for _, v := range vs {
			if v < 1 || v > hi {
				return fmt.Errorf("profile: --%s: %d outside 1..%d", name, v, hi)
			}
		}
		return nil
	}
	for _, c := range []struct {
		name string
		vs   []int
		hi   int
	}{{"inputs", o.InputLengths, 1 << 20}, {"concurrency", o.Concurrency, 4096}, {"contexts", o.ContextLengths, 1 << 20}, {"batches", o.Batches, 4096}} {
		if err := check(c.name, c.vs, c.hi); err != nil {
			return err
		}
	}
	if o.Requests < 1 || o.Requests > 100000 || o.OutputTokens < 2 || o.OutputTokens > 1<<16 {
		return errors.New("profile: --requests must be in 1..100000 and --output-tokens in 2..65536")
	}
	if !strings.HasPrefix(o.Engine, "http://") && !strings.HasPrefix(o.Engine, "https://") {
		return fmt.Errorf("profile: --engine %q: want http://host:port", o.Engine)
	}
	return nil
}

// Run measures the grid and returns the profile.
func Run(ctx context.Context, o Options) (perfmodel.Profile, error) {
	o.Defaults()
	if err := o.validate(); err != nil {
		return perfmodel.Profile{}, &OptionsError{err}
	}
	o.Engine = strings.TrimRight(o.Engine, "/")
	c := &client{base: o.Engine, http: &http.Client{Timeout: o.Timeout}, rng: rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))}
	if o.Model == "" {
		m, err := c.firstModel(ctx)
		if err != nil {
			return perfmodel.Profile{}, err
		}
		o.Model = m
	}
	c.model = o.Model
	p := perfmodel.Profile{Engine: o.Engine, Model: o.Model}
	for _, l := range o.InputLengths {
		for _, conc := range o.Concurrency {
			pt, err := c.prefillPoint(ctx, l, conc, max(o.Requests, 2*conc))
			if err != nil {
				return p, fmt.Errorf("profile: prefill input %d concurrency %d: %w", l, conc, err)
			}
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "prefill input %6d concurrency %4d: TTFT p90 %8.1f ms, %9.0f tokens/s\n", l, conc, pt.TTFTSeconds*1e3, pt.TokensPerSecond)
			}
			p.Prefill = append(p.Prefill, pt)
		}
	}
	for _, ctxLen := range o.ContextLengths {
		for _, b := range o.Batches {
			pt, err := c.decodePoint(ctx, ctxLen, b, o.OutputTokens)
			if err != nil {
				return p, fmt.Errorf("profile: decode context %d batch %d: %w", ctxLen, b, err)
			}
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "decode  context %6d batch       %4d: ITL p90  %8.2f ms, %9.0f tokens/s\n", ctxLen, b, pt.ITLSeconds*1e3, pt.TokensPerSecond)
			}
			p.Decode = append(p.Decode, pt)
		}
	}
	return p, p.Validate()
}

type client struct {
	base, model string
	http        *http.Client
	mu          sync.Mutex
	rng         *rand.Rand
}

func (c *client) firstModel(ctx context.Context) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/models", nil)
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("profile: %w", err)
	}
	defer resp.Body.Close()
	var r struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&r); err != nil || len(r.Data) == 0 {
		return "", fmt.Errorf("profile: GET /v1/models: %s: no model listed (%v)", resp.Status, err)
	}
	return r.Data[0].ID, nil
}

// prompt is n random token ids: random so that no two prompts share a
// cached prefix and every prompt token is really prefilled. Ids stay in
// a range every current tokenizer's vocabulary covers.
func (c *client) prompt(n int) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 1000 + c.rng.IntN(29000)
	}
	return ids
}

// stream sends one streamed completion and returns the arrival time of
// each content chunk.
func (c *client) stream(ctx context.Context, prompt []int, maxTokens int) (start time.Time, chunks []time.Time, err error) {
	body, _ := json.Marshal(map[string]any{
		"model": c.model, "prompt": prompt, "max_tokens": maxTokens, "stream": true,
		// Generate exactly max_tokens: an early end-of-sequence would
		// shorten the decode measurement.
		"ignore_eos": true, "temperature": 0,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	start = time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return start, nil, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			break
		}
		var ev struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		// One chunk per token (vLLM streams each step's token as it comes);
		// the usage chunk has no choices.
		if json.Unmarshal([]byte(line), &ev) == nil && len(ev.Choices) > 0 {
			chunks = append(chunks, time.Now())
		}
	}
	if err = sc.Err(); err != nil {
		return
	}
	if len(chunks) == 0 {
		err = errors.New("stream ended without a token")
	}
	return
}

// prefillPoint keeps conc requests of l prompt tokens in flight (one
// output token each, so a request is its prefill) until total have run.
// TTFT is the p90 over requests; throughput is prompt tokens over the
// whole wall time.
func (c *client) prefillPoint(ctx context.Context, l, conc, total int) (perfmodel.PrefillPoint, error) {
	var mu sync.Mutex
	var ttfts []float64
	var firstErr error
	next := 0
	begin := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= total || firstErr != nil {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()
				start, chunks, err := c.stream(ctx, c.prompt(l), 1)
				mu.Lock()
				if err != nil {
					firstErr = cmpErr(firstErr, err)
				} else {
					ttfts = append(ttfts, chunks[0].Sub(start).Seconds())
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return perfmodel.PrefillPoint{}, firstErr
	}
	wall := time.Since(begin).Seconds()
	return perfmodel.PrefillPoint{
		InputTokens: l, Concurrency: conc,
		TTFTSeconds: p90(ttfts), TokensPerSecond: float64(total*l) / wall,
	}, nil
}

// decodePoint runs b requests of ctxLen prompt tokens together, each
// generating out tokens, and summarises them with decodeStats.
func (c *client) decodePoint(ctx context.Context, ctxLen, b, out int) (perfmodel.DecodePoint, error) {
	streams, err := c.decodeStreams(ctx, ctxLen, b, out)
	if err != nil {
		return perfmodel.DecodePoint{}, err
	}
	pt, err := decodeStats(streams)
	pt.ContextTokens, pt.Batch = ctxLen, b
	return pt, err
}

// decodeStreams returns each request's token arrival times.
func (c *client) decodeStreams(ctx context.Context, ctxLen, b, out int) ([][]time.Time, error) {
	var mu sync.Mutex
	var streams [][]time.Time
	var firstErr error
	var wg sync.WaitGroup
	for range b {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, chunks, err := c.stream(ctx, c.prompt(ctxLen), out)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmpErr(firstErr, err)
				return
			}
			streams = append(streams, chunks)
		}()
	}
	wg.Wait()
	return streams, firstErr
}

// decodeStats: ITL is the p90 over requests of each request's mean gap
// between tokens (vLLM's time per output token) — single gaps are not used
// because a server may flush several tokens in one write. Throughput is
// the tokens generated after each request's first, over the span from the
// first first token to the last last token: the batch's decode rate.
func decodeStats(streams [][]time.Time) (perfmodel.DecodePoint, error) {
	var itls []float64
	var from, to time.Time
	tokens := 0
	for _, s := range streams {
		n := len(s)
		if n < 2 {
			continue
		}
		itls = append(itls, s[n-1].Sub(s[0]).Seconds()/float64(n-1))
		tokens += n - 1
		if from.IsZero() || s[0].Before(from) {
			from = s[0]
		}
		if s[n-1].After(to) {
			to = s[n-1]
		}
	}
	if len(itls) == 0 {
		return perfmodel.DecodePoint{}, errors.New("no request generated two tokens")
	}
	span := to.Sub(from).Seconds()
	if span <= 0 {
		return perfmodel.DecodePoint{}, errors.New("all tokens arrived at once: no decode time to measure")
	}
	return perfmodel.DecodePoint{ITLSeconds: p90(itls), TokensPerSecond: float64(tokens) / span}, nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// p90 is the nearest-rank 90th percentile.
func p90(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	i := (len(s)*9+9)/10 - 1
	return s[max(0, min(i, len(s)-1))]
}
