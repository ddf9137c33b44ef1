package openai

import "strings"

// ParseResponses parses an OpenAI Responses (/v1/responses) body and
// converts it to the chat request vLLM renders for it (the non-Harmony
// path), so that one routing path serves both APIs. Sources, vLLM:
// vllm/entrypoints/openai/responses/utils.py construct_input_messages,
// construct_chat_messages_with_tool_call,
// _construct_single_message_from_response_item, construct_tool_dicts and
// should_continue_final_message at commit
// d0ac57910c16de107f5758d0e530b638d8b0f91b; the request model
// ResponsesRequest in responses/protocol.py at commit
// c0bc59655a4068c08621bcac8ab67b39cd2ec173; serving.py _make_request at
// 4d89a999c51e191a959a49e44cf7d6697f96cf6a:
//
//   - instructions, when not empty, become the first (system) message.
//   - previous_response_id: vLLM inserts the stored conversation of that
//     response after the instructions. kvgate cannot see it, so the
//     request is flagged Approximate (routed without a prefix key) rather
//     than keyed on a prompt the engine will not see.
//   - input: a string is one user message. A list is read item by item:
//     function_call → an assistant message with one tool call (id =
//     call_id), merged into the previous assistant message when that has
//     reasoning and the item's id starts with "mcp_" (MCP calls);
//     function_call_output → a tool message (content = output,
//     tool_call_id = call_id); reasoning → an assistant message whose
//     reasoning is its one summary text, else its one content text, else ""
//     (encrypted_content is refused as vLLM refuses it); any other item is a
//     chat message as sent (role, content: a string or input_text /
//     output_text / media parts).
//   - continue_final_message when the last item is a message or reasoning
//     item whose status is in_progress or incomplete; add_generation_prompt
//     is its opposite.
//   - tools are handed to the template as {"type": "function", "function":
//     the tool as the openai library dumps it}, none when tool_choice is
//     "none"; reasoning.effort becomes the reasoning_effort template
//     variable.
//   - prompt is refused ("prompt template is not supported"), background
//     with store false is refused, as ResponsesRequest's validators do.
func ParseResponses(body []byte, lim Limits) (*ChatRequest, error) {
	r, err := parseResponsesRequest(body, lim)
	if err != nil {
		return nil, finish(err)
	}
	return r, nil
}

// mcpCallPrefix starts the ids of MCP calls (vLLM's MCP_PREFIX).
const mcpCallPrefix = "mcp_"

