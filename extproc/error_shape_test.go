package extproc

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

// Every answer kvgate writes itself — a parse error (400), an unknown
// model (404), a body over the limit (413, written by the ext_proc server),
// a shed (429), no eligible worker (503) — follows the API the request
// addressed: Anthropic's shape on /v1/messages, as vLLM's Messages route
// answers (vllm/entrypoints/anthropic/api_router.py translate_error_response
// and protocol.py AnthropicErrorResponse, commit
// 01540b75e3b1c58a3bf586ee6defbdde6e0a2c1b), OpenAI's error object on
// /v1/responses and /v1/chat/completions (vLLM's ErrorResponse on both).
func TestLocalRepliesFollowTheRequestsAPI(t *testing.T) {
	r := newRig(t, func(c *config.Config) {
		c.Extproc.Admission.MaxInflight = 1
		c.Extproc.FlowControl.Disabled = true // the bound sheds at once
	}, envoyharness.DefaultConfig())
	// One request in flight holds the pool at its bound for the 429s.
	if _, rerr := decideWith(t, r.router, 0, nil); rerr != nil {
		t.Fatalf("holder: %d %s", rerr.Status, rerr.Body)
	}
	long := strings.Repeat("word ", 14<<10) // over the rig's 64 KiB body limit
	bodies := map[string]func(model, text string) string{
		"/v1/chat/completions": func(model, text string) string {
			return `{"model":"` + model + `","messages":[{"role":"user","content":"` + text + `"}]}`
		},
		"/v1/messages": func(model, text string) string {
			return `{"model":"` + model + `","max_tokens":8,"system":"Be brief.","messages":[{"role":"user","content":"` + text + `"}]}`
		},
		"/v1/responses": func(model, text string) string {
			return `{"model":"` + model + `","instructions":"Be brief.","input":"` + text + `"}`
		},
	}
	type reply struct {
		name   string
		body   string
		hint   []string
		status int
		phrase string // in the message
	}
	for path, body := range bodies {
		cases := []reply{
			{"malformed", `{"model":"qwen3",`, nil, http.StatusBadRequest, ""},
			{"unknown model", body("gpt-9", "hi"), nil, http.StatusNotFound, "gpt-9"},
			{"too large", body("qwen3", long), nil, http.StatusRequestEntityTooLarge, "exceeds the limit"},
			{"shed", body("qwen3", "a question over the bound"), nil, http.StatusTooManyRequests, "shedding load"},
			{"no worker", body("qwen3", "a question for nobody"), []string{"10.9.9.9:8000"}, http.StatusServiceUnavailable, "no eligible worker"},
		}
		for _, c := range cases {
			x, err := r.harness.Start(context.Background(), &envoyharness.Request{Method: "POST", Path: path, Body: []byte(c.body), SubsetHint: c.hint,
				Headers: []envoyharness.Header{{Name: "content-type", Value: "application/json"}}})
			if err != nil {
				t.Fatal(err)
			}
			if x.Local == nil || x.Local.Status != c.status {
				t.Fatalf("%s %s: got %+v / %+v, want local reply %d", path, c.name, x.Local, x.Forward, c.status)
			}
			var shape struct {
				Type  *string `json:"type"`
				Error struct {
					Type, Message string
				} `json:"error"`
			}
			if err := json.Unmarshal(x.Local.Body, &shape); err != nil || shape.Error.Type == "" || !strings.Contains(shape.Error.Message, c.phrase) {
				t.Fatalf("%s %s: body %s (%v), want an error naming %q", path, c.name, x.Local.Body, err, c.phrase)
			}
			var members map[string]json.RawMessage
			_ = json.Unmarshal(x.Local.Body, &members)
			var inner map[string]json.RawMessage
			_ = json.Unmarshal(members["error"], &inner)
			if path == "/v1/messages" {
				// {"type":"error","error":{"type":…,"message":…}} and nothing else.
				if shape.Type == nil || *shape.Type != "error" || len(members) != 2 || len(inner) != 2 {
					t.Fatalf("%s %s: body %s is not Anthropic's error shape", path, c.name, x.Local.Body)
				}
				continue
			}
			// {"error":{"message":…,"type":…,"param":…,"code":…}}
			if shape.Type != nil || len(members) != 1 || len(inner) != 4 {
				t.Fatalf("%s %s: body %s is not OpenAI's error shape", path, c.name, x.Local.Body)
			}
		}
	}
}
