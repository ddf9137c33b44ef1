package openai

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

func mustParseChat(t *testing.T, body string) *ChatRequest {
	t.Helper()
	r, err := ParseChat([]byte(body), Limits{})
	if err != nil {
		t.Fatalf("ParseChat: %v", err)
	}
	return r
}

func TestParseChatFields(t *testing.T) {
	body := `{
	  "model": "qwen3-lora-a", "stream": true, "max_tokens": 10, "max_completion_tokens": 20,
	  "temperature": 0.7, "unknown_field": {"kept": [1, 2]},
	  "messages": [
	    {"role": "system", "content": "be brief"},
	    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "http://x"}}, "b"], "name": "ann"},
	    {"role": "assistant", "content": null, "reasoning_content": "think",
	     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": {\"é\": [true, null]}}"}}]},
	    {"role": "tool", "tool_call_id": "c1", "content": "42"}
	  ],
	  "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}}],
	  "chat_template_kwargs": {"enable_thinking": false, "b": 1},
	  "add_generation_prompt": false,
	  "documents": [{"title": "t", "text": "x"}]
	}`
	r := mustParseChat(t, body)
	if r.Model != "qwen3-lora-a" || !r.Stream {
		t.Errorf("model/stream = %q/%v", r.Model, r.Stream)
	}
	if !r.HasMaxTokens || r.MaxTokens != 20 {
		t.Errorf("max tokens = %v/%d, want max_completion_tokens 20", r.HasMaxTokens, r.MaxTokens)
	}
	if r.AddGenerationPrompt || r.ContinueFinalMessage {
		t.Errorf("add_generation_prompt/continue = %v/%v", r.AddGenerationPrompt, r.ContinueFinalMessage)
	}
	if string(r.Body) != body {
		t.Errorf("Body not kept verbatim")
	}
	if len(r.Messages) != 4 {
		t.Fatalf("messages = %d", len(r.Messages))
	}
	m0, m1, m2, m3 := r.Messages[0], r.Messages[1], r.Messages[2], r.Messages[3]
	if m0.Role != "system" || m0.Content.IsParts || m0.Content.Text != "be brief" {
		t.Errorf("m0 = %+v", m0)
	}
	if !m1.Content.IsParts || len(m1.Content.Parts) != 3 || m1.Name == nil || *m1.Name != "ann" {
		t.Fatalf("m1 = %+v", m1)
	}
	p := m1.Content.Parts
	if p[0].Type != "text" || p[0].Text != "a" || !p[0].HasText || !p[0].IsText() {
		t.Errorf("part0 = %+v", p[0])
	}
	if p[1].Type != "image_url" || p[1].IsText() || string(p[1].Raw.AppendJSON(nil)) != `{"type":"image_url","image_url":{"url":"http://x"}}` {
		t.Errorf("part1 = %+v", p[1])
	}
	if p[2].Type != "text" || p[2].Text != "b" {
		t.Errorf("part2 = %+v", p[2])
	}
	if m2.Content.IsParts || m2.Content.Text != "" || m2.Reasoning == nil || *m2.Reasoning != "think" {
		t.Errorf("m2 = %+v", m2)
	}
	if len(m2.ToolCalls) != 1 {
		t.Fatalf("tool calls = %+v", m2.ToolCalls)
	}
	tc := m2.ToolCalls[0]
	if tc.ID != "c1" || tc.Type != "function" || tc.Name != "f" {
		t.Errorf("tool call = %+v", tc)
	}
	if got := string(tc.Arguments.AppendJSON(nil)); got != `{"z":1,"a":{"é":[true,null]}}` {
		t.Errorf("arguments = %s (order or content lost)", got)
	}
	if m3.ToolCallID == nil || *m3.ToolCallID != "c1" || m3.Content.Text != "42" {
		t.Errorf("m3 = %+v", m3)
	}
	if len(r.Tools) != 1 || string(r.Tools[0].AppendJSON(nil)) != `{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"z":{},"a":{}}}}}` {
		t.Errorf("tools = %+v", r.Tools)
	}
	if len(r.ChatTemplateKwargs) != 2 || r.ChatTemplateKwargs[0].Key != "enable_thinking" || r.ChatTemplateKwargs[0].Value.Kind != KindBool || r.ChatTemplateKwargs[0].Value.Bool || r.ChatTemplateKwargs[1].Key != "b" {
		t.Errorf("kwargs = %+v", r.ChatTemplateKwargs)
	}
	if len(r.Documents) != 1 {
		t.Errorf("documents = %+v", r.Documents)
	}
}

