// Package preprocess turns an OpenAI request body into what the router
// needs, in one pass and exactly as the engine will see it: parse → chat
// template → token ids → Dynamo block hashes. It also holds the model
// registry: served model names (LoRA adapters included) → tokenizer, chat
// template, KV block size and hash salts.
package preprocess

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/kvgate/kvgate/extproc/chattemplate"
	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/extproc/tokenizer"
	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// Model is one base model's preprocessing state, loaded once.
type Model struct {
	Name      string
	BlockSize int
	Namespace string
	// Tokenizer and Chat are nil for a model whose Mode is ModeEngine.
	Tokenizer *tokenizer.Tokenizer
	Chat      *chattemplate.Renderer
	// Mode is ModeLocal or ModeEngine: models[].preprocess.mode with auto
	// resolved at load.
	Mode string
}

// served is one name a request may use: a base model or a LoRA adapter of it.
type served struct {
	model *Model
	lora  string
}

// Registry maps served model names to their models. Immutable after New;
// safe for concurrent use.
type Registry struct {
	names  map[string]served
	limits openai.Limits
	cache  *tokenizer.SegmentCache
	// bounds of one request's preprocessing (Options)
	maxWordBytes  int
	timeout       time.Duration
	trustTemplate bool
	// engine renders the requests of models in engine mode; nil when no
	// model is.
	engine *engineRenderer
}

// Options tunes a Registry.
type Options struct {
	Limits openai.Limits
	// SegmentCacheBytes bounds the incremental-tokenization cache shared by
	// all models (0 = 64 MiB; negative disables it).
	SegmentCacheBytes int64
	// BaseDir resolves relative tokenizer directories (the config file's folder).
	BaseDir string
	// Now is the clock behind templates' strftime_now (nil = time.Now).
	Now func() time.Time
	// MaxWordBytes refuses (413) a prompt holding a longer pre-token,
	// before BPE runs on it (0 = no bound).
	MaxWordBytes int
	// Timeout bounds one request's template render and tokenization
	// (0 = only the caller's context).
	Timeout time.Duration
	// TrustRequestChatTemplate routes a request that brings its own
	// chat_template on load alone instead of refusing it (400), for engines
	// started with --trust-request-chat-template.
	TrustRequestChatTemplate bool
	// Engine bounds the /tokenize calls of models in engine mode (zero
	// values take the defaults).
	Engine EngineConfig
}

// OptionsFor is the configured preprocessing (extproc.preprocess) with the
// extproc's body bound (extproc.max_body_bytes), relative tokenizer
// directories resolved against baseDir.
func OptionsFor(p Config, maxBodyBytes int, baseDir string) Options {
	return Options{
		Limits:                   openai.Limits{MaxBodyBytes: maxBodyBytes, MaxPromptTokens: p.MaxPromptTokens, MaxOutputTokens: p.MaxOutputTokens},
		BaseDir:                  baseDir,
		MaxWordBytes:             p.MaxWordBytes,
		Timeout:                  p.Timeout.D(),
		TrustRequestChatTemplate: p.TrustRequestChatTemplate,
		Engine:                   p.Engine,
	}
}

