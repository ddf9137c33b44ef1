package preprocess

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Engine-side rendering (models[].preprocess.mode: engine): the request
// is rendered and tokenized by one of the model's own vLLM engines over
// POST /tokenize, which runs the same chat template code and tokenizer as
// the engine's chat and completions routes
// (vllm/entrypoints/serve/tokenize/serving.py, protocol.py at
// 343bacafc7bf4f973a105e8e7d99fa7de61f7e18): its token ids are exactly
// the ones the engine will cache, for any model, template or media part.
//
// Newer vLLM also serves /v1/chat/completions/render,
// /v1/completions/render and /v1/responses/render, which take the whole
// request and answer a GenerateRequest with its token ids
// (vllm/entrypoints/serve/render/api_router.py at
// 6a0722633ade01aa4f758f173fb8ac937673e565). kvgate uses /tokenize: every
// vLLM release with a chat-aware tokenizer route serves it, and its
// answer is three fields. SGLang's /tokenize takes a prompt only, no
// messages (python/sglang/srt/entrypoints/openai/serving_tokenize.py at
// 0351c1fafe4c53c91c331dea205af48b018af559): it cannot render a chat, so
// engine mode asks vLLM engines only (EngineSource lists them).
//
// A decision must not wait on a sick engine: each call is bounded by
// extproc.preprocess.engine.timeout and the request's preprocess
// deadline, the calls in flight by engine.max_concurrent (past it the
// request does not queue), and a repeated request is answered from a small
// cache. Whatever goes wrong, the request is routed on load alone, as a
// request kvgate cannot tokenize is, with the reason counted.

// EngineSource lists the HTTP endpoints (host:port) of the engines that
// may render a base model's requests now: the extproc's healthy,
// non-draining vLLM workers of that model.
type EngineSource func(model string) []string

type enginesKey struct{}

// WithEngines attaches the engines that render requests of models in
// engine mode to a request's context; the router does it per request
// from its current worker set.
func WithEngines(ctx context.Context, src EngineSource) context.Context {
	return context.WithValue(ctx, enginesKey{}, src)
}

func enginesFrom(ctx context.Context) EngineSource {
	src, _ := ctx.Value(enginesKey{}).(EngineSource)
	return src
}

// Why an engine render fell back to routing on load alone (the reason
// label of kvgate_extproc_engine_render_fallbacks_total; the request is
// also counted in kvgate_extproc_untokenized_requests_total as
// "engine_" + reason).
const (
	// EngineTimeout: no answer within the call's timeout or the request's
	// preprocess deadline.
	EngineTimeout = "timeout"
	// EngineUnavailable: no healthy vLLM engine of the model, a refused
	// or broken connection, or a 5xx.
	EngineUnavailable = "unavailable"
	// EngineOverloaded: engine.max_concurrent calls already in flight, or
	// the engine answered 429.
	EngineOverloaded = "overloaded"
	// EngineBadResponse: an answer not in TokenizeResponse's shape (count
	// and tokens disagree, an id outside uint32, more ids than
	// max_prompt_tokens, a body past its bound).
	EngineBadResponse = "bad_response"
	// EngineRejected: the engine answered 4xx (the request is invalid for
	// it, or longer than its max_model_len): the engine will answer the
	// request itself with its own error.
	EngineRejected = "rejected"
	// EngineUnsupported: the request holds an input /tokenize does not
	// take (RAG documents; Responses tools, which vLLM hands the template
	// in the Responses API's own shape).
	EngineUnsupported = "unsupported"
)

// EngineReasons lists the fallback reasons, in a fixed order.
var EngineReasons = [...]string{EngineTimeout, EngineUnavailable, EngineOverloaded, EngineBadResponse, EngineRejected, EngineUnsupported}

// EngineRenderStats are the engine renderer's counters since start.
type EngineRenderStats struct {
	Calls     uint64 // /tokenize calls made
	CacheHits uint64 // requests answered from the render cache
	// Fallbacks counts requests routed on load alone, by EngineReasons'
	// index.
	Fallbacks    [len(EngineReasons)]uint64
	CacheEntries int
	CacheTokens  int
}

// engineRenderer makes the /tokenize calls. Safe for concurrent use.
type engineRenderer struct {
	client    *http.Client
	timeout   time.Duration
	slots     chan struct{} // one per call in flight
	cache     *renderCache
	next      atomic.Uint64 // round robin over the engines listed
	maxTokens int
	maxBody   int64

	calls, hits atomic.Uint64
	fallbacks   [len(EngineReasons)]atomic.Uint64
}

