package enginesim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/extproc/preprocess"
)

// apiKind is the OpenAI endpoint a request came to.
type apiKind int

const (
	apiChat apiKind = iota
	apiCompletion
	// apiMessages (Anthropic Messages) and apiResponses (OpenAI Responses)
	// are rendered as vLLM renders them (preprocess.Registry's
	// MessagesContext, ResponsesContext), so the blocks cached and
	// published are the ones kvgate hashes; answers use each API's
	// non-streamed shape, and a streamed one is sent as chat chunks (a
	// simulator simplification: kvgate passes streams through untouched).
	apiMessages
	apiResponses
)

// generation is one accepted request on its way through the engine.
type generation struct {
	kind         apiKind
	id           string
	served       string
	created      int64
	stream       bool
	includeUsage bool
	prompt       int
	holdBlocks   bool // prefill side of P/D: answer with kv_transfer_params
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.handleGenerate(w, r, apiChat)
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	s.handleGenerate(w, r, apiCompletion)
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	s.handleGenerate(w, r, apiMessages)
}

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	s.handleGenerate(w, r, apiResponses)
}

func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request, kind apiKind) {
	received := s.clock.now()
	body, oerr := readBody(w, r)
	if oerr != nil {
		writeError(w, oerr)
		return
	}
	req, g, kvp, oerr := s.prepare(body, kind)
	if oerr != nil {
		writeError(w, oerr)
		return
	}
	ctx := r.Context()
	if req.KVTransferred {
		// The decoder pulls the prompt's KV before it can schedule the
		// request (vLLM WAITING_FOR_REMOTE_KVS), then tells the prefill
		// worker it may free the blocks.
		if !s.awaitTransfer(ctx, len(req.Tokens)) {
			// Aborted before the KV arrived: still tell the prefill worker,
			// so its blocks are freed now rather than at the abort timeout
			// (vLLM NixlConnectorScheduler.request_finished: a decode
			// request finished while do_remote_prefill is still set sends
			// the notification with no blocks read, "to avoid stranding the
			// prefill blocks in the prefill instance").
			s.notifyPrefill(kvp)
			return
		}
		s.notifyPrefill(kvp)
	}
	t, err := s.clock.submit(req, received)
	if err != nil {
		writeError(w, invalidRequest("", "%v", err))
		return
	}
	if g.stream {
		s.stream(ctx, w, g, t)
	} else {
		s.respond(ctx, w, g, t)
	}
}

