package chattemplate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/internal/third_party/jinja"

	"github.com/kvgate/kvgate/extproc/openai"
)

// ContentFormat is how array message content reaches the template, as vLLM's
// --chat-template-content-format.
type ContentFormat int

const (
	// ContentString joins text parts with "\n" into one string, what vLLM
	// picks for templates that print message.content (Qwen3, Llama 3).
	ContentString ContentFormat = iota
	// ContentOpenAI passes parts as a list of {type, text} / {type: modality}.
	ContentOpenAI
)

// Options configure a Renderer.
type Options struct {
	// Now is the clock behind strftime_now; nil means time.Now.
	Now func() time.Time
	// ContentFormat defaults to ContentString.
	ContentFormat ContentFormat
	// ToolFunctionFields are the declared fields of vLLM's FunctionDefinition,
	// which model_dump() writes first, as null when absent. Defaults to
	// name, description, parameters; newer vLLM also declares "strict".
	ToolFunctionFields []string
	// MaxPromptBytes bounds what one render may write (0 = no bound); past
	// it the render stops with a *jinja.OutputLimitError.
	MaxPromptBytes int
}

// Renderer holds one model's compiled templates. It is safe for concurrent
// use: templates are compiled once in New and only read afterwards.
type Renderer struct {
	templates map[string]*jinja.Template
	// special (the special tokens, which chat_template_kwargs may
	// override) and callables (raise_exception, strftime_now, which they
	// may not) are built once here rather than per request (issue 27 item 3).
	special, callables map[string]jinja.Value
	opts               Options
	// vars recycles the per-render variable maps: the engine copies them
	// into its own scope (jinja render) and keeps no reference.
	vars sync.Pool

	renders, failures, inexact atomic.Uint64
}

// Stats are cumulative counters.
type Stats struct {
	Renders  uint64 // successful renders
	Failures uint64 // renders that returned an error
	// Inexact counts renders whose values Python would hold differently
	// (see Render); the prompt may be off by a few characters, so routing
	// for that request is approximate.
	Inexact uint64
}

// TemplateError is an error raised by the template itself through
// raise_exception, e.g. for roles it does not accept; vLLM answers it with 400.
type TemplateError struct{ Message string }

func (e *TemplateError) Error() string { return e.Message }

// ErrRequestTemplate is returned for a request that carries its own
// chat_template: vLLM refuses it unless started with
// --trust-request-chat-template, and kvgate does the same.
var ErrRequestTemplate = errors.New("chat_template in the request is not accepted")

// New compiles every template in cfg.
func New(cfg *Config, opts Options) (*Renderer, error) {
	if len(cfg.Templates) == 0 {
		return nil, errors.New("chattemplate: config has no chat template")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if len(opts.ToolFunctionFields) == 0 {
		opts.ToolFunctionFields = []string{"name", "description", "parameters"}
	}
	r := &Renderer{templates: map[string]*jinja.Template{}, special: map[string]jinja.Value{}, callables: map[string]jinja.Value{}, opts: opts}
	for name, src := range cfg.Templates {
		t, err := jinja.Compile(normalizeSource(src))
		if err != nil {
			return nil, fmt.Errorf("chattemplate: compile %q: %w", name, err)
		}
		r.templates[name] = t
	}
	for k, v := range cfg.SpecialTokens {
		r.special[k] = jinja.NewString(v)
	}
	if cfg.AdditionalSpecialTokens != nil {
		items := make([]jinja.Value, len(cfg.AdditionalSpecialTokens))
		for i, t := range cfg.AdditionalSpecialTokens {
			items[i] = jinja.NewString(t)
		}
		r.special["additional_special_tokens"] = jinja.NewList(items)
	}
	r.callables["raise_exception"] = jinja.NewCallable("raise_exception", raiseException)
	now := opts.Now
	r.callables["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Value{}, errors.New("strftime_now: expected one format string")
		}
		s, err := strftime(args[0].AsString(), now())
		if err != nil {
			return jinja.Value{}, err
		}
		return jinja.NewString(s), nil
	})
	return r, nil
}

// Stats returns the counters so far.
func (r *Renderer) Stats() Stats {
	return Stats{Renders: r.renders.Load(), Failures: r.failures.Load(), Inexact: r.inexact.Load()}
}

// pick chooses the template like transformers' get_chat_template: with tools,
// "tool_use" when the model has one; otherwise "default".
func (r *Renderer) pick(hasTools bool) (*jinja.Template, error) {
	if hasTools {
		if t, ok := r.templates["tool_use"]; ok {
			return t, nil
		}
	}
	if t, ok := r.templates["default"]; ok {
		return t, nil
	}
	if len(r.templates) == 1 {
		for _, t := range r.templates {
			return t, nil
		}
	}
	return nil, errors.New("no \"default\" chat template among the model's named templates")
}

// reservedVariables cannot be set through chat_template_kwargs: transformers
// passes them as named arguments, and a duplicate is a TypeError there.
var reservedVariables = map[string]bool{
	"messages": true, "tools": true, "documents": true, "add_generation_prompt": true,
}

