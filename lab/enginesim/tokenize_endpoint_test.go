package enginesim

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// /tokenize answers vLLM's TokenizeResponse: the chat's ids are those the
// chat route caches (the same registry renders both), a prompt's carry the
// completions route's special tokens; the request shapes vLLM refuses or
// the simulator does not model are 400 in OpenAI's error shape.
func TestTokenizeEndpoint(t *testing.T) {
	s := startServer(t, func(c *ServerConfig) { c.MaxModelLen = 4096 })
	chat := `{"model":"` + testModel + `","messages":[{"role":"user","content":"Count the blocks."}]}`
	status, body := post(t, s.url+"/tokenize", []byte(chat))
	if status != http.StatusOK {
		t.Fatalf("chat: %d %s", status, body)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"count", "max_model_len", "tokens", "token_strs"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("answer %s lacks %s", body, k)
		}
	}
	got := decode[tokenizeResponse](t, body)
	want, err := s.reg.Chat([]byte(chat))
	if err != nil {
		t.Fatal(err)
	}
	if got.Count != len(got.Tokens) || !slices.Equal(got.Tokens, want.Tokens) || got.MaxModelLen != 4096 || got.TokenStrs != nil {
		t.Fatalf("chat answer %+v, want the chat route's %d ids", got, len(want.Tokens))
	}
	status, body = post(t, s.url+"/tokenize", []byte(`{"model":"`+testModel+`","prompt":"Count the blocks."}`))
	if status != http.StatusOK {
		t.Fatalf("prompt: %d %s", status, body)
	}
	if p := decode[tokenizeResponse](t, body); p.Count == 0 || p.Count != len(p.Tokens) {
		t.Fatalf("prompt answer %s", body)
	}
	for _, c := range []struct{ name, body, want string }{
		{"neither", `{"model":"` + testModel + `"}`, "exactly one of messages"},
		{"both", `{"model":"` + testModel + `","prompt":"a","messages":[{"role":"user","content":"b"}]}`, "exactly one of messages"},
		{"token strs", `{"model":"` + testModel + `","prompt":"a","return_token_strs":true}`, "return_token_strs"},
		{"special tokens on a chat", `{"model":"` + testModel + `","messages":[{"role":"user","content":"b"}],"add_special_tokens":true}`, "add_special_tokens"},
		{"unknown model", `{"model":"nope","prompt":"a"}`, "nope"},
		{"past max_model_len", `{"model":"` + testModel + `","prompt":"` + strings.Repeat("word ", 5000) + `"}`, "maximum context length is 4096"},
	} {
		status, body := post(t, s.url+"/tokenize", []byte(c.body))
		if status < 400 || status >= 500 || !strings.Contains(string(body), c.want) || !strings.Contains(string(body), `"error"`) {
			t.Fatalf("%s: %d %s, want a 4xx error naming %q", c.name, status, body, c.want)
		}
	}
}
