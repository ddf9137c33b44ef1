package preprocess

import (
	"context"
	"slices"
	"testing"
)

// A Messages or Responses request renders to exactly the prompt of the chat
// request vLLM converts it to (written here by hand from the conversion
// rules in extproc/openai's fixtures), for both test models: same prompt,
// same token ids, same block hashes. The chat path itself is held to
// Python jinja2 and Hugging Face by TestChatMatchesOracles.
func TestAgentAPIsRenderAsTheirChatConversion(t *testing.T) {
	r := newRegistry(t)
	for _, model := range []string{"qwen3", "llama3_1"} {
		for _, c := range []struct {
			name, chat string
			render     func(context.Context, []byte) (*Result, error)
			body       string
		}{
			{
				name:   "messages",
				render: r.MessagesContext,
				body: `{"model":"` + model + `","max_tokens":8,"system":[{"type":"text","text":"You are a coding agent. "},{"type":"text","text":"Be terse."}],
					"tools":[{"name":"read_file","description":"Read a file","input_schema":{"properties":{"path":{"type":"string"}}}}],
					"messages":[{"role":"user","content":"Open main.go"},
					{"role":"assistant","content":[{"type":"text","text":"Reading it."},{"type":"tool_use","id":"call_1","name":"read_file","input":{"path":"main.go"}}]},
					{"role":"user","content":[{"type":"tool_result","id":"call_1","content":"package main"},{"type":"text","text":"Now fix it."}]}]}`,
				chat: `{"model":"` + model + `","max_tokens":8,
					"tools":[{"type":"function","function":{"name":"read_file","description":"Read a file","parameters":{"properties":{"path":{"type":"string"}},"type":"object"}}}],
					"messages":[{"role":"system","content":"You are a coding agent. Be terse."},{"role":"user","content":"Open main.go"},
					{"role":"assistant","content":"Reading it.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\": \"main.go\"}"}}]},
					{"role":"tool","tool_call_id":"call_1","content":"package main"},{"role":"user","content":"Now fix it."}]}`,
			},
			{
				name:   "responses",
				render: r.ResponsesContext,
				body: `{"model":"` + model + `","instructions":"You are a coding agent.","input":[
					{"type":"message","role":"user","content":[{"type":"input_text","text":"Open main.go"}]},
					{"type":"function_call","call_id":"call_1","name":"read_file","arguments":"{\"path\": \"main.go\"}"},
					{"type":"function_call_output","call_id":"call_1","output":"package main"}]}`,
				chat: `{"model":"` + model + `","tools":[],"messages":[{"role":"system","content":"You are a coding agent."},
					{"role":"user","content":[{"type":"input_text","text":"Open main.go"}]},
					{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\": \"main.go\"}"}}]},
					{"role":"tool","tool_call_id":"call_1","content":"package main"}]}`,
			},
		} {
			t.Run(model+"/"+c.name, func(t *testing.T) {
				got, err := c.render(context.Background(), []byte(c.body))
				if err != nil {
					t.Fatal(err)
				}
				want, err := r.Chat([]byte(c.chat))
				if err != nil {
					t.Fatal(err)
				}
				if got.Approximate != "" || got.Prompt != want.Prompt {
					t.Fatalf("prompt (approximate %q)\n got %q\nwant %q", got.Approximate, got.Prompt, want.Prompt)
				}
				if len(got.Tokens) == 0 || !slices.Equal(got.Tokens, want.Tokens) || !slices.Equal(got.Sequence, want.Sequence) {
					t.Fatalf("tokens or hashes differ from the chat conversion's")
				}
			})
		}
	}
}
