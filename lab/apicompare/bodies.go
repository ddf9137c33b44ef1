package apicompare

import (
	"encoding/json"
)

// Body is r's request body in api's shape, non-streamed, asking for
// maxTokens output tokens. The three carry the same conversation, in the
// forms vLLM converts to the same chat messages:
//
//   - Chat: system message, user task, then per step an assistant message
//     with one tool call and a tool message with its result; tools as
//     {"type": "function", "function": {name, description, parameters}}.
//   - Messages: system as the top-level member; per step an assistant
//     tool_use block (input: the arguments object) and a user tool_result
//     block (vLLM reads the block's "id" for the tool message's
//     tool_call_id, so both id and tool_use_id are sent: kvgate's
//     extproc/openai/messages.go, from vllm/entrypoints/anthropic/serving.py);
//     tools as {name, description, input_schema}.
//   - Responses: instructions, then input items: the user message, and per
//     step a function_call and a function_call_output item; tools as
//     {"type": "function", name, description, parameters}.
func Body(api API, r Request, model string, maxTokens int) []byte {
	c := r.Conv
	steps := c.Steps[:r.Steps]
	var body map[string]any
	switch api {
	case Messages:
		msgs := []any{map[string]any{"role": "user", "content": c.Task}}
		for _, s := range steps {
			var input map[string]any
			_ = json.Unmarshal([]byte(s.Arguments()), &input)
			msgs = append(msgs,
				map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": s.CallID, "name": s.Name, "input": input}}},
				map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "id": s.CallID, "tool_use_id": s.CallID, "content": s.Result}}})
		}
		tools := make([]any, len(c.Tools))
		for i, t := range c.Tools {
			tools[i] = anthropicTool{Name: t.Name, Description: t.Description, InputSchema: t.Parameters}
		}
		body = map[string]any{"model": model, "max_tokens": maxTokens, "system": c.System, "messages": msgs, "tools": tools}
	case Responses:
		items := []any{map[string]any{"role": "user", "content": c.Task}}
		for _, s := range steps {
			items = append(items,
				map[string]any{"type": "function_call", "call_id": s.CallID, "name": s.Name, "arguments": s.Arguments()},
				map[string]any{"type": "function_call_output", "call_id": s.CallID, "output": s.Result})
		}
		tools := make([]any, len(c.Tools))
		for i, t := range c.Tools {
			tools[i] = map[string]any{"type": "function", "name": t.Name, "description": t.Description, "parameters": t.Parameters}
		}
		body = map[string]any{"model": model, "max_output_tokens": maxTokens, "instructions": c.System, "input": items, "tools": tools}
	default:
		msgs := []any{map[string]any{"role": "system", "content": c.System}, map[string]any{"role": "user", "content": c.Task}}
		for _, s := range steps {
			msgs = append(msgs,
				map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": s.CallID, "type": "function",
					"function": map[string]any{"name": s.Name, "arguments": s.Arguments()}}}},
				map[string]any{"role": "tool", "tool_call_id": s.CallID, "content": s.Result})
		}
		tools := make([]any, len(c.Tools))
		for i, t := range c.Tools {
			tools[i] = chatTool{Type: "function", Function: chatFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}}
		}
		body = map[string]any{"model": model, "max_tokens": maxTokens, "messages": msgs, "tools": tools}
	}
	if len(c.Tools) == 0 {
		delete(body, "tools")
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic("apicompare: marshal a body of strings and maps: " + err.Error())
	}
	return b
}

// The tools are written with their members in the order vLLM builds them
// for the template (a chat template's tojson keeps a dict's order): a
// chat tool {"type", "function": {"name", "description", "parameters"}}.
type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
}

type anthropicTool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"input_schema"`
}