// prepare parses and validates a generation request.
func (s *Server) prepare(body []byte, kind apiKind) (Request, *generation, kvTransferParams, *openai.Error) {
	var res *preprocess.Result
	var err error
	prefix := "chatcmpl-"
	switch kind {
	case apiChat:
		res, err = s.reg.Chat(body)
	case apiMessages:
		prefix = "msg_"
		res, err = s.reg.MessagesContext(context.Background(), body)
	case apiResponses:
		prefix = "resp_"
		res, err = s.reg.ResponsesContext(context.Background(), body)
	default:
		prefix = "cmpl-"
		res, err = s.reg.Completion(body)
	}
	if err != nil {
		return Request{}, nil, kvTransferParams{}, asOpenAIError(err)
	}
	if kind == apiResponses && res.ApproximateReason == preprocess.ReasonUnseenInput {
		// The simulator stores no responses: a previous_response_id is
		// unknown, answered as vLLM answers one it does not hold (404,
		// vllm/entrypoints/openai/responses/serving.py
		// _make_not_found_error at 4d89a999c51e191a959a49e44cf7d6697f96cf6a).
		var prev struct {
			ID string `json:"previous_response_id"`
		}
		_ = json.Unmarshal(body, &prev)
		return Request{}, nil, kvTransferParams{}, &openai.Error{Status: http.StatusNotFound, Type: "invalid_request_error",
			Message: fmt.Sprintf("Response with id '%s' not found.", prev.ID)}
	}
	x, err := parseExtras(body)
	if err != nil {
		return Request{}, nil, kvTransferParams{}, asOpenAIError(err)
	}
	kvp, err := parseKVTransferParams(x.KVTransferParams)
	if err != nil {
		return Request{}, nil, kvp, asOpenAIError(err)
	}
	if len(res.Tokens) == 0 {
		return Request{}, nil, kvp, invalidRequest("prompt", "the prompt is empty")
	}
	for i, id := range res.Tokens {
		if id >= s.vocab {
			return Request{}, nil, kvp, invalidRequest("prompt", "prompt[%d]: token id %d is out of vocabulary (size %d)", i, id, s.vocab)
		}
	}
	maxTokens := int64(s.cfg.DefaultMaxTokens)
	param := "max_tokens"
	switch {
	case x.MaxCompletionTokens != nil:
		maxTokens, param = *x.MaxCompletionTokens, "max_completion_tokens"
	case x.MaxTokens != nil:
		maxTokens = *x.MaxTokens
	case kind == apiResponses && res.MaxTokens > 0:
		maxTokens, param = res.MaxTokens, "max_output_tokens"
	}
	if maxTokens < 1 {
		return Request{}, nil, kvp, invalidRequest(param, "%s must be at least 1, got %d", param, maxTokens)
	}
	if int64(len(res.Tokens))+maxTokens > int64(s.cfg.MaxModelLen) {
		// vLLM's wording (serving_engine._validate_input).
		return Request{}, nil, kvp, invalidRequest(param, "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			s.cfg.MaxModelLen, int64(len(res.Tokens))+maxTokens, len(res.Tokens), maxTokens)
	}
	g := &generation{kind: kind, id: s.newRequestID(prefix), served: res.Served, created: time.Now().Unix(),
		stream: res.Stream, prompt: len(res.Tokens)}
	g.includeUsage = x.StreamOptions != nil && x.StreamOptions.IncludeUsage
	req := Request{ID: g.id, Tokens: res.Tokens, MaxTokens: int(maxTokens), LoRA: res.LoRA, CacheSalt: res.CacheSalt}
	switch {
	case kvp.DoRemoteDecode && s.cfg.Role == RolePrefill:
		req.HoldBlocks, g.holdBlocks = true, true
	case kvp.DoRemotePrefill && s.cfg.Role == RoleDecode:
		req.KVTransferred = true
	case kvp.DoRemoteDecode && s.cfg.Role == RoleDecode:
		return Request{}, nil, kvp, invalidRequest("kv_transfer_params.do_remote_decode", "kv_transfer_params: do_remote_decode is for a prefill worker; this one is a decode worker")
	case kvp.DoRemotePrefill && s.cfg.Role == RolePrefill:
		return Request{}, nil, kvp, invalidRequest("kv_transfer_params.do_remote_prefill", "kv_transfer_params: do_remote_prefill is for a decode worker; this one is a prefill worker")
	}
	// An aggregated worker has no KV connector and ignores the params, as
	// vLLM does without --kv-transfer-config.
	return req, g, kvp, nil
}

func asOpenAIError(err error) *openai.Error {
	var oe *openai.Error
	if errors.As(err, &oe) {
		return oe
	}
	return invalidRequest("", "%v", err)
}

// awaitTransfer waits the simulated KV transfer of tokens; false if the
// client went away meanwhile.
func (s *Server) awaitTransfer(ctx context.Context, tokens int) bool {
	d := time.Duration(float64(s.cfg.Transfer.Duration(tokens)) / s.speedUp())
	s.clock.addTransferring(1)
	defer s.clock.addTransferring(-1)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Server) speedUp() float64 { return s.clock.eng.Config().SpeedUp }

// notifyPrefill tells the prefill simulator named in kvp that its blocks
// were read (NIXL's completion notification). Best effort, in the
// background: a prefill worker that is gone frees them on its timeout.
func (s *Server) notifyPrefill(kvp kvTransferParams) {
	if kvp.RemoteHost == "" || kvp.RemotePort == 0 || kvp.RemoteRequestID == "" {
		return
	}
	url := "http://" + net.JoinHostPort(kvp.RemoteHost, strconv.Itoa(kvp.RemotePort)) + releasePath
	body, _ := json.Marshal(map[string]string{"remote_request_id": kvp.RemoteRequestID, "remote_engine_id": kvp.RemoteEngineID})
	// Not waited for by Close: bounded by its timeout and by runCtx.
	go func() {
		ctx, cancel := context.WithTimeout(s.runCtx, 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			s.log.Warn("kv read notification", "url", url, "err", err)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := s.notifier.Do(req)
		if err != nil {
			s.log.Warn("kv read notification", "url", url, "err", err)
			return
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			s.log.Warn("kv read notification refused", "url", url, "status", resp.StatusCode)
		}
	}()
}

// handleRelease is the prefill side of the read notification.
func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	body, oerr := readBody(w, r)
	if oerr != nil {
		writeError(w, oerr)
		return
	}
	var n struct {
		RemoteRequestID string `json:"remote_request_id"`
		RemoteEngineID  string `json:"remote_engine_id"`
	}
	if err := json.Unmarshal(body, &n); err != nil || n.RemoteRequestID == "" {
		writeError(w, invalidRequest("remote_request_id", "want {\"remote_request_id\": …, \"remote_engine_id\": …}"))
		return
	}
	if n.RemoteEngineID != "" && n.RemoteEngineID != s.engineID {
		writeError(w, &openai.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("engine %q is not this engine (%s)", n.RemoteEngineID, s.engineID), Type: "NotFoundError"})
		return
	}
	if !s.releaseHeld(n.RemoteRequestID) {
		writeError(w, &openai.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no blocks held for request %q", n.RemoteRequestID), Type: "NotFoundError"})
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) releaseHeld(id string) bool {
	if t, ok := s.holdTimers.LoadAndDelete(id); ok {
		t.(*time.Timer).Stop()
	}
	return s.clock.release(id)
}

// holdUntilRead frees a prefill request's blocks after the abort timeout
// unless a decoder's notification frees them first.
func (s *Server) holdUntilRead(id string) {
	d := time.Duration(float64(s.cfg.KVHoldTimeout) / s.speedUp())
	s.holdTimers.Store(id, time.AfterFunc(d, func() {
		if s.releaseHeld(id) {
			s.log.Info("freed blocks no decoder read", "request", id, "after", d)
		}
	}))
}

// wait blocks until the request has more than sent tokens or is final;
// false if the client went away (the request is then aborted).
func (s *Server) wait(ctx context.Context, t *tracked, sent int) (int, *Output, bool) {
	for {
		gen, final := s.clock.snapshot(t)
		if gen > sent || final != nil {
			return gen, final, true
		}
		select {
		case <-t.notify:
		case <-ctx.Done():
			s.clock.abort(t)
			return 0, nil, false
		}
	}
}

// finished records a completed request's latencies and, on a prefill
// worker, starts holding its blocks.
func (s *Server) finished(g *generation, t *tracked, o *Output) map[string]any {
	s.metrics.observeRequest(o.FirstTokenAt-t.received, o.FinishedAt-t.received)
	if !g.holdBlocks {
		return nil
	}
	s.holdUntilRead(g.id)
	side := s.side.Load()
	host, port := "", 0
	if side != nil {
		host, port = side.host, side.port
	}
	ids := make([]int64, len(o.BlockIDs))
	for i, b := range o.BlockIDs {
		ids[i] = int64(b)
	}
	return prefillResponseParams(ids, s.engineID, g.id, host, port)
}

// respond answers a non-streamed request once it is final.
func (s *Server) respond(ctx context.Context, w http.ResponseWriter, g *generation, t *tracked) {
	var o *Output
	for o == nil {
		var ok bool
		if _, o, ok = s.wait(ctx, t, 1<<62); !ok {
			return
		}
	}
	kvp := s.finished(g, t, o)
	text := s.text(0, o.OutputTokens)
	u := newUsage(o.PromptTokens, o.OutputTokens, o.CachedTokens)
	reason := "length"
	var v any
	switch g.kind {
	case apiMessages:
		v = anthropicMessage(g, text, o)
	case apiResponses:
		v = responsesResponse(g, text, o)
	case apiChat:
		cc := chatCompletion{ID: g.id, Object: "chat.completion", Created: g.created, Model: g.served, Usage: u,
			Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: text, ToolCalls: []any{}}, FinishReason: reason}}}
		if kvp != nil {
			cc.KVTransferParams = kvp
		}
		v = cc
	default:
		tc := textCompletion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.served, Usage: u,
			Choices: []textChoice{{Text: text, FinishReason: &reason}}}
		if kvp != nil {
			tc.KVTransferParams = kvp
		}
		v = tc
	}
	if err := writeJSON(w, http.StatusOK, v); err != nil {
		s.log.Debug("writing response", "request", g.id, "err", err)
	}
}

