// Package preprocess turns an OpenAI request body into what the router
// needs, in one pass and exactly as the engine will see it: parse → chat
// template → token ids → Dynamo block hashes. It also holds the model
// registry: served model names (LoRA adapters included) → tokenizer, chat
// template, KV block size and hash salts.
package preprocess

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/chattemplate"
	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/extproc/tokenizer"
	"github.com/kvgate/kvgate/indexer/blockhash"
)

// Model is one base model's preprocessing state, loaded once.
type Model struct {
	Name      string
	BlockSize int
	Namespace string
	Tokenizer *tokenizer.Tokenizer
	Chat      *chattemplate.Renderer
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
}

// New loads every configured model's tokenizer and chat template. A model
// without a tokenizer directory is refused: routing it would need token
// ids kvgate cannot produce exactly.
func New(models []config.Model, opts Options) (*Registry, error) {
	r := &Registry{names: map[string]served{}, limits: opts.Limits}
	switch {
	case opts.SegmentCacheBytes == 0:
		r.cache = tokenizer.NewSegmentCache(64 << 20)
	case opts.SegmentCacheBytes > 0:
		r.cache = tokenizer.NewSegmentCache(opts.SegmentCacheBytes)
	}
	for i, mc := range models {
		if mc.Tokenizer == "" {
			return nil, fmt.Errorf("models[%d] (%s): tokenizer: a Hugging Face model directory is required", i, mc.Name)
		}
		dir := mc.Tokenizer
		if !filepath.IsAbs(dir) && opts.BaseDir != "" {
			dir = filepath.Join(opts.BaseDir, dir)
		}
		tok, err := tokenizer.Load(dir)
		if err != nil {
			return nil, fmt.Errorf("models[%d] (%s): %w", i, mc.Name, err)
		}
		tc, err := chattemplate.LoadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("models[%d] (%s): %w", i, mc.Name, err)
		}
		chat, err := chattemplate.New(tc, chattemplate.Options{Now: opts.Now})
		if err != nil {
			return nil, fmt.Errorf("models[%d] (%s): chat template: %w", i, mc.Name, err)
		}
		m := &Model{Name: mc.Name, BlockSize: mc.BlockSize, Namespace: mc.Namespace, Tokenizer: tok, Chat: chat}
		r.names[mc.Name] = served{model: m}
		for _, l := range mc.LoRAs {
			r.names[l] = served{model: m, lora: l}
		}
	}
	return r, nil
}

// Lookup resolves a served model name.
func (r *Registry) Lookup(name string) (m *Model, lora string, ok bool) {
	s, ok := r.names[name]
	return s.model, s.lora, ok
}

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
}

// Chat preprocesses a /v1/chat/completions body.
func (r *Registry) Chat(body []byte) (*Result, error) {
	req, err := openai.ParseChat(body, r.limits)
	if err != nil {
		return nil, err
	}
	res, err := r.resolve(req.Model)
	if err != nil {
		return nil, err
	}
	res.Stream, res.MaxTokens, res.CacheSalt = req.Stream, req.MaxTokens, req.CacheSalt
	prompt, err := res.Model.Chat.Render(req)
	if err != nil {
		var te *chattemplate.TemplateError
		if errors.As(err, &te) {
			// raise_exception in the template: the request is invalid for
			// this model (vLLM answers 400 too).
			return nil, &openai.Error{Status: http.StatusBadRequest, Message: te.Message, Type: "invalid_request_error"}
		}
		// Anything else (media parts whose placeholders are model-specific,
		// a construct the engine renders differently) is not the client's
		// fault: vLLM may well serve it. Route it without a prefix key
		// rather than refuse it.
		res.Approximate = "chat template: " + err.Error()
		return res, nil
	}
	res.Prompt = prompt
	// vLLM tokenizes rendered chat prompts without adding special tokens:
	// the template already wrote them.
	res.Tokens = res.Model.Tokenizer.EncodeCached(make([]uint32, 0, len(prompt)/3+8), prompt, r.cache)
	if err := r.checkTokens(len(res.Tokens)); err != nil {
		return nil, err
	}
	res.hash()
	return res, nil
}

// Completion preprocesses a /v1/completions body. A batch of prompts is
// routed by its first prompt: the engine serves them together.
func (r *Registry) Completion(body []byte) (*Result, error) {
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
			res.Tokens = p.TokenIDs
		} else {
			res.Prompt = p.Text
			// vLLM's completions endpoint adds the tokenizer's special
			// tokens (Llama-3: <|begin_of_text|>).
			res.Tokens = res.Model.Tokenizer.EncodeWithSpecialTokens(make([]uint32, 0, len(p.Text)/3+8), p.Text)
		}
	}
	if err := r.checkTokens(len(res.Tokens)); err != nil {
		return nil, err
	}
	res.hash()
	return res, nil
}

func (r *Registry) resolve(model string) (*Result, error) {
	s, ok := r.names[model]
	if !ok {
		return nil, &openai.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("The model `%s` does not exist.", model), Type: "invalid_request_error", Param: "model", Code: "model_not_found"}
	}
	return &Result{Model: s.model, Served: model, LoRA: s.lora}, nil
}

func (r *Registry) checkTokens(n int) error {
	limit := r.limits.MaxPromptTokens
	if limit == 0 {
		limit = openai.DefaultLimits.MaxPromptTokens
	}
	if n > limit {
		return &openai.Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("prompt is %d tokens, over the limit of %d", n, limit), Type: "invalid_request_error", Param: "messages", Code: "prompt_too_long"}
	}
	return nil
}

func (res *Result) hash() {
	seed := blockhash.Seed(res.LoRA, blockhash.RequestNamespace(res.CacheSalt, res.Model.Namespace))
	res.Local = blockhash.LocalHashes(res.Tokens, res.Model.BlockSize, seed)
	res.Sequence = blockhash.SequenceHashes(res.Local)
}
