package preprocess

import (
	"github.com/kvgate/kvgate/extproc/openai"
)

// The bodies kvgate sends to a vLLM engine's POST /tokenize, in the shapes
// of vLLM's TokenizeChatRequest and TokenizeCompletionRequest
// (vllm/entrypoints/serve/tokenize/protocol.py at
// 343bacafc7bf4f973a105e8e7d99fa7de61f7e18; the route is
// vllm/entrypoints/serve/tokenize/api_router.py at
// b91ee1b47c8e8462ada5e5b8d18244bc96a0ebbc). A chat body carries every
// input the chat completions route hands the template: the messages,
// tools, chat_template_kwargs, add_generation_prompt and
// continue_final_message (TokenizeChatRequest.build_chat_params merges
// the last two into the template kwargs as the chat route does), and
// leaves add_special_tokens at its default, false, as the chat route
// tokenizes. A completion body leaves add_special_tokens at its default,
// true, as the completions route tokenizes. Each is written from the
// parsed request, never the client's bytes, so only what routing needs
// leaves kvgate (no sampling fields, no client headers).

// tokenizeChatBody writes the /tokenize body of a chat request (or one
// converted from the Messages or Responses API) for served.
func tokenizeChatBody(served string, req *openai.ChatRequest) []byte {
	b := make([]byte, 0, len(req.Body)+256)
	b = append(b, `{"model":`...)
	b = appendString(b, served)
	b = append(b, `,"messages":[`...)
	for i, m := range req.Messages {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendMessage(b, m)
	}
	b = append(b, ']')
	if req.Tools != nil {
		b = append(b, `,"tools":[`...)
		for i, t := range req.Tools {
			if i > 0 {
				b = append(b, ',')
			}
			b = t.AppendJSON(b)
		}
		b = append(b, ']')
	}
	if req.ChatTemplateKwargs != nil {
		b = append(b, `,"chat_template_kwargs":`...)
		b = openai.Value{Kind: openai.KindObject, Members: req.ChatTemplateKwargs}.AppendJSON(b)
	}
	b = append(b, `,"add_generation_prompt":`...)
	b = appendBool(b, req.AddGenerationPrompt)
	b = append(b, `,"continue_final_message":`...)
	b = appendBool(b, req.ContinueFinalMessage)
	return append(b, '}')
}

// appendMessage writes one chat message as vLLM's
// ChatCompletionMessageParam reads it.
func appendMessage(b []byte, m openai.Message) []byte {
	b = append(b, `{"role":`...)
	b = appendString(b, m.Role)
	b = append(b, `,"content":`...)
	if m.Content.IsParts {
		b = append(b, '[')
		n := 0
		for _, p := range m.Content.Parts {
			switch {
			case p.IsText() && p.HasText:
				if n > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"type":`...)
				b = appendString(b, p.Type)
				b = append(b, `,"text":`...)
				b = appendString(b, p.Text)
				b = append(b, '}')
			case p.IsText():
				// A text part whose text is null: vLLM skips it
				// (chat_utils._parse_chat_message_content_parts).
				continue
			default:
				// Media and unknown parts as the client sent them: the
				// engine resolves their placeholders.
				if n > 0 {
					b = append(b, ',')
				}
				b = p.Raw.AppendJSON(b)
			}
			n++
		}
		b = append(b, ']')
	} else {
		b = appendString(b, m.Content.Text)
	}
	if m.Name != nil {
		b = append(b, `,"name":`...)
		b = appendString(b, *m.Name)
	}
	if m.ToolCallID != nil {
		b = append(b, `,"tool_call_id":`...)
		b = appendString(b, *m.ToolCallID)
	}
	if m.Reasoning != nil {
		b = append(b, `,"reasoning":`...)
		b = appendString(b, *m.Reasoning)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, tc := range m.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendString(b, tc.ID)
			b = append(b, `,"type":`...)
			b = appendString(b, tc.Type)
			b = append(b, `,"function":{"name":`...)
			b = appendString(b, tc.Name)
			// vLLM parses arguments, a JSON string, back into the value
			// the template reads (chat_utils._postprocess_messages); the
			// parsed value written compactly parses to the same one.
			b = append(b, `,"arguments":`...)
			b = appendString(b, string(tc.Arguments.AppendJSON(nil)))
			b = append(b, `}}`...)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// tokenizeCompletionBody writes the /tokenize body of a completions
// prompt given as text.
func tokenizeCompletionBody(served, prompt string) []byte {
	b := make([]byte, 0, len(prompt)+64)
	b = append(b, `{"model":`...)
	b = appendString(b, served)
	b = append(b, `,"prompt":`...)
	b = appendString(b, prompt)
	return append(b, '}')
}

func appendString(b []byte, s string) []byte {
	return openai.Value{Kind: openai.KindString, Text: s}.AppendJSON(b)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}