// text is the generated text of tokens [from, to).
func (s *Server) text(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		_, piece := s.filler.token(i)
		b.WriteString(piece)
	}
	return b.String()
}

// stream answers with server-sent events as the tokens are produced: one
// chunk per token, finish_reason on the last, then the usage chunk when
// asked for, then [DONE].
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, g *generation, t *tracked) {
	sse := newSSEWriter(w)
	object := "chat.completion.chunk"
	if g.kind == apiCompletion {
		object = "text_completion"
	}
	sent := 0
	fail := func(err error) {
		s.log.Debug("stream write failed; aborting", "request", g.id, "err", err)
		s.clock.abort(t)
	}
	for {
		gen, final, ok := s.wait(ctx, t, sent)
		if !ok {
			return
		}
		if final != nil {
			gen = final.OutputTokens
		}
		if sent == 0 && g.kind != apiCompletion && (gen > 0 || final != nil) {
			// vLLM's first chat chunk carries only the role.
			empty := ""
			if err := sse.event(s.chatChunk(g, object, chatDelta{Role: "assistant", Content: &empty}, nil)); err != nil {
				fail(err)
				return
			}
		}
		for ; sent < gen; sent++ {
			var reason *string
			if final != nil && sent == gen-1 {
				r := "length"
				reason = &r
			}
			if err := sse.event(s.tokenChunk(g, object, sent, reason)); err != nil {
				fail(err)
				return
			}
		}
		if final == nil {
			continue
		}
		s.finished(g, t, final)
		if gen == 0 {
			// Nothing was generated (cannot happen with max_tokens >= 1,
			// kept so that a stream always ends with a finish_reason).
			r := "length"
			if err := sse.event(s.chatOrTextFinal(g, object, &r)); err != nil {
				return
			}
		}
		if g.includeUsage {
			u := newUsage(final.PromptTokens, final.OutputTokens, final.CachedTokens)
			var chunk any
			if g.kind != apiCompletion {
				chunk = chatChunk{ID: g.id, Object: object, Created: g.created, Model: g.served, Choices: []chatChunkChoice{}, Usage: u}
			} else {
				chunk = textCompletion{ID: g.id, Object: object, Created: g.created, Model: g.served, Choices: []textChoice{}, Usage: u}
			}
			if err := sse.event(chunk); err != nil {
				return
			}
		}
		_ = sse.done()
		return
	}
}

func (s *Server) chatChunk(g *generation, object string, d chatDelta, reason *string) chatChunk {
	return chatChunk{ID: g.id, Object: object, Created: g.created, Model: g.served,
		Choices: []chatChunkChoice{{Delta: d, FinishReason: reason}}}
}

func (s *Server) tokenChunk(g *generation, object string, i int, reason *string) any {
	_, piece := s.filler.token(i)
	if g.kind != apiCompletion {
		return s.chatChunk(g, object, chatDelta{Content: &piece}, reason)
	}
	return textCompletion{ID: g.id, Object: object, Created: g.created, Model: g.served,
		Choices: []textChoice{{Text: piece, FinishReason: reason}}}
}

func (s *Server) chatOrTextFinal(g *generation, object string, reason *string) any {
	if g.kind != apiCompletion {
		return s.chatChunk(g, object, chatDelta{}, reason)
	}
	return textCompletion{ID: g.id, Object: object, Created: g.created, Model: g.served,
		Choices: []textChoice{{FinishReason: reason}}}
}