// New loads every configured model's tokenizer and chat template. A model
// in local mode (the default) without a tokenizer directory is refused:
// routing it would need token ids kvgate cannot produce exactly. A model
// in engine mode loads nothing; one in auto mode loads its directory when
// it is there and loads, and is in engine mode otherwise (mode.go).
func New(models []kvfleet.Model, opts Options) (*Registry, error) {
	r := &Registry{names: map[string]served{}, limits: opts.Limits, maxWordBytes: opts.MaxWordBytes, timeout: opts.Timeout, trustTemplate: opts.TrustRequestChatTemplate}
	body := opts.Limits.MaxBodyBytes
	if body <= 0 {
		body = openai.DefaultLimits.MaxBodyBytes
	}
	// A template writes the messages once plus its own framing; four times
	// the body bounds any real one while keeping a render's memory bounded.
	maxPrompt := 4*body + 1<<20
	switch {
	case opts.SegmentCacheBytes == 0:
		r.cache = tokenizer.NewSegmentCache(64 << 20)
	case opts.SegmentCacheBytes > 0:
		r.cache = tokenizer.NewSegmentCache(opts.SegmentCacheBytes)
	}
	for i, mc := range models {
		mode := mc.Preprocess.Mode
		if err := ValidateMode(fmt.Sprintf("models[%d] (%s).preprocess.mode", i, mc.Name), mode); err != nil {
			return nil, err
		}
		dir := mc.Tokenizer
		if dir != "" && !filepath.IsAbs(dir) && opts.BaseDir != "" {
			dir = filepath.Join(opts.BaseDir, dir)
		}
		m := &Model{Name: mc.Name, BlockSize: mc.BlockSize, Namespace: mc.Namespace, Mode: ModeEngine}
		switch {
		case mode == ModeEngine:
		case mode == ModeAuto && !tokenizerDirPresent(dir):
		default:
			if dir == "" {
				return nil, fmt.Errorf("models[%d] (%s): tokenizer: a Hugging Face model directory is required (or preprocess.mode: engine)", i, mc.Name)
			}
			tok, chat, err := loadLocal(dir, chattemplate.Options{Now: opts.Now, MaxPromptBytes: maxPrompt})
			switch {
			case err != nil && mode == ModeAuto:
				// auto: files kvgate cannot load are the engine's to use.
			case err != nil:
				return nil, fmt.Errorf("models[%d] (%s): %w", i, mc.Name, err)
			default:
				m.Tokenizer, m.Chat, m.Mode = tok, chat, ModeLocal
			}
		}
		if m.Mode == ModeEngine && r.engine == nil {
			r.engine = newEngineRenderer(opts.Engine, r.maxPromptTokens())
		}
		r.names[mc.Name] = served{model: m}
		for _, l := range mc.LoRAs {
			r.names[l] = served{model: m, lora: l}
		}
	}
	return r, nil
}

// loadLocal loads a model directory's tokenizer and chat template.
func loadLocal(dir string, co chattemplate.Options) (*tokenizer.Tokenizer, *chattemplate.Renderer, error) {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	tc, err := chattemplate.LoadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	chat, err := chattemplate.New(tc, co)
	if err != nil {
		return nil, nil, fmt.Errorf("chat template: %w", err)
	}
	return tok, chat, nil
}

// UsesEngines reports whether some model is in engine mode: only then
// does a request's context need its engines (WithEngines).
func (r *Registry) UsesEngines() bool { return r.engine != nil }

// EngineRenderStats reports the engine renderer's counters (zero when no
// model is in engine mode).
func (r *Registry) EngineRenderStats() EngineRenderStats {
	if r.engine == nil {
		return EngineRenderStats{}
	}
	return r.engine.stats()
}

// Lookup resolves a served model name.
func (r *Registry) Lookup(name string) (m *Model, lora string, ok bool) {
	s, ok := r.names[name]
	return s.model, s.lora, ok
}

// Limits are the parser bounds requests are read under.
func (r *Registry) Limits() openai.Limits { return r.limits }

// Names lists the served model names.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.names))
	for n := range r.names {
		out = append(out, n)
	}
	return out
}

// SegmentCacheStats reports the incremental-tokenization cache (zero when disabled).
func (r *Registry) SegmentCacheStats() tokenizer.SegmentCacheStats {
	if r.cache == nil {
		return tokenizer.SegmentCacheStats{}
	}
	return r.cache.Stats()
}

// Result is a preprocessed request.
type Result struct {
	Model *Model
	// Served is the model name the request used; LoRA is set when it names an adapter.
	Served, LoRA string
	Stream       bool
	MaxTokens    int64 // 0 when the request gave none
	Prompt       string
	Tokens       []uint32
	// CacheSalt is the request's cache_salt ("" when absent); it replaces
	// the model's namespace in the hash seed (blockhash.RequestNamespace).
	CacheSalt string
	// Local and Sequence are the Dynamo block hashes of Tokens' full blocks,
	// salted with the LoRA name and the namespace.
	Local, Sequence []uint64
	// Approximate, when set, says why the request could not be tokenized
	// exactly; Tokens and the hashes are then empty and the router routes
	// on load alone.
	Approximate string
	// ApproximateReason is Approximate's class, one of the Reason*
	// constants, for metrics.
	ApproximateReason string

	tokenBuf *[]uint32 // Tokens' buffer came from tokenBuffers (Release returns it)
}

