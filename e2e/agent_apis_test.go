//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// An agent conversation sent as Anthropic Messages and as OpenAI Responses
// (issue 29), through the gateway to real `kvgate extproc` and enginesim
// processes: the first turn lands somewhere; every later turn, in either
// API, lands on the engine holding the conversation's prefix and is served
// from its prefix cache. The Responses form of the first turn renders to
// the same prompt as the Messages form (vLLM converts both to the same chat
// messages), so it too goes to that engine.
func TestAgentConversationFollowsItsPrefixInEitherAPI(t *testing.T) {
	f := startFleet(t, fleetOptions{engines: 2})
	system := "You are a coding agent working in a Go repository. " + strings.Repeat("Read files before editing them; run the tests after every change; keep diffs small. ", 40)
	firstUser := "The build fails in main.go. Find out why."

	messagesTurn := func(extra ...map[string]any) map[string]any {
		msgs := []any{map[string]any{"role": "user", "content": firstUser}}
		for _, m := range extra {
			msgs = append(msgs, m)
		}
		return map[string]any{"model": modelName, "max_tokens": 4, "system": system, "messages": msgs}
	}
	responsesTurn := func(extra ...map[string]any) map[string]any {
		items := []any{map[string]any{"role": "user", "content": firstUser}}
		for _, m := range extra {
			items = append(items, m)
		}
		return map[string]any{"model": modelName, "max_output_tokens": 4, "instructions": system, "input": items}
	}
	send := func(path string, body map[string]any) (int, int) {
		t.Helper()
		before := f.engineCounters(t)
		r, err := f.post(path, body, nil)
		if err != nil {
			t.Fatal(err)
		}
		var u struct {
			Usage struct {
				CacheRead          int `json:"cache_read_input_tokens"`
				InputTokensDetails struct {
					Cached int `json:"cached_tokens"`
				} `json:"input_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(r.body, &u); err != nil {
			t.Fatalf("%s: %v: %s", path, err, r.body)
		}
		return servedBy(t, before, f.engineCounters(t)), u.Usage.CacheRead + u.Usage.InputTokensDetails.Cached
	}

	holder, _ := send("/v1/messages", messagesTurn())
	f.waitIndexed(t, f.admin, 16)
	followUps := []struct {
		path string
		body map[string]any
	}{
		{"/v1/responses", responsesTurn()},
		{"/v1/messages", messagesTurn(
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "text", "text": "Reading main.go."},
				map[string]any{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": map[string]any{"path": "main.go"}}}},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "id": "toolu_1", "tool_use_id": "toolu_1", "content": []any{map[string]any{"type": "text", "text": "package main\nfunc main() { undefined() }"}}},
				map[string]any{"type": "text", "text": "Fix it."}}})},
		{"/v1/responses", responsesTurn(
			map[string]any{"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": `{"path": "main.go"}`},
			map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "package main\nfunc main() { undefined() }"},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "Fix it."}}})},
	}
	for i, fu := range followUps {
		got, cached := send(fu.path, fu.body)
		if got != holder {
			t.Fatalf("follow-up %d (%s) went to engine %d; the conversation's prefix is on engine %d", i, fu.path, got, holder)
		}
		if cached < 16*blockSize {
			t.Errorf("follow-up %d (%s): %d cached tokens, want the shared system prompt's (>= %d)", i, fu.path, cached, 16*blockSize)
		}
	}
	// A Responses request that continues a stored response kvgate cannot
	// see is routed without a prefix key (to an engine, which answers for
	// its own store: the simulator keeps none, 404 as vLLM), and counted.
	r, _ := f.post("/v1/responses", map[string]any{"model": modelName, "max_output_tokens": 2, "previous_response_id": "resp_unseen", "input": "and then?"}, nil)
	if r.status != 404 || !strings.Contains(string(r.body), "resp_unseen") {
		t.Fatalf("previous_response_id request: %d %s, want the engine's 404 for its unknown response", r.status, r.body)
	}
	m, err := scrape("http://" + f.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if v := m[fmt.Sprintf("kvgate_extproc_untokenized_requests_total{reason=%q}", "unseen_input")]; v < 1 {
		t.Fatalf("kvgate_extproc_untokenized_requests_total{reason=\"unseen_input\"} = %v, want >= 1", v)
	}
}

// What kvgate answers itself follows the request's API through the real
// `kvgate extproc` process and the gateway (issue 29): a body over
// extproc.max_body_bytes (refused by the ext_proc server before any
// parsing) and a model no engine serves get Anthropic's error shape on
// /v1/messages, as vLLM's Messages route answers, and OpenAI's error
// object on /v1/responses.
func TestLocalRepliesTakeTheAPIsErrorShape(t *testing.T) {
	f := startFleet(t, fleetOptions{engines: 1, extproc: map[string]any{"max_body_bytes": 16384}})
	long := strings.Repeat("a long question ", 2048)
	for _, c := range []struct {
		path   string
		body   map[string]any
		status int
	}{
		{"/v1/messages", map[string]any{"model": modelName, "max_tokens": 4, "messages": []any{map[string]any{"role": "user", "content": long}}}, 413},
		{"/v1/responses", map[string]any{"model": modelName, "max_output_tokens": 4, "input": long}, 413},
		{"/v1/messages", map[string]any{"model": "no-such-model", "max_tokens": 4, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, 404},
		{"/v1/responses", map[string]any{"model": "no-such-model", "max_output_tokens": 4, "input": "hi"}, 404},
	} {
		r, _ := f.post(c.path, c.body, nil)
		var shape map[string]json.RawMessage
		if r.status != c.status || json.Unmarshal(r.body, &shape) != nil {
			t.Fatalf("%s: %d %s, want %d with a JSON error", c.path, r.status, r.body, c.status)
		}
		var inner map[string]json.RawMessage
		_ = json.Unmarshal(shape["error"], &inner)
		if c.path == "/v1/messages" {
			if string(shape["type"]) != `"error"` || len(shape) != 2 || len(inner) != 2 || inner["type"] == nil || inner["message"] == nil {
				t.Fatalf("%s %d: %s is not Anthropic's error shape", c.path, c.status, r.body)
			}
			continue
		}
		if len(shape) != 1 || inner["message"] == nil || inner["type"] == nil {
			t.Fatalf("%s %d: %s is not OpenAI's error object", c.path, c.status, r.body)
		}
	}
}
