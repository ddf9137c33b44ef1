package extproc

import (
	"context"

	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/extproc/preprocess"
)

// endpoint is the API route a request addresses, as the engine's HTTP
// server will read its :path.
type endpoint int

const (
	// endpointOther: a route kvgate does not parse (GET /v1/models,
	// /v1/embeddings, /tokenize, …): routed by its body's model, when it
	// names one (routeUnparsed).
	endpointOther endpoint = iota
	endpointChat
	endpointCompletion
	// endpointMessages is the Anthropic Messages API and endpointResponses
	// the OpenAI Responses API, both as vLLM serves them
	// (vllm/entrypoints/anthropic/api_router.py,
	// vllm/entrypoints/openai/responses/api_router.py): parsed by their
	// own parsers into the chat request vLLM converts them to, then routed
	// like a chat.
	endpointMessages
	endpointResponses
)

// parsed reports whether kvgate reads this route's body for a prompt.
func (ep endpoint) parsed() bool { return ep != endpointOther }

// required names the body members the route's request needs, for the
// answer to a POST without a body.
func (ep endpoint) required() string {
	switch ep {
	case endpointCompletion:
		return "model and prompt"
	case endpointMessages:
		return "model, messages and max_tokens"
	case endpointResponses:
		return "model and input"
	}
	return "model and messages"
}

// preprocess runs the route's parser and the shared render, tokenize and
// hash path (one routing path fed by per-endpoint parsers).
func (ep endpoint) preprocess(ctx context.Context, reg *preprocess.Registry, body []byte) (*preprocess.Result, error) {
	switch ep {
	case endpointChat:
		return reg.ChatContext(ctx, body)
	case endpointCompletion:
		return reg.CompletionContext(ctx, body)
	case endpointMessages:
		return reg.MessagesContext(ctx, body)
	case endpointResponses:
		return reg.ResponsesContext(ctx, body)
	}
	return nil, nil
}

// errorBody renders a rejection in the route's own error shape: Anthropic's
// for /v1/messages, OpenAI's error object elsewhere (the Responses API
// answers errors with it too: vLLM's ErrorResponse).
func (ep endpoint) errorBody(e *openai.Error) []byte {
	if ep == endpointMessages {
		return e.AnthropicJSON()
	}
	return e.JSON()
}

// endpointFor reads :path as the engines' servers do, so that every
// spelling an engine serves as chat or completions is parsed as such
// (issue 31: /v1/chat/%63ompletions went to the least-loaded engine of
// the whole fleet, model-blind).
//
//   - vLLM and SGLang serve through uvicorn, which splits the query off
//     (httptools.parse_url) and percent-decodes the rest with
//     urllib.parse.unquote when it holds a '%' (uvicorn
//     protocols/http/httptools_impl.py on_url; h11_impl.py likewise):
//     every valid %XX, %2F included, becomes its byte; an invalid escape
//     stays as written.
//   - Starlette's router (FastAPI's APIRouter) then matches that decoded
//     path against the route's exact, case-sensitive regex
//     (starlette/routing.py compile_path, Route.matches). It does not
//     resolve "." or ".." segments, merge "//" or fold case: those
//     spellings get 404. A trailing slash gets a 307 redirect to the
//     route without it (Router.app, redirect_slashes), which the client
//     resends, canonical, through the gateway: it is not served as chat
//     on the first pass either.
//   - Go's net/http (llm-d's simulators, Go engines' front ends) decodes
//     the path the same way (url.ParseRequestURI) and redirects rather
//     than serves a path with dot segments or doubled slashes
//     (ServeMux, cleanPath).
//
// So only the query (and a fragment, which Envoy refuses or strips
// before ext_proc: conn_manager_utility.cc maybeNormalizePath) is cut and
// the rest percent-decoded; the result must equal the route exactly.
// What Envoy's own path normalisation changes (normalize_path,
// merge_slashes: envoy/envoy.yaml) reaches kvgate and the engine alike,
// already normalised.
func endpointFor(path string) endpoint {
	for i := 0; i < len(path); i++ {
		if path[i] == '?' || path[i] == '#' {
			path = path[:i]
			break
		}
	}
	switch percentDecoded(path) {
	case "/v1/chat/completions":
		return endpointChat
	case "/v1/completions":
		return endpointCompletion
	case "/v1/messages":
		return endpointMessages
	case "/v1/responses":
		return endpointResponses
	}
	return endpointOther
}

// percentDecoded is Python's urllib.parse.unquote on the bytes that
// matter here: each %XX with two hex digits becomes that byte, anything
// else is kept.
func percentDecoded(s string) string {
	i := 0
	for i < len(s) && s[i] != '%' {
		i++
	}
	if i == len(s) {
		return s
	}
	out := make([]byte, 0, len(s))
	out = append(out, s[:i]...)
	for ; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if h, ok := unhex(s[i+1]); ok {
				if l, ok := unhex(s[i+2]); ok {
					out = append(out, h<<4|l)
					i += 2
					continue
				}
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