func parseResponsesRequest(body []byte, lim Limits) (*ChatRequest, *Error) {
	lim = lim.withDefaults()
	s, serr := openBody(body, lim, "model and input")
	if serr != nil {
		return nil, serr
	}
	r := &ChatRequest{Body: body}
	var common requestFields
	var input, tools, toolChoice, reasoning, prompt Value
	var instructions, previous *string
	var maxTokens *int64
	background, store := false, true
	haveInput := false
	err := s.object(func(key string) *Error {
		if handled, err := common.read(s, key); handled {
			return at(key, err)
		}
		var err *Error
		switch key {
		case "input":
			haveInput = true
			input, err = s.value()
		case "instructions":
			instructions, err = optionalStringPtr(s)
		case "previous_response_id":
			previous, err = optionalStringPtr(s)
		case "max_output_tokens":
			maxTokens, err = optionalInt(s)
		case "tools":
			tools, err = s.value()
		case "tool_choice":
			toolChoice, err = s.value()
		case "reasoning":
			reasoning, err = s.value()
		case "prompt":
			prompt, err = s.value()
		case "background":
			background, _, err = laxBool(s, true, false)
		case "store":
			store, _, err = laxBool(s, true, true)
		default:
			err = s.skip()
		}
		return at(key, err)
	})
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return nil, err
	}
	r.Model, r.Stream, r.CacheSalt = common.Model, common.Stream, common.CacheSalt
	switch {
	case prompt.Kind != KindNull:
		return nil, invalid("prompt", "prompt template is not supported")
	case background && !store:
		return nil, invalid("background", "background can only be used when `store` is true")
	case !haveInput || (input.Kind != KindString && input.Kind != KindArray):
		return nil, at("input", invalid("", "required: a string or an array of input items"))
	}
	if err := checkMaxTokens("max_output_tokens", maxTokens, lim); err != nil {
		return nil, err
	}
	if maxTokens != nil {
		r.MaxTokens, r.HasMaxTokens = *maxTokens, true
	}
	if instructions != nil && *instructions != "" {
		r.Messages = append(r.Messages, Message{Role: "system", Content: Content{Text: *instructions}})
	}
	if previous != nil {
		r.Approximate, r.ApproximateReason = "previous_response_id: the engine prepends a stored conversation kvgate cannot see", ReasonUnseenInput
	}
	continueFinal := false
	if input.Kind == KindString {
		r.Messages = append(r.Messages, Message{Role: "user", Content: Content{Text: input.Text}})
	} else {
		if len(input.Items) > lim.MaxMessages {
			return nil, at("input", tooLarge("", "more than %d input items", lim.MaxMessages))
		}
		for i, it := range input.Items {
			var err *Error
			if r.Messages, err = appendResponseItem(r.Messages, it); err != nil {
				return nil, at("input", at(index(i), err))
			}
		}
		continueFinal = partialLastItem(input.Items)
	}
	if len(r.Messages) == 0 {
		return nil, at("input", invalid("", "must contain at least one item"))
	}
	r.ContinueFinalMessage, r.AddGenerationPrompt = continueFinal, !continueFinal
	var terr *Error
	if r.Tools, terr = responsesTools(tools, toolChoice); terr != nil {
		return nil, at("tools", terr)
	}
	r.ToolsDumped, r.ToolChoice = true, toolChoice
	if effort, ok := reasoning.Get("effort"); ok && effort.Kind == KindString {
		r.ChatTemplateKwargs = []Member{{Key: "reasoning_effort", Value: effort}}
	}
	return r, nil
}

// appendResponseItem converts one input item.
func appendResponseItem(msgs []Message, it Value) ([]Message, *Error) {
	if it.Kind != KindObject {
		return nil, invalid("", "expected an input item object, got %s", it.Kind)
	}
	typ, _ := it.Get("type")
	switch typ.Text {
	case "function_call":
		callID, name, args, id := stringMember(it, "call_id"), stringMember(it, "name"), stringMember(it, "arguments"), stringMember(it, "id")
		if callID == nil || name == nil || args == nil {
			return nil, invalid("", "a function_call needs call_id, name and arguments as strings")
		}
		tc := ToolCall{ID: *callID, Type: "function", Name: *name, Arguments: decodeArguments(Value{Kind: KindString, Text: *args})}
		if id != nil && strings.HasPrefix(*id, mcpCallPrefix) && len(msgs) > 0 {
			if last := &msgs[len(msgs)-1]; last.Role == "assistant" && last.Reasoning != nil {
				last.ToolCalls = []ToolCall{tc}
				return msgs, nil
			}
		}
		return append(msgs, Message{Role: "assistant", ToolCalls: []ToolCall{tc}}), nil
	case "function_call_output":
		callID := stringMember(it, "call_id")
		output, _ := it.Get("output")
		content, err := contentOf(output)
		if err != nil {
			return nil, at("output", err)
		}
		return append(msgs, Message{Role: "tool", ToolCallID: callID, Content: content}), nil
	case "reasoning":
		if enc, _ := it.Get("encrypted_content"); enc.Kind == KindString && enc.Text != "" {
			return nil, invalid("encrypted_content", "Encrypted content is not supported.")
		}
		text := ""
		summary, _ := it.Get("summary")
		content, _ := it.Get("content")
		if len(summary.Items) == 1 {
			t, _ := summary.Items[0].Get("text")
			text = t.Text
		} else if len(content.Items) == 1 {
			t, _ := content.Items[0].Get("text")
			text = t.Text
		}
		return append(msgs, Message{Role: "assistant", Reasoning: &text}), nil
	}
	role := stringMember(it, "role")
	if role == nil {
		return nil, at("role", invalid("", "required: an input item needs a type kvgate knows or a role"))
	}
	content, _ := it.Get("content")
	c, err := contentOf(content)
	if err != nil {
		return nil, at("content", err)
	}
	return append(msgs, Message{Role: *role, Content: c, Name: stringMember(it, "name")}), nil
}