// Render renders req's prompt with the engine in ./jinja, a fork of
// ardanlabs/jinja v1.8.0 whose whitespace control, float and string
// formatting and tojson(indent=…) follow Python jinja2 (see jinja/FORK.md).
// Values Python holds differently — integers beyond int64 and floats out of
// range in tool arguments — still render, counted in Stats.Inexact.
func (r *Renderer) Render(req *openai.ChatRequest) (string, error) {
	return r.RenderContext(context.Background(), req)
}

// RenderContext is Render stopped by ctx: the template engine looks at it
// every thousand or so steps, so a cancelled request or a passed deadline
// ends the render within about a millisecond with ctx's error.
func (r *Renderer) RenderContext(ctx context.Context, req *openai.ChatRequest) (string, error) {
	out, err := r.render(ctx, req)
	if err != nil {
		r.failures.Add(1)
		return "", err
	}
	r.renders.Add(1)
	return out, nil
}

func (r *Renderer) render(ctx context.Context, req *openai.ChatRequest) (string, error) {
	if req.RequestTemplate() != "" {
		return "", ErrRequestTemplate
	}
	tmpl, err := r.pick(len(req.Tools) > 0)
	if err != nil {
		return "", err
	}
	b := &bridge{format: r.opts.ContentFormat, functionFields: r.opts.ToolFunctionFields}
	vars, _ := r.vars.Get().(map[string]jinja.Value)
	if vars == nil {
		vars = make(map[string]jinja.Value, len(r.special)+len(r.callables)+4+len(req.ChatTemplateKwargs))
	}
	defer func() {
		clear(vars)
		r.vars.Put(vars)
	}()
	for k, v := range r.special {
		vars[k] = v
	}
	for _, kv := range req.ChatTemplateKwargs {
		if reservedVariables[kv.Key] {
			return "", fmt.Errorf("chat_template_kwargs: %q cannot be set this way", kv.Key)
		}
		vars[kv.Key] = b.value(kv.Value)
	}
	if vars["messages"], err = b.messages(req.Messages); err != nil {
		return "", err
	}
	vars["tools"] = jinja.None()
	if req.Tools != nil {
		tools := make([]jinja.Value, len(req.Tools))
		for i, t := range req.Tools {
			if req.ToolsDumped {
				tools[i] = b.value(t) // already as the engine dumps them (Responses API)
			} else {
				tools[i] = b.tool(t)
			}
		}
		vars["tools"] = jinja.NewList(tools)
	}
	vars["documents"] = jinja.None()
	if req.Documents != nil {
		docs := make([]jinja.Value, len(req.Documents))
		for i, d := range req.Documents {
			docs[i] = b.value(d)
		}
		vars["documents"] = jinja.NewList(docs)
	}
	vars["add_generation_prompt"] = jinja.NewBool(req.AddGenerationPrompt)
	for k, v := range r.callables {
		vars[k] = v
	}

	out, err := tmpl.RenderValuesContext(ctx, vars, jinja.RenderOptions{MaxOutputBytes: r.opts.MaxPromptBytes, SizeHint: len(req.Body)})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return "", err
		}
		var te *TemplateError
		if errors.As(err, &te) {
			return "", te
		}
		return "", fmt.Errorf("render chat template: %w", err)
	}
	if b.inexact != "" {
		r.inexact.Add(1)
		slog.Debug("chat template render may differ from Python", "reason", b.inexact)
	}
	if req.ContinueFinalMessage {
		return continueFinal(out, req.Messages[len(req.Messages)-1])
	}
	return out, nil
}

// normalizeSource applies what Python jinja2's lexer does to a template
// before parsing and ardanlabs/jinja v1.8.0 does not: newlines become "\n"
// (newline_sequence) and one trailing newline is dropped
// (keep_trailing_newline=False, which transformers keeps).
func normalizeSource(src string) string {
	if strings.ContainsRune(src, '\r') {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	msg := "raise_exception called"
	if len(args) > 0 && args[0].IsString() {
		msg = args[0].AsString()
	}
	return jinja.Value{}, &TemplateError{Message: msg}
}

// continueFinal cuts the prompt right after the final message's text so the
// model continues it, as transformers' apply_chat_template does for
// continue_final_message.
func continueFinal(rendered string, last openai.Message) (string, error) {
	final := last.Content.Text
	if last.Content.IsParts {
		found := false
		for i := len(last.Content.Parts) - 1; i >= 0; i-- {
			if p := last.Content.Parts[i]; p.IsText() && p.HasText {
				final, found = p.Text, true
				break
			}
		}
		if !found {
			return "", errors.New("continue_final_message is set but the final message has no text to continue")
		}
	}
	trimmed := strings.TrimSpace(final)
	loc := strings.LastIndex(rendered, trimmed)
	if loc < 0 {
		return "", errors.New("continue_final_message is set but the final message does not appear in the rendered chat")
	}
	left := strings.TrimLeft(final, " \t\n\r\f\v")
	if end := loc + len(left); end <= len(rendered) && rendered[loc:end] == final {
		return rendered[:end], nil
	}
	return rendered[:loc+len(trimmed)], nil
}