// The classes of approximate routing (Result.ApproximateReason).
const (
	// ReasonChatTemplate: the model's template could not be rendered as
	// the engine renders it (media parts, a construct kvgate lacks).
	ReasonChatTemplate = "chat_template"
	// ReasonRequestTemplate: the request brings its own chat template.
	ReasonRequestTemplate = "request_template"
	// ReasonUnseenInput and ReasonUnmodelledInput: a request converted
	// from another API (openai.ParseResponses, ParseMessages) holds input
	// only the engine sees, or input whose rendering kvgate does not model.
	ReasonUnseenInput     = openai.ReasonUnseenInput
	ReasonUnmodelledInput = openai.ReasonUnmodelledInput
)

// Chat preprocesses a /v1/chat/completions body.
func (r *Registry) Chat(body []byte) (*Result, error) {
	return r.ChatContext(context.Background(), body)
}

// ChatContext is Chat bounded by ctx and the registry's Timeout: the
// template render and the tokenizer stop when either ends.
func (r *Registry) ChatContext(ctx context.Context, body []byte) (*Result, error) {
	req, err := openai.ParseChat(body, r.limits)
	if err != nil {
		return nil, err
	}
	return r.chat(ctx, req)
}

// MessagesContext preprocesses an Anthropic Messages (/v1/messages) body:
// converted to the chat request vLLM converts it to
// (openai.ParseMessages), then rendered, tokenized and hashed as a chat.
func (r *Registry) MessagesContext(ctx context.Context, body []byte) (*Result, error) {
	req, err := openai.ParseMessages(body, r.limits)
	if err != nil {
		return nil, err
	}
	return r.chat(ctx, req)
}

// ResponsesContext preprocesses an OpenAI Responses (/v1/responses) body
// the same way (openai.ParseResponses).
func (r *Registry) ResponsesContext(ctx context.Context, body []byte) (*Result, error) {
	req, err := openai.ParseResponses(body, r.limits)
	if err != nil {
		return nil, err
	}
	return r.chat(ctx, req)
}

