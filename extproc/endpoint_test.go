package extproc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// endpointFor reads :path as uvicorn + Starlette (vLLM, SGLang) and Go's
// net/http do: query cut, percent-decoded, then matched exactly and
// case-sensitively; what those servers answer 404 or redirect is not
// chat.
func TestEndpointForReadsThePathAsTheEngines(t *testing.T) {
	for path, want := range map[string]endpoint{
		"/v1/chat/completions":          endpointChat,
		"/v1/chat/%63ompletions":        endpointChat,
		"/v1/chat/%63%6F%6dpletions":    endpointChat,
		"/v1%2Fchat%2Fcompletions":      endpointChat, // unquote decodes %2F too
		"/v1/chat/completions?stream=1": endpointChat,
		"/v1/chat/completions#frag":     endpointChat,
		"/v1/completions":               endpointCompletion,
		"/%761/completions?x":           endpointCompletion,
		"/v1/chat/completions/":         endpointOther, // Starlette: 307 to the route, not served
		"//v1/chat/completions":         endpointOther, // 404: no slash merging
		"/v1/./chat/completions":        endpointOther, // 404: no dot segments
		"/V1/Chat/Completions":          endpointOther, // 404: case-sensitive
		"/v1/chat/completionsX":         endpointOther,
		"/v1/chat/completions/render":   endpointOther,
		"/v1/chat/%6":                   endpointOther,
		"/v1/chat/completions%":         endpointOther,
		"/v1/embeddings":                endpointOther,
		"/v1/chat/%2563ompletions":      endpointOther, // decoded once: "%63ompletions"
		"/v1/messages":                  endpointMessages,
		"/v1/%6Dessages?beta=true":      endpointMessages,
		"/v1/messages/count_tokens":     endpointOther,
		"/v1/responses":                 endpointResponses,
		"/v1/responses/resp_1":          endpointOther,
	} {
		if got := endpointFor(path); got != want {
			t.Errorf("endpointFor(%q) = %d, want %d", path, got, want)
		}
	}
}

// twoPoolRig is a rig with a qwen3 pool (workers) and a llama pool.
var llamaWorkers = []string{"10.0.1.1:8000", "10.0.1.2:8000", "10.0.1.3:8000"}

func twoPoolRig(t *testing.T, hcfg envoyharness.Config) *rig {
	t.Helper()
	dir, err := modelfiles.Model("llama3_1")
	if err != nil {
		t.Fatal(err)
	}
	return newRig(t, func(c *config.Config) {
		c.Models = append(c.Models, config.Model{Name: "llama", BlockSize: 16, Tokenizer: dir})
		for _, w := range llamaWorkers {
			c.Engines = append(c.Engines, config.Engine{Endpoint: w, Model: "llama", DPRanks: 1, Role: "both", Events: "tcp://127.0.0.1:1"})
		}
	}, hcfg)
}

func isLlama(w string) bool {
	for _, l := range llamaWorkers {
		if l == w {
			return true
		}
	}
	return false
}