func newEngineRenderer(cfg EngineConfig, maxTokens int) *engineRenderer {
	timeout := cfg.Timeout.D()
	if timeout <= 0 {
		timeout = DefaultEngineTimeout
	}
	conc := cfg.MaxConcurrent
	if conc <= 0 {
		conc = DefaultEngineMaxConcurrent
	}
	entries := cfg.CacheEntries
	if entries <= 0 {
		entries = DefaultEngineCacheEntries
	}
	return &engineRenderer{
		client: &http.Client{
			Transport: &http.Transport{
				// The engines are the fleet's own: no proxy from the
				// environment, no compression to undo.
				Proxy:               nil,
				DialContext:         (&net.Dialer{Timeout: timeout}).DialContext,
				MaxIdleConnsPerHost: conc,
				IdleConnTimeout:     90 * time.Second,
				DisableCompression:  true,
			},
			// An engine's answer is its own; a redirect elsewhere is not
			// followed.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		timeout:   timeout,
		slots:     make(chan struct{}, conc),
		cache:     newRenderCache(entries, cacheMaxTokens),
		maxTokens: maxTokens,
		// The longest valid answer: maxTokens ids of at most 10 digits and
		// a comma, twice over for token_strs, plus the other fields.
		maxBody: int64(maxTokens)*24 + 64<<10,
	}
}

func (e *engineRenderer) stats() EngineRenderStats {
	s := EngineRenderStats{Calls: e.calls.Load(), CacheHits: e.hits.Load()}
	for i := range e.fallbacks {
		s.Fallbacks[i] = e.fallbacks[i].Load()
	}
	s.CacheEntries, s.CacheTokens = e.cache.size()
	return s
}

func (e *engineRenderer) fellBack(reason string) {
	for i, r := range EngineReasons {
		if r == reason {
			e.fallbacks[i].Add(1)
		}
	}
}

// tokenizeResponse is vLLM's TokenizeResponse (count, max_model_len,
// tokens, token_strs); kvgate reads count and tokens.
type tokenizeResponse struct {
	Count  *int     `json:"count"`
	Tokens []uint32 `json:"tokens"`
}

// render asks one of model's engines to tokenize body (a /tokenize body
// of tokenize_body.go) and appends the ids to dst. reason is "" on
// success, else the fallback reason (counted here). err is set only when
// the caller cancelled ctx: nobody is left to answer.
func (e *engineRenderer) render(ctx context.Context, engines EngineSource, model string, body []byte, dst []uint32) ([]uint32, string, error) {
	key := sha256.Sum256(body)
	if out, ok := e.cache.get(key, dst); ok {
		e.hits.Add(1)
		return out, "", nil
	}
	var endpoints []string
	if engines != nil {
		endpoints = engines(model)
	}
	if len(endpoints) == 0 {
		e.fellBack(EngineUnavailable)
		return dst, EngineUnavailable, nil
	}
	select {
	case e.slots <- struct{}{}:
		defer func() { <-e.slots }()
	default:
		// Saturated: waiting for a slot would add the slowest call's
		// latency to this decision.
		e.fellBack(EngineOverloaded)
		return dst, EngineOverloaded, nil
	}
	endpoint := endpoints[(e.next.Add(1)-1)%uint64(len(endpoints))]
	out, reason, err := e.call(ctx, endpoint, body, dst)
	if err != nil {
		return dst, "", err
	}
	if reason != "" {
		e.fellBack(reason)
		return dst, reason, nil
	}
	e.cache.put(key, out)
	return out, "", nil
}

// call makes one POST /tokenize to endpoint.
func (e *engineRenderer) call(ctx context.Context, endpoint string, body []byte, dst []uint32) ([]uint32, string, error) {
	cctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, "http://"+endpoint+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return dst, EngineUnavailable, nil
	}
	// A fresh request: none of the client's headers (its credentials
	// above all) reach the engine on this path.
	req.Header.Set("Content-Type", "application/json")
	e.calls.Add(1)
	resp, err := e.client.Do(req)
	if err != nil {
		return dst, e.failed(ctx, cctx), e.cancelled(ctx)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return dst, EngineOverloaded, nil
	case resp.StatusCode >= 500:
		return dst, EngineUnavailable, nil
	case resp.StatusCode != http.StatusOK:
		return dst, EngineRejected, nil
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, e.maxBody+1))
	if err != nil {
		return dst, e.failed(ctx, cctx), e.cancelled(ctx)
	}
	if int64(len(raw)) > e.maxBody {
		return dst, EngineBadResponse, nil
	}
	out, err := e.parse(raw, dst)
	if err != nil {
		return dst, EngineBadResponse, nil
	}
	return out, "", nil
}

// parse reads a TokenizeResponse into dst's buffer.
func (e *engineRenderer) parse(raw []byte, dst []uint32) ([]uint32, error) {
	r := tokenizeResponse{Tokens: dst[:0]}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("tokenize response: %w", err)
	}
	switch {
	case r.Count == nil || r.Tokens == nil:
		return nil, errors.New("tokenize response: count or tokens missing")
	case *r.Count != len(r.Tokens):
		return nil, fmt.Errorf("tokenize response: count %d but %d tokens", *r.Count, len(r.Tokens))
	case len(r.Tokens) > e.maxTokens:
		return nil, fmt.Errorf("tokenize response: %d tokens, over max_prompt_tokens %d", len(r.Tokens), e.maxTokens)
	}
	return r.Tokens, nil
}

// failed classes a call that got no answer: past a deadline (the call's
// or the request's) is a timeout, anything else the engine being
// unreachable.
func (e *engineRenderer) failed(ctx, cctx context.Context) string {
	if errors.Is(cctx.Err(), context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return EngineTimeout
	}
	return EngineUnavailable
}

// cancelled is the caller's cancellation (the client went away), not a
// deadline.
func (e *engineRenderer) cancelled(ctx context.Context) error {
	if err := ctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrCancelled, err)
	}
	return nil
}