// chat renders, tokenizes and hashes a chat request, whichever API it came
// in through.
func (r *Registry) chat(ctx context.Context, req *openai.ChatRequest) (*Result, error) {
	res, err := r.resolve(req.Model)
	if err != nil {
		return nil, err
	}
	res.Stream, res.MaxTokens, res.CacheSalt = req.Stream, req.MaxTokens, req.CacheSalt
	if field := req.RequestTemplate(); field != "" {
		if !r.trustTemplate {
			// vLLM refuses it with 400 unless started with
			// --trust-request-chat-template (openai.ChatRequest.RequestTemplate).
			return nil, &openai.Error{Status: openai.StatusBadRequest, Type: "invalid_request_error", Param: field,
				Message: field + ": a request's own chat template is refused, as the engines refuse it without --trust-request-chat-template " +
					"(if yours run with it, set extproc.preprocess.trust_request_chat_template)"}
		}
		// The engine renders it; kvgate does not run a client's template.
		res.Approximate, res.ApproximateReason = "the request brings its own chat template", ReasonRequestTemplate
		return res, nil
	}
	if req.Approximate != "" {
		// Converted from another API with a part kvgate cannot see or
		// reproduce (openai.ParseResponses, ParseMessages).
		res.Approximate, res.ApproximateReason = req.Approximate, req.ApproximateReason
		return res, nil
	}
	ctx, cancel := r.bound(ctx)
	defer cancel()
	if res.Model.Mode == ModeEngine {
		if (req.ToolsDumped && len(req.Tools) > 0) || req.Documents != nil {
			return r.engineFallback(res, EngineUnsupported), nil
		}
		return r.fromEngine(ctx, res, tokenizeChatBody(res.Served, req), len(req.Body)/3+8)
	}
	prompt, err := res.Model.Chat.RenderContext(ctx, req)
	if err != nil {
		var te *chattemplate.TemplateError
		var ol *chattemplate.OutputLimitError
		switch {
		case errors.As(err, &te):
			// raise_exception in the template: the request is invalid for
			// this model (vLLM answers 400 too).
			return nil, &openai.Error{Status: openai.StatusBadRequest, Message: te.Message, Type: "invalid_request_error"}
		case errors.As(err, &ol):
			return nil, &openai.Error{Status: openai.StatusRequestEntityTooLarge, Type: "invalid_request_error", Param: "messages", Code: "prompt_too_long",
				Message: fmt.Sprintf("the chat template's rendering of the messages is larger than %d bytes", ol.Limit)}
		case ctx.Err() != nil:
			return nil, r.stopped(ctx)
		}
		// Anything else (media parts whose placeholders are model-specific,
		// a construct the engine renders differently) is not the client's
		// fault: vLLM may well serve it. Route it without a prefix key
		// rather than refuse it.
		res.Approximate, res.ApproximateReason = "chat template: "+err.Error(), ReasonChatTemplate
		return res, nil
	}
	res.Prompt = prompt
	// vLLM tokenizes rendered chat prompts without adding special tokens:
	// the template already wrote them.
	res.Tokens, err = res.Model.Tokenizer.EncodeBounded(ctx, res.tokenBuffer(len(prompt)/3+8), prompt,
		tokenizer.EncodeOptions{Cache: r.cache, Limits: r.tokenLimits()})
	if err != nil {
		return nil, r.tokenizeError(ctx, err, "messages")
	}
	res.hash()
	return res, nil
}

// Completion preprocesses a /v1/completions body. A batch of prompts is
// routed by its first prompt: the engine serves them together.
func (r *Registry) Completion(body []byte) (*Result, error) {
	return r.CompletionContext(context.Background(), body)
}

// CompletionContext is Completion bounded by ctx and the registry's
// Timeout.
func (r *Registry) CompletionContext(ctx context.Context, body []byte) (*Result, error) {
	req, err := openai.ParseCompletion(body, r.limits)
	if err != nil {
		return nil, err
	}
	res, err := r.resolve(req.Model)
	if err != nil {
		return nil, err
	}
	res.Stream, res.MaxTokens, res.CacheSalt = req.Stream, req.MaxTokens, req.CacheSalt
	if len(req.Prompts) > 0 {
		p := req.Prompts[0]
		if p.IsTokens {
			// Counted against MaxPromptTokens by the parser.
			res.Tokens = p.TokenIDs
		} else {
			res.Prompt = p.Text
			ctx, cancel := r.bound(ctx)
			defer cancel()
			if res.Model.Mode == ModeEngine {
				return r.fromEngine(ctx, res, tokenizeCompletionBody(res.Served, p.Text), len(p.Text)/3+8)
			}
			// vLLM's completions endpoint adds the tokenizer's special
			// tokens (Llama-3: <|begin_of_text|>).
			res.Tokens, err = res.Model.Tokenizer.EncodeBounded(ctx, res.tokenBuffer(len(p.Text)/3+8), p.Text,
				tokenizer.EncodeOptions{SpecialTokens: true, Limits: r.tokenLimits()})
			if err != nil {
				return nil, r.tokenizeError(ctx, err, "prompt")
			}
		}
	}
	res.hash()
	return res, nil
}

// fromEngine has one of the model's engines render and tokenize body
// (engine_render.go) and hashes the ids; an engine that cannot leaves the
// request routed on load alone. sizeHint sizes the token buffer.
func (r *Registry) fromEngine(ctx context.Context, res *Result, body []byte, sizeHint int) (*Result, error) {
	toks, reason, err := r.engine.render(ctx, enginesFrom(ctx), res.Model.Name, body, res.tokenBuffer(sizeHint))
	if err != nil {
		return nil, err
	}
	if reason != "" {
		res.Tokens = toks[:0]
		return r.engineFallback(res, reason), nil
	}
	res.Tokens = toks
	res.hash()
	return res, nil
}