func TestParseChatDefaults(t *testing.T) {
	r := mustParseChat(t, `{"messages":[{"role":"user","content":"hi"}]}`)
	if !r.AddGenerationPrompt || r.Stream || r.HasMaxTokens || r.Tools != nil || r.ChatTemplateKwargs != nil {
		t.Errorf("defaults = %+v", r)
	}
	r = mustParseChat(t, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":7,"tools":null,"stream":null}`)
	if !r.HasMaxTokens || r.MaxTokens != 7 || r.Tools != nil {
		t.Errorf("max_tokens fallback = %+v", r)
	}
}

func TestParseChatArgumentsLikeVLLM(t *testing.T) {
	// vLLM's _postprocess_messages: unparsable or missing arguments become {}.
	for _, args := range []string{`"not json"`, `""`, `null`, `7`} {
		body := `{"messages":[{"role":"assistant","tool_calls":[{"id":"x","type":"function","function":{"name":"f","arguments":` + args + `}}]}]}`
		r := mustParseChat(t, body)
		if got := string(r.Messages[0].ToolCalls[0].Arguments.AppendJSON(nil)); got != `{}` {
			t.Errorf("arguments %s -> %s, want {}", args, got)
		}
	}
	r := mustParseChat(t, `{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"b":2,"a":1}}}]}]}`)
	if got := string(r.Messages[0].ToolCalls[0].Arguments.AppendJSON(nil)); got != `{"b":2,"a":1}` {
		t.Errorf("object arguments -> %s", got)
	}
}

func TestParseChatReasoningAlias(t *testing.T) {
	r := mustParseChat(t, `{"messages":[{"role":"assistant","content":"x","reasoning":"new","reasoning_content":"old"}]}`)
	if *r.Messages[0].Reasoning != "new" {
		t.Errorf("reasoning = %q, want the newer field to win", *r.Messages[0].Reasoning)
	}
}

func TestParseChatErrors(t *testing.T) {
	long := strings.Repeat("a", 100)
	tooLong := `{"messages":[{"role":"user","content":"` + long + `"}]}`
	// Byte offsets are located in the input text itself.
	off := func(body, sub string) string { return strconv.Itoa(strings.Index(body, sub)) }
	const contentAt = `{"messages":[{"role":"user","content":"`
	cases := []struct {
		name, body string
		lim        Limits
		status     int
		message    string
	}{
		{"not object", `[1]`, Limits{}, 400, "request body must be a JSON object"},
		{"empty", ``, Limits{}, 400, "request body is empty: want a JSON object with model and messages"},
		{"max_tokens int64 max", `{"max_tokens":9223372036854775807,"messages":[{"role":"user","content":"x"}]}`, Limits{}, 400, "max_tokens: 9223372036854775807 is more than the 67108864 tokens kvgate accepts"},
		{"max_completion_tokens over", `{"max_completion_tokens":67108865,"messages":[{"role":"user","content":"x"}]}`, Limits{}, 400, "max_completion_tokens: 67108865 is more than the 67108864 tokens kvgate accepts"},
		{"max_tokens over int64", `{"max_tokens":9223372036854775808,"messages":[{"role":"user","content":"x"}]}`, Limits{}, 400, "max_tokens: 9223372036854775807 is more than the 67108864 tokens kvgate accepts"},
		{"chat_template number", `{"chat_template":1,"messages":[{"role":"user","content":"x"}]}`, Limits{}, 400, "chat_template: expected a string, got number"},
		{"no messages", `{"model":"m"}`, Limits{}, 400, "messages: required"},
		{"empty messages", `{"messages":[]}`, Limits{}, 400, "messages: must contain at least one message"},
		{"unknown part", `{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"},{"role":"user","content":[{"type":"text","text":"x"},{"type":"foo"}]}]}`, Limits{}, 400, `messages[3].content[1]: unknown content part type "foo"`},
		{"part without type", `{"messages":[{"role":"user","content":[{"text":"x"}]}]}`, Limits{}, 400, `messages[0].content[0]: content part has no type`},
		{"role missing", `{"messages":[{"content":"x"}]}`, Limits{}, 400, "messages[0].role: required"},
		{"role number", `{"messages":[{"role":1}]}`, Limits{}, 400, "messages[0].role: expected a string, got number"},
		{"content number", `{"messages":[{"role":"user","content":5}]}`, Limits{}, 400, "messages[0].content: expected a string, an array of content parts or null, got number"},
		{"stream string", `{"stream":"maybe","messages":[{"role":"user","content":"x"}]}`, Limits{}, 400, "stream: Input should be a valid boolean, unable to interpret input"},
		{"max_tokens float", `{"max_tokens":1.5,"messages":[{"role":"user","content":"x"}]}`, Limits{}, 400, "max_tokens: Input should be a valid integer, got a number with a fractional part"},
		{"max_tokens negative", `{"max_tokens":-1,"messages":[{"role":"user","content":"x"}]}`, Limits{}, 400, "max_tokens: must not be negative, got -1"},
		{"tools not objects", `{"tools":[1],"messages":[{"role":"user","content":"x"}]}`, Limits{}, 400, "tools[0]: expected an object, got number"},
		{"kwargs array", `{"chat_template_kwargs":[],"messages":[{"role":"user","content":"x"}]}`, Limits{}, 400, "chat_template_kwargs: expected an object, got array"},
		{"both prompts", `{"continue_final_message":true,"messages":[{"role":"user","content":"x"}]}`, Limits{}, 400, "cannot set both continue_final_message and add_generation_prompt to true"},
		{"tool call function missing", `{"messages":[{"role":"assistant","tool_calls":[{"id":"x"}]}]}`, Limits{}, 400, "messages[0].tool_calls[0].function: required object"},
		{"trailing data", `{"messages":[{"role":"user","content":"x"}]} @`, Limits{}, 400, "invalid JSON at byte " + off(`{"messages":[{"role":"user","content":"x"}]} @`, "@") + ": unexpected data after the top-level value"},
		{"bad escape", `{"messages":[{"role":"user","content":"\q"}]}`, Limits{}, 400, `messages[0].content: invalid JSON at byte ` + strconv.Itoa(len(contentAt)) + `: invalid escape '\q'`},
		{"lone surrogate", `{"messages":[{"role":"user","content":"\ud800"}]}`, Limits{}, 400, "messages[0].content: invalid JSON at byte " + strconv.Itoa(len(contentAt)) + ": unpaired surrogate escape"},
		{"invalid utf8", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", Limits{}, 400, "messages[0].content: invalid JSON at byte " + strconv.Itoa(len(contentAt)) + ": invalid UTF-8 in string"},
		{"invalid utf8 skipped field", "{\"x\":\"\xc3\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", Limits{}, 400, "x: invalid JSON at byte 6: invalid UTF-8 in string"},
		{"truncated", `{"messages":[{"role":"user","content":"x"`, Limits{}, 400, "messages[0]: invalid JSON at byte " + strconv.Itoa(len(`{"messages":[{"role":"user","content":"x"`)) + ": expected ',' or '}' in object"},
		{"body too large", tooLong, Limits{MaxBodyBytes: 64}, 413, "request body of " + strconv.Itoa(len(tooLong)) + " bytes exceeds the 64-byte limit"},
		{"string too long", tooLong, Limits{MaxStringBytes: 50}, 413, "messages[0].content: string longer than 50 bytes"},
		{"too many messages", `{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, Limits{MaxMessages: 1}, 413, "messages: more than 1 messages"},
		{"too deep", `{"x":[[[[1]]]],"messages":[{"role":"user","content":"a"}]}`, Limits{MaxDepth: 4}, 400, "x: invalid JSON at byte " + off(`{"x":[[[[1]]]]`, "[1") + ": nesting deeper than 4"},
		{"too many kept values", `{"tools":[{"a":[1,2,3,4,5]}],"messages":[{"role":"user","content":"a"}]}`, Limits{MaxKeptValues: 4}, 413, "tools[0]: more than 4 JSON values in kept fields"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseChat([]byte(c.body), c.lim)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not *Error", err, err)
			}
			if e.Status != c.status || e.Message != c.message {
				t.Errorf("got %d %q\nwant %d %q", e.Status, e.Message, c.status, c.message)
			}
		})
	}
}

func TestParseChatBoundsMaxTokens(t *testing.T) {
	for _, c := range []struct {
		body string
		want int64
	}{
		{`{"max_tokens":67108864,"messages":[{"role":"user","content":"x"}]}`, 1 << 26},
		{`{"max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, 0},
	} {
		r, err := ParseChat([]byte(c.body), Limits{})
		if err != nil || r.MaxTokens != c.want || !r.HasMaxTokens {
			t.Errorf("%s: %+v, %v", c.body, r, err)
		}
	}
	if _, err := ParseChat([]byte(`{"max_tokens":11,"messages":[{"role":"user","content":"x"}]}`), Limits{MaxOutputTokens: 10}); err == nil || err.(*Error).Param != "max_tokens" {
		t.Errorf("configured bound: err %v, want 400 on param max_tokens", err)
	}
}

// vLLM refuses a request that brings its own template when chat_template
// or chat_template_kwargs.chat_template "is not None": an empty string
// counts, null does not.
func TestChatRequestTemplate(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"messages":[{"role":"user","content":"x"}]}`, ""},
		{`{"chat_template":null,"messages":[{"role":"user","content":"x"}]}`, ""},
		{`{"chat_template":"","messages":[{"role":"user","content":"x"}]}`, "chat_template"},
		{`{"chat_template":"{{ messages }}","messages":[{"role":"user","content":"x"}]}`, "chat_template"},
		{`{"chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"x"}]}`, ""},
		{`{"chat_template_kwargs":{"chat_template":null},"messages":[{"role":"user","content":"x"}]}`, ""},
		{`{"chat_template_kwargs":{"chat_template":"x"},"messages":[{"role":"user","content":"x"}]}`, "chat_template_kwargs.chat_template"},
	} {
		r, err := ParseChat([]byte(c.body), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		if got := r.RequestTemplate(); got != c.want {
			t.Errorf("%s: RequestTemplate() = %q, want %q", c.body, got, c.want)
		}
	}
}

func TestErrorJSON(t *testing.T) {
	e := &Error{Status: http.StatusBadRequest, Message: `messages[0]: bad "x" é`, Type: "invalid_request_error", Param: "messages[0]"}
	want := `{"error":{"message":"messages[0]: bad \"x\" é","type":"invalid_request_error","param":"messages[0]","code":null}}`
	if got := string(e.JSON()); got != want {
		t.Errorf("JSON() = %s\nwant %s", got, want)
	}
	// The shape must decode with a standard JSON reader into OpenAI's fields.
	var decoded struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	e2 := &Error{Message: "ctl \x01\n\xff", Type: "invalid_request_error", Code: "request_too_large"}
	if err := json.Unmarshal(e2.JSON(), &decoded); err != nil {
		t.Fatalf("JSON() not valid JSON: %v: %s", err, e2.JSON())
	}
	if decoded.Error.Message != "ctl \x01\n\uFFFD" || decoded.Error.Param != nil || decoded.Error.Code == nil || *decoded.Error.Code != "request_too_large" {
		t.Errorf("decoded = %+v", decoded.Error)
	}
}
