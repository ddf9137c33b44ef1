package preprocess

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
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

// Engines is what engine mode needs of the fleet, per request: which
// engines may render a base model's requests now, and the call to one of
// them. The call is the network boundary, so it is the router's
// (extproc/enginetokenize over HTTP; a fake in tests): this package stays
// a pure core that links no networking (internal/importrules).
type Engines interface {
	// RenderEngines lists the HTTP endpoints (host:port) of the engines
	// that may render model's requests now: the extproc's healthy,
	// non-draining vLLM workers of that model.
	RenderEngines(model string) []string
	// PostTokenize sends body to endpoint's POST /tokenize and returns the
	// HTTP status and the answer's body, read up to limit+1 bytes; err is
	// set when no answer came (unreachable, ctx done, a broken read).
	PostTokenize(ctx context.Context, endpoint string, body []byte, limit int64) (status int, answer []byte, err error)
}

type enginesKey struct{}

// WithEngines attaches the engines that render requests of models in
// engine mode to a request's context; the router does it per request
// from its current worker set.
func WithEngines(ctx context.Context, src Engines) context.Context {
	return context.WithValue(ctx, enginesKey{}, src)
}

func enginesFrom(ctx context.Context) Engines {
	src, _ := ctx.Value(enginesKey{}).(Engines)
	return src
}

// The HTTP statuses engine_render reads (RFC 9110); named here so that the
// pure core need not link net/http for three numbers.
const (
	statusOK              = 200
	statusTooManyRequests = 429
	statusServerError     = 500
)

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
	cfg = cfg.Resolved()
	return &engineRenderer{
		timeout:   cfg.Timeout.D(),
		slots:     make(chan struct{}, cfg.MaxConcurrent),
		cache:     newRenderCache(cfg.CacheEntries, cacheMaxTokens),
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
func (e *engineRenderer) render(ctx context.Context, engines Engines, model string, body []byte, dst []uint32) ([]uint32, string, error) {
	key := sha256.Sum256(body)
	if out, ok := e.cache.get(key, dst); ok {
		e.hits.Add(1)
		return out, "", nil
	}
	var endpoints []string
	if engines != nil {
		endpoints = engines.RenderEngines(model)
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
	out, reason, err := e.call(ctx, engines, endpoint, body, dst)
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

// call makes one POST /tokenize to endpoint, within the call's timeout.
func (e *engineRenderer) call(ctx context.Context, engines Engines, endpoint string, body []byte, dst []uint32) ([]uint32, string, error) {
	cctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	e.calls.Add(1)
	status, raw, err := engines.PostTokenize(cctx, endpoint, body, e.maxBody)
	switch {
	case err != nil:
		return dst, e.failed(ctx, cctx), e.cancelled(ctx)
	case status == statusTooManyRequests:
		return dst, EngineOverloaded, nil
	case status >= statusServerError:
		return dst, EngineUnavailable, nil
	case status != statusOK:
		return dst, EngineRejected, nil
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