// partialLastItem is vLLM's should_continue_final_message for a list.
func partialLastItem(items []Value) bool {
	if len(items) == 0 {
		return false
	}
	last := items[len(items)-1]
	typ, ok := last.Get("type")
	if ok && typ.Kind == KindString && typ.Text != "message" && typ.Text != "reasoning" {
		return false
	}
	status := stringMember(last, "status")
	return status != nil && (*status == "in_progress" || *status == "incomplete")
}

// contentOf reads a message's content from a kept value: a string, null,
// or an array of parts as parseContentPart takes them.
func contentOf(v Value) (Content, *Error) {
	switch v.Kind {
	case KindNull:
		return Content{}, nil
	case KindString:
		return Content{Text: v.Text}, nil
	case KindArray:
	default:
		return Content{}, invalid("", "expected a string, an array of content parts or null, got %s", v.Kind)
	}
	c := Content{IsParts: true, Parts: make([]ContentPart, 0, len(v.Items))}
	for i, p := range v.Items {
		part, err := contentPartOf(p)
		if err != nil {
			return c, at(index(i), err)
		}
		c.Parts = append(c.Parts, part)
	}
	return c, nil
}

func contentPartOf(v Value) (ContentPart, *Error) {
	if v.Kind == KindString {
		return ContentPart{Type: "text", Text: v.Text, HasText: true}, nil
	}
	if v.Kind != KindObject {
		return ContentPart{}, invalid("", "expected a content part object, got %s", v.Kind)
	}
	typ := stringMember(v, "type")
	if typ == nil {
		return ContentPart{}, invalid("", "content part has no type")
	}
	p := ContentPart{Type: *typ}
	if field := textPartField(p.Type); field != "" {
		if t := stringMember(v, field); t != nil {
			p.Text, p.HasText = *t, true
		}
		return p, nil
	}
	if !mediaPartTypes[p.Type] {
		return p, invalid("", "unknown content part type %q", p.Type)
	}
	p.Raw = v
	return p, nil
}

// stringMember is key's value when it is a string, else nil.
func stringMember(v Value, key string) *string {
	m, ok := v.Get(key)
	if !ok || m.Kind != KindString {
		return nil
	}
	return &m.Text
}

// responsesTools is construct_tool_dicts: each tool as the openai library's
// model_dump writes it, wrapped as {"type": "function", "function": …};
// none when tool_choice is "none". A function tool's dump lists FunctionTool's
// declared fields in order (name, parameters, strict, type, description;
// null when absent), then the extra members.
func responsesTools(tools, toolChoice Value) ([]Value, *Error) {
	if toolChoice.Kind == KindString && toolChoice.Text == "none" {
		return nil, nil
	}
	switch tools.Kind {
	case KindNull:
		return []Value{}, nil
	case KindArray:
	default:
		return nil, invalid("", "expected an array of tools, got %s", tools.Kind)
	}
	out := make([]Value, 0, len(tools.Items))
	for i, t := range tools.Items {
		if t.Kind != KindObject {
			return nil, at(index(i), invalid("", "expected a tool object, got %s", t.Kind))
		}
		dumped := t
		if typ := stringMember(t, "type"); typ != nil && *typ == "function" {
			if stringMember(t, "name") == nil {
				return nil, at(index(i), at("name", invalid("", "required: a string")))
			}
			declared := []string{"name", "parameters", "strict", "type", "description"}
			members := make([]Member, 0, len(t.Members)+len(declared))
			for _, k := range declared {
				v, _ := t.Get(k)
				members = append(members, Member{Key: k, Value: v})
			}
			for _, m := range t.Members {
				if !isOneOf(m.Key, declared) {
					members = append(members, m)
				}
			}
			dumped = Value{Kind: KindObject, Members: members}
		}
		out = append(out, Value{Kind: KindObject, Members: []Member{
			{Key: "type", Value: Value{Kind: KindString, Text: "function"}},
			{Key: "function", Value: dumped},
		}})
	}
	return out, nil
}

func isOneOf(s string, set []string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}