// engineFallback marks res as routed on load alone because its engine
// render could not be had.
func (r *Registry) engineFallback(res *Result, reason string) *Result {
	if reason == EngineUnsupported {
		r.engine.fellBack(reason)
	}
	res.Approximate = "engine render: " + reason
	res.ApproximateReason = "engine_" + reason
	return res
}

func (r *Registry) resolve(model string) (*Result, error) {
	if model == "" {
		// kvgate fronts several pools and picks one by model, so the
		// request must name it (OpenAI requires the field too; a lone vLLM
		// would fall back to its only model).
		return nil, &openai.Error{Status: openai.StatusBadRequest, Message: "model: required: name one of the served models",
			Type: "invalid_request_error", Param: "model"}
	}
	s, ok := r.names[model]
	if !ok {
		return nil, openai.ModelNotFound(model)
	}
	return &Result{Model: s.model, Served: model, LoRA: s.lora}, nil
}

func (r *Registry) maxPromptTokens() int {
	if r.limits.MaxPromptTokens > 0 {
		return r.limits.MaxPromptTokens
	}
	return openai.DefaultLimits.MaxPromptTokens
}

func (r *Registry) tokenLimits() tokenizer.Limits {
	return tokenizer.Limits{MaxTokens: r.maxPromptTokens(), MaxWordBytes: r.maxWordBytes}
}

// bound adds the registry's timeout to ctx.
func (r *Registry) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, r.timeout)
}

// tokenizeError turns a stopped encode into the client's answer; param
// names the request field the prompt came from.
func (r *Registry) tokenizeError(ctx context.Context, err error, param string) error {
	var tm *tokenizer.TooManyTokensError
	var wl *tokenizer.WordTooLongError
	switch {
	case errors.As(err, &tm):
		return &openai.Error{Status: openai.StatusRequestEntityTooLarge, Type: "invalid_request_error", Param: param, Code: "prompt_too_long",
			Message: fmt.Sprintf("prompt is more than %d tokens", tm.Limit)}
	case errors.As(err, &wl):
		return &openai.Error{Status: openai.StatusRequestEntityTooLarge, Type: "invalid_request_error", Param: param, Code: "prompt_too_long",
			Message: fmt.Sprintf("prompt holds a run of %d bytes with no word break, over the %d-byte limit (extproc.preprocess.max_word_bytes): "+
				"tokenizing such a run costs seconds of CPU", wl.Bytes, wl.Limit)}
	case ctx.Err() != nil:
		return r.stopped(ctx)
	}
	return fmt.Errorf("tokenize: %w", err)
}

// ErrCancelled is returned when the caller's context ended (the client went
// away): nobody is left to answer.
var ErrCancelled = errors.New("preprocessing abandoned: the request was cancelled")

// stopped is the error for a render or encode that ctx ended: the
// registry's own deadline (503: kvgate could not afford the prompt in
// time, whether it is pathological or kvgate is overloaded) or the
// caller's cancellation.
func (r *Registry) stopped(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) && r.timeout > 0 {
		return &openai.Error{Status: openai.StatusServiceUnavailable, Type: "service_unavailable", Code: "preprocess_timeout",
			Message: fmt.Sprintf("rendering and tokenizing the prompt took longer than %s (extproc.preprocess.timeout)", r.timeout)}
	}
	return fmt.Errorf("%w: %w", ErrCancelled, ctx.Err())
}

func (res *Result) hash() {
	seed := blockhash.Seed(res.LoRA, blockhash.RequestNamespace(res.CacheSalt, res.Model.Namespace))
	res.Local = blockhash.LocalHashes(res.Tokens, res.Model.BlockSize, seed)
	res.Sequence = blockhash.SequenceHashes(res.Local)
}