// Issue 31 finding 1, over real ext_proc streams with a gateway that does
// not normalise paths (Envoy's defaults): an encoded chat path is parsed
// and recorded; a route kvgate does not parse but whose body names a model
// goes to that model's pool; an unknown model on such a route is 404; a
// request naming no model still goes anywhere.
func TestUnparsedRoutesStayInTheModelsPool(t *testing.T) {
	hcfg := envoyharness.DefaultConfig()
	hcfg.Path = envoyharness.PathNormalization{}
	r := twoPoolRig(t, hcfg)
	llamaChat := func(i int) []byte { return chatBody("llama", fmt.Sprintf("Question %d about the fleet. ", i)) }
	start := len(r.router.debug.recent())
	for i := range 20 {
		req := post(llamaChat(i))
		req.Path = "/v1/chat/%63ompletions"
		x, err := r.harness.Start(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if x.Local != nil {
			t.Fatalf("answered %d %s", x.Local.Status, x.Local.Body)
		}
		if !isLlama(x.Forward.Upstream) {
			t.Fatalf("request %d for llama routed to %s", i, x.Forward.Upstream)
		}
		finishResponse(t, x, x.Forward.Upstream)
	}
	recent := r.router.debug.recent()
	if got := len(recent) - start; got != 20 {
		t.Fatalf("%d decisions recorded for 20 encoded-path requests", got)
	}
	for _, d := range recent[start:] {
		if d.Model != "llama" || d.Tokens == 0 {
			t.Fatalf("decision %+v: want llama, parsed (tokens > 0)", d)
		}
	}

	for _, path := range []string{"/v1/embeddings", "/v1/responses/", "/v1/messages/", "/v1/chat/completions/", "//v1/chat/completions"} {
		for i := range 6 {
			body := fmt.Sprintf(`{"model":"llama","input":"x%d","max_tokens":"not a number"}`, i)
			x, err := r.harness.Start(context.Background(), &envoyharness.Request{Method: "POST", Path: path, Body: []byte(body),
				Headers: []envoyharness.Header{{Name: "content-type", Value: "application/json"}}})
			if err != nil {
				t.Fatal(err)
			}
			if x.Local != nil {
				t.Fatalf("%s: answered %d %s (kvgate does not judge a route it does not parse)", path, x.Local.Status, x.Local.Body)
			}
			if !isLlama(x.Forward.Upstream) {
				t.Fatalf("%s naming llama routed to %s", path, x.Forward.Upstream)
			}
			finishResponse(t, x, x.Forward.Upstream)
		}
	}
	if got := r.router.debug.recent(); len(got) == 0 || got[len(got)-1].Model != "llama" {
		t.Fatal("a model-named request on an unparsed route left no decision")
	}

	x, err := r.harness.Start(context.Background(), &envoyharness.Request{Method: "POST", Path: "/v1/embeddings", Body: []byte(`{"model":"gpt-4","input":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if x.Local == nil || x.Local.Status != http.StatusNotFound || !strings.Contains(string(x.Local.Body), "model_not_found") {
		t.Fatalf("unknown model on an unparsed route: %+v, want 404 model_not_found", x.Local)
	}
	var e struct {
		Error struct{ Param string } `json:"error"`
	}
	if err := json.Unmarshal(x.Local.Body, &e); err != nil || e.Error.Param != "model" {
		t.Fatalf("404 body %s", x.Local.Body)
	}

	// GET /v1/models and bodies naming no model: any worker of the fleet.
	seen := map[bool]bool{}
	for i := 0; i < 60 && !(seen[true] && seen[false]); i++ {
		x, err := r.harness.Start(context.Background(), &envoyharness.Request{Method: "GET", Path: "/v1/models"})
		if err != nil {
			t.Fatal(err)
		}
		if x.Local != nil {
			t.Fatalf("GET /v1/models answered %d %s", x.Local.Status, x.Local.Body)
		}
		seen[isLlama(x.Forward.Upstream)] = true
		finishResponse(t, x, x.Forward.Upstream)
	}
	if !seen[true] || !seen[false] {
		t.Fatalf("GET /v1/models reached only one pool in 60 requests: %v", seen)
	}
	waitIdle(t, r.router)
}

// /v1/messages and /v1/responses are parsed, rendered and keyed like chat
// (a decision with tokens), and a malformed body is answered in the API's
// own error shape: Anthropic's for Messages, OpenAI's for Responses.
func TestMessagesAndResponsesAreParsedAndAnsweredInTheirShape(t *testing.T) {
	r := twoPoolRig(t, envoyharness.DefaultConfig())
	send := func(path, body string) *envoyharness.Exchange {
		t.Helper()
		x, err := r.harness.Start(context.Background(), &envoyharness.Request{Method: "POST", Path: path, Body: []byte(body),
			Headers: []envoyharness.Header{{Name: "content-type", Value: "application/json"}}})
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	for path, body := range map[string]string{
		"/v1/messages":  `{"model":"llama","max_tokens":16,"system":"Be brief.","messages":[{"role":"user","content":"Where is the fleet?"}]}`,
		"/v1/responses": `{"model":"llama","instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"Where is the fleet?"}]}]}`,
	} {
		x := send(path, body)
		if x.Local != nil {
			t.Fatalf("%s: answered %d %s", path, x.Local.Status, x.Local.Body)
		}
		if !isLlama(x.Forward.Upstream) {
			t.Fatalf("%s routed to %s", path, x.Forward.Upstream)
		}
		finishResponse(t, x, x.Forward.Upstream)
		recent := r.router.debug.recent()
		if d := recent[len(recent)-1]; d.Model != "llama" || d.Tokens == 0 {
			t.Fatalf("%s: decision %+v, want llama with a tokenized prompt", path, d)
		}
	}

	x := send("/v1/messages", `{"model":"llama","messages":[{"role":"user","content":"x"}]}`)
	var anth struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if x.Local == nil || x.Local.Status != http.StatusBadRequest || json.Unmarshal(x.Local.Body, &anth) != nil ||
		anth.Type != "error" || anth.Error.Type != "invalid_request_error" || !strings.Contains(anth.Error.Message, "max_tokens") {
		t.Fatalf("Messages without max_tokens: %+v, want 400 in Anthropic's shape naming max_tokens", x.Local)
	}
	x = send("/v1/responses", `{"model":"llama","input":[{"type":"reasoning","encrypted_content":"xyz","summary":[]}]}`)
	var oai struct {
		Error struct{ Type, Message, Param string }
	}
	if x.Local == nil || x.Local.Status != http.StatusBadRequest || json.Unmarshal(x.Local.Body, &oai) != nil ||
		oai.Error.Type != "invalid_request_error" || !strings.Contains(oai.Error.Message, "Encrypted content") {
		t.Fatalf("Responses with encrypted reasoning: %+v, want 400 in OpenAI's shape", x.Local)
	}
}
