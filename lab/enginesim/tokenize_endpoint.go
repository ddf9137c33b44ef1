package enginesim

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/kvgate/kvgate/extproc/preprocess"
)

// POST /tokenize as vLLM serves it, so that kvgate's engine-side rendering
// (models[].preprocess.mode: engine) runs against the simulator in tests
// and the demo. The shapes are vLLM's TokenizeChatRequest (messages),
// TokenizeCompletionRequest (prompt) and TokenizeResponse
// (vllm/entrypoints/serve/tokenize/protocol.py at
// 343bacafc7bf4f973a105e8e7d99fa7de61f7e18; route and error statuses in
// api_router.py at b91ee1b47c8e8462ada5e5b8d18244bc96a0ebbc). The prompt
// is rendered and tokenized by kvgate's own preprocessor, as every other
// route of the simulator is: what a real vLLM would answer for the test
// models (the exactness goldens check it).
//
// Not modelled, answered 400: add_special_tokens other than the route's
// default (false for messages, true for a prompt), return_token_strs
// (the simulator decodes nothing), and a request the preprocessor cannot
// render exactly (media parts, a client chat_template).

// tokenizeRequest is the part of either request shape the simulator reads.
type tokenizeRequest struct {
	Messages         json.RawMessage `json:"messages"`
	Prompt           json.RawMessage `json:"prompt"`
	AddSpecialTokens *bool           `json:"add_special_tokens"`
	ReturnTokenStrs  *bool           `json:"return_token_strs"`
}

// tokenizeResponse is vLLM's TokenizeResponse; token_strs is null unless
// asked for (model_dump writes the None).
type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []uint32 `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	body, oerr := readBody(w, r)
	if oerr != nil {
		writeError(w, oerr)
		return
	}
	var tr tokenizeRequest
	if err := json.Unmarshal(body, &tr); err != nil {
		writeError(w, invalidRequest("", "request body: %v", err))
		return
	}
	chat := len(tr.Messages) > 0
	switch {
	case chat == (len(tr.Prompt) > 0):
		// Neither union member validates (pydantic answers 400 too).
		writeError(w, invalidRequest("", "give exactly one of messages (TokenizeChatRequest) or prompt (TokenizeCompletionRequest)"))
		return
	case tr.ReturnTokenStrs != nil && *tr.ReturnTokenStrs:
		writeError(w, invalidRequest("return_token_strs", "enginesim: return_token_strs is not modelled"))
		return
	case tr.AddSpecialTokens != nil && *tr.AddSpecialTokens != !chat:
		writeError(w, invalidRequest("add_special_tokens", "enginesim: only the route's default add_special_tokens (%t) is modelled", !chat))
		return
	}
	var res *preprocess.Result
	var err error
	if chat {
		res, err = s.reg.Chat(body)
	} else {
		res, err = s.reg.Completion(body)
	}
	if err != nil {
		writeError(w, asOpenAIError(err))
		return
	}
	defer res.Release()
	if res.Approximate != "" {
		writeError(w, invalidRequest("", "enginesim: cannot render this request exactly: %s", res.Approximate))
		return
	}
	if len(res.Tokens) > s.cfg.MaxModelLen {
		// vLLM's TokenizeParams(max_total_tokens=max_model_len) refuses it.
		writeError(w, invalidRequest("", "This model's maximum context length is %d tokens. However, your request has %d input tokens.", s.cfg.MaxModelLen, len(res.Tokens)))
		return
	}
	out := tokenizeResponse{Count: len(res.Tokens), MaxModelLen: s.cfg.MaxModelLen, Tokens: res.Tokens}
	if err := writeJSON(w, http.StatusOK, out); err != nil {
		s.log.Warn("writing /tokenize answer", "err", fmt.Errorf("enginesim: %w", err))
	}
}
