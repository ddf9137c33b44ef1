package enginesim

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/kvgate/kvgate/extproc/openai"
)

// This file holds the OpenAI wire shapes the simulator writes, in the
// layout vLLM's entrypoints/openai/protocol.py gives them (field names,
// nulls and the order of stream events), and the request fields that
// kvgate's one-pass parser (extproc/openai) does not keep.

// requestExtras are the request members the engine needs beyond what the
// preprocess Registry returns.
type requestExtras struct {
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	N *int `json:"n"`
	// MaxTokens and MaxCompletionTokens are read again here because the
	// Registry cannot tell an explicit 0 from an absent value.
	MaxTokens           *int64 `json:"max_tokens"`
	MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	// KVTransferParams is vLLM's P/D handshake object (see pd.go).
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	// Prompt is only looked at to count a completions batch.
	Prompt json.RawMessage `json:"prompt"`
}

// parseExtras reads requestExtras from a body the Registry already
// accepted (so it is well-formed JSON within the configured size limit).
func parseExtras(body []byte) (requestExtras, error) {
	var x requestExtras
	if err := json.Unmarshal(body, &x); err != nil {
		return x, invalidRequest("", "request body: %v", err)
	}
	if x.N != nil && *x.N != 1 {
		return x, invalidRequest("n", "n: enginesim serves one choice per request, got %d", *x.N)
	}
	if len(x.Prompt) > 0 && x.Prompt[0] == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(x.Prompt, &batch); err == nil && len(batch) > 1 &&
			(batch[0][0] == '"' || batch[0][0] == '[') {
			return x, invalidRequest("prompt", "prompt: enginesim serves one prompt per request, got a batch of %d", len(batch))
		}
	}
	return x, nil
}

func invalidRequest(param, format string, args ...any) *openai.Error {
	return &openai.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Type: "invalid_request_error", Param: param}
}

// usage is vLLM's UsageInfo. prompt_tokens_details is written always (vLLM
// needs --enable-prompt-tokens-details for it): the router's tests read
// cached_tokens from it.
type usage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	PromptTokensDetails promptTokensDetails `json:"prompt_tokens_details"`
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func newUsage(prompt, completion, cached int) *usage {
	return &usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion,
		PromptTokensDetails: promptTokensDetails{CachedTokens: cached}}
}

// chatMessage is the assistant message of a non-streamed chat completion.
type chatMessage struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	Refusal   any    `json:"refusal"`
	ToolCalls []any  `json:"tool_calls"`
	Reasoning any    `json:"reasoning_content"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     any         `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
	StopReason   any         `json:"stop_reason"`
}

type chatCompletion struct {
	ID               string       `json:"id"`
	Object           string       `json:"object"`
	Created          int64        `json:"created"`
	Model            string       `json:"model"`
	Choices          []chatChoice `json:"choices"`
	Usage            *usage       `json:"usage"`
	PromptLogprobs   any          `json:"prompt_logprobs"`
	KVTransferParams any          `json:"kv_transfer_params"`
}

// chatDelta is a streamed chat choice's delta: the first chunk carries the
// role and an empty content, later ones the new text, the last one (with
// finish_reason) may be empty.
type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
	StopReason   any       `json:"stop_reason,omitempty"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	// Usage is null on every chunk but the usage chunk when the client
	// asked for include_usage, and absent otherwise (vLLM).
	Usage *usage `json:"usage,omitempty"`
}

type textChoice struct {
	Index          int     `json:"index"`
	Text           string  `json:"text"`
	Logprobs       any     `json:"logprobs"`
	FinishReason   *string `json:"finish_reason"`
	StopReason     any     `json:"stop_reason"`
	PromptLogprobs any     `json:"prompt_logprobs"`
}

type textCompletion struct {
	ID               string       `json:"id"`
	Object           string       `json:"object"`
	Created          int64        `json:"created"`
	Model            string       `json:"model"`
	Choices          []textChoice `json:"choices"`
	Usage            *usage       `json:"usage,omitempty"`
	KVTransferParams any          `json:"kv_transfer_params,omitempty"`
}

type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Root        string `json:"root"`
	Parent      any    `json:"parent"`
	MaxModelLen int    `json:"max_model_len"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

// writeJSON writes v with status; an encoding failure is a bug in the
// shapes above, so it is logged by the caller's error path only.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err = w.Write(b)
	return err
}

func writeError(w http.ResponseWriter, e *openai.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.JSON())
}

// sseWriter writes server-sent events as vLLM does: `data: <json>\n\n` per
// chunk, flushed at once, ending with `data: [DONE]\n\n`.
type sseWriter struct {
	w       http.ResponseWriter
	flusher http.Flusher
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sseWriter{w: w, flusher: f}
}

func (s *sseWriter) event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode stream chunk: %w", err)
	}
	return s.raw(b)
}

func (s *sseWriter) raw(data []byte) error {
	buf := make([]byte, 0, len(data)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	if s.flusher != nil {
		s.flusher.Flush()
	}
	return nil
}

func (s *sseWriter) done() error { return s.raw([]byte("[DONE]")) }
