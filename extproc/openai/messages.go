package openai

// ParseMessages parses an Anthropic Messages (/v1/messages) body and
// converts it to the chat request vLLM converts it to before rendering it
// through the model's chat template, so that one routing path serves both
// APIs. The conversion is vLLM's
// AnthropicServingMessages._convert_anthropic_to_openai_request
// (vllm/entrypoints/anthropic/serving.py) and the request model is
// AnthropicMessagesRequest (vllm/entrypoints/anthropic/protocol.py), both
// at commit 82df3f491008e46124f7afb5008c789dc7432515:
//
//   - system: a string becomes the first (system) message when it is not
//     empty; a block list becomes one system message holding the
//     concatenated text of its text blocks with non-empty text (the message
//     is kept even when that is empty); an empty list adds none.
//   - each message with string content keeps it. A block list becomes:
//     text blocks with non-empty text → text parts; image blocks with a
//     source → image_url parts (url = source.data); thinking blocks →
//     the message's reasoning, joined; tool_use blocks → tool calls (id,
//     name, arguments = the input object, or {}); tool_result blocks → in a
//     user message, a tool message emitted before it (tool_call_id = the
//     block's "id", which vLLM reads rather than tool_use_id, content =
//     str(content), "" when empty); in an assistant message, the text part
//     "Tool result: " + str(content). One text part is flattened to a
//     string; a message left with no content, tool calls or reasoning is
//     dropped.
//   - tools become function tools {name, description, parameters =
//     input_schema, with "type": "object" added when it has no type}.
//   - max_tokens is required and positive; tool_choice maps auto → "auto",
//     any → "required", tool → the named function, and is "auto" when tools
//     are given without one.
//
// The messages must not be empty: vLLM's later _validate_anthropic_request
// (serving_messages.py) refuses it too. Unknown members are ignored, as
// pydantic's BaseModel does (AnthropicMessagesRequest has no cache_salt).
// What kvgate cannot reproduce exactly is flagged in Approximate (routed on
// load alone, never refused): a tool_use without an id (vLLM writes the
// current time into it), an inline role "system" message and a block type
// the transcribed source does not declare (newer vLLM accepts both).
func ParseMessages(body []byte, lim Limits) (*ChatRequest, error) {
	r, err := parseMessagesRequest(body, lim)
	if err != nil {
		return nil, finish(err)
	}
	return r, nil
}

// anthropicBlockTypes are AnthropicContentBlock's declared types at the
// transcribed commit (a pydantic Literal there); another type routes the
// request on load alone (errUnknownBlockType), as a newer engine may take it.
var anthropicBlockTypes = map[string]bool{"text": true, "image": true, "tool_use": true, "tool_result": true, "thinking": true}

func parseMessagesRequest(body []byte, lim Limits) (*ChatRequest, *Error) {
	lim = lim.withDefaults()
	s, serr := openBody(body, lim, "model, messages and max_tokens")
	if serr != nil {
		return nil, serr
	}
	r := &ChatRequest{Body: body, AddGenerationPrompt: true}
	var system, messages, tools, toolChoice Value
	var maxTokens *int64
	haveMessages, haveMaxTokens := false, false
	err := s.object(func(key string) *Error {
		var err *Error
		switch key {
		case "model":
			r.Model, err = optionalString(s)
		case "stream":
			r.Stream, _, err = laxBool(s, true, false)
		case "max_tokens":
			haveMaxTokens = true
			maxTokens, err = laxInt(s)
		case "messages":
			haveMessages = true
			messages, err = s.value()
		case "system":
			system, err = s.value()
		case "tools":
			tools, err = s.value()
		case "tool_choice":
			toolChoice, err = s.value()
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
	switch {
	case !haveMaxTokens || maxTokens == nil:
		return nil, at("max_tokens", invalid("", "required: an integer"))
	case *maxTokens <= 0:
		return nil, at("max_tokens", invalid("", "max_tokens must be positive"))
	}
	if err := checkMaxTokens("max_tokens", maxTokens, lim); err != nil {
		return nil, err
	}
	r.MaxTokens, r.HasMaxTokens = *maxTokens, true
	if !haveMessages || messages.Kind != KindArray {
		return nil, at("messages", invalid("", "required: an array of messages"))
	}
	if len(messages.Items) == 0 {
		return nil, at("messages", invalid("", "messages must contain at least one item"))
	}
	if len(messages.Items) > lim.MaxMessages {
		return nil, at("messages", tooLarge("", "more than %d messages", lim.MaxMessages))
	}
	c := anthropicConversion{lim: lim}
	if err := c.system(system); err != nil {
		return nil, at("system", err)
	}
	for i, m := range messages.Items {
		if err := c.message(m); err != nil {
			return nil, at("messages", at(index(i), err))
		}
	}
	if len(c.out) > lim.MaxMessages {
		return nil, at("messages", tooLarge("", "more than %d messages once tool results are split out", lim.MaxMessages))
	}
	if len(c.out) == 0 {
		// Everything was dropped (empty blocks) or flagged: nothing to
		// render the way the engine will.
		c.flag("no message is left after the conversion")
	}
	r.Messages = c.out
	if r.Approximate = c.approximate; r.Approximate != "" {
		r.ApproximateReason = ReasonUnmodelledInput
	}
	var terr *Error
	if r.Tools, terr = anthropicTools(tools); terr != nil {
		return nil, at("tools", terr)
	}
	if r.ToolChoice, terr = anthropicToolChoice(toolChoice); terr != nil {
		return nil, at("tool_choice", terr)
	}
	if r.Tools != nil && r.ToolChoice.Kind == KindNull {
		r.ToolChoice = Value{Kind: KindString, Text: "auto"}
	}
	return r, nil
}

type anthropicConversion struct {
	lim         Limits
	out         []Message
	approximate string
}

// flag records the first reason the conversion may differ from vLLM's.
func (c *anthropicConversion) flag(reason string) {
	if c.approximate == "" {
		c.approximate = reason
	}
}

// errUnknownBlockType marks a content block whose type the transcribed
// AnthropicContentBlock does not declare.
var errUnknownBlockType = &Error{Status: StatusBadRequest, Type: "invalid_request_error", Message: "unknown content block type"}

func (c *anthropicConversion) system(v Value) *Error {
	switch v.Kind {
	case KindNull:
		return nil
	case KindString:
		if v.Text != "" {
			c.out = append(c.out, Message{Role: "system", Content: Content{Text: v.Text}})
		}
		return nil
	case KindArray:
		if len(v.Items) == 0 {
			return nil
		}
		text := ""
		for i, b := range v.Items {
			blk, err := anthropicBlock(b)
			if err == errUnknownBlockType {
				c.flag("a system block of a type kvgate does not model")
				continue
			}
			if err != nil {
				return at(index(i), err)
			}
			if blk.typ == "text" {
				text += blk.text
			}
		}
		c.out = append(c.out, Message{Role: "system", Content: Content{Text: text}})
		return nil
	}
	return invalid("", "expected a string or an array of content blocks, got %s", v.Kind)
}

func (c *anthropicConversion) message(v Value) *Error {
	if v.Kind != KindObject {
		return invalid("", "expected a message object, got %s", v.Kind)
	}
	role, _ := v.Get("role")
	if role.Kind == KindString && role.Text == "system" {
		// Newer vLLM accepts inline system messages and places them by
		// probing the model's renderer (vllm/entrypoints/anthropic/
		// inline_system.py at a8c3bdb20f5dd558bbb813e1644b82830e63dcbb):
		// routed on load alone rather than refused or guessed.
		c.flag("an inline system message: vLLM places it by probing the model's renderer")
		return nil
	}
	if role.Kind != KindString || (role.Text != "user" && role.Text != "assistant") {
		return at("role", invalid("", "Input should be 'user' or 'assistant'"))
	}
	content, ok := v.Get("content")
	m := Message{Role: role.Text}
	switch {
	case !ok:
		return at("content", invalid("", "required"))
	case content.Kind == KindString:
		m.Content.Text = content.Text
		c.out = append(c.out, m)
		return nil
	case content.Kind != KindArray:
		return at("content", invalid("", "expected a string or an array of content blocks, got %s", content.Kind))
	}
	var parts []ContentPart
	var reasoning []string
	for i, b := range content.Items {
		blk, err := anthropicBlock(b)
		if err == errUnknownBlockType {
			// A block type newer than the transcribed source (document,
			// redacted_thinking, …): the engine may serve it; kvgate cannot
			// know how it renders.
			c.flag("a content block of a type kvgate does not model")
			continue
		}
		if err != nil {
			return at("content", at(index(i), err))
		}
		switch blk.typ {
		case "text":
			if blk.text != "" {
				parts = append(parts, ContentPart{Type: "text", Text: blk.text, HasText: true})
			}
		case "image":
			if blk.source.Kind == KindObject && len(blk.source.Members) > 0 {
				data, _ := blk.source.Get("data")
				url := Value{Kind: KindString, Text: data.Text}
				raw := Value{Kind: KindObject, Members: []Member{
					{Key: "type", Value: Value{Kind: KindString, Text: "image_url"}},
					{Key: "image_url", Value: Value{Kind: KindObject, Members: []Member{{Key: "url", Value: url}}}},
				}}
				parts = append(parts, ContentPart{Type: "image_url", Raw: raw})
			}
		case "thinking":
			if blk.hasThinking {
				reasoning = append(reasoning, blk.thinking)
			}
		case "tool_use":
			if blk.id == "" {
				c.flag("a tool_use block has no id: vLLM writes the current time into its call id")
			}
			args := blk.input
			if args.Kind != KindObject || len(args.Members) == 0 {
				args = Value{Kind: KindObject, Members: []Member{}}
			}
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: blk.id, Type: "function", Name: blk.name, Arguments: args})
		case "tool_result":
			text := ""
			if blk.content.Kind == KindString || (blk.content.Kind == KindArray && len(blk.content.Items) > 0) {
				text = pythonStr(blk.content)
			}
			if m.Role == "user" {
				id := blk.id
				c.out = append(c.out, Message{Role: "tool", ToolCallID: &id, Content: Content{Text: text}})
			} else {
				parts = append(parts, ContentPart{Type: "text", Text: "Tool result: " + text, HasText: true})
			}
		}
	}
	if len(reasoning) > 0 {
		joined := ""
		for _, r := range reasoning {
			joined += r
		}
		m.Reasoning = &joined
	}
	switch {
	case len(parts) == 1 && parts[0].Type == "text":
		m.Content.Text = parts[0].Text
	case len(parts) > 0:
		m.Content = Content{IsParts: true, Parts: parts}
	case len(m.ToolCalls) == 0 && len(reasoning) == 0:
		return nil
	}
	c.out = append(c.out, m)
	return nil
}

// anthropicContentBlock is the fields of AnthropicContentBlock kvgate reads.
type anthropicContentBlock struct {
	typ, text, id, name, thinking string
	hasThinking                   bool
	source, input, content        Value
}

// anthropicBlock validates one block as AnthropicContentBlock declares it
// (each field optional, typed) and reads it.
func anthropicBlock(v Value) (anthropicContentBlock, *Error) {
	var b anthropicContentBlock
	if v.Kind != KindObject {
		return b, invalid("", "expected a content block object, got %s", v.Kind)
	}
	typ, _ := v.Get("type")
	if typ.Kind != KindString {
		return b, at("type", invalid("", "Input should be 'text', 'image', 'tool_use', 'tool_result' or 'thinking'"))
	}
	if !anthropicBlockTypes[typ.Text] {
		return b, errUnknownBlockType
	}
	b.typ = typ.Text
	for _, m := range v.Members {
		var err *Error
		switch m.Key {
		case "text", "id", "name", "thinking", "signature":
			err = wantKind(m.Value, KindString, "a string")
		case "source", "input":
			err = wantKind(m.Value, KindObject, "an object")
		case "content":
			if m.Value.Kind == KindArray {
				for i, it := range m.Value.Items {
					if it.Kind != KindObject {
						err = at(index(i), invalid("", "expected an object, got %s", it.Kind))
						break
					}
				}
			} else {
				err = wantKind(m.Value, KindString, "a string or an array of objects")
			}
		case "is_error":
			err = wantKind(m.Value, KindBool, "a boolean")
		}
		if err != nil {
			return b, at(m.Key, err)
		}
	}
	text, _ := v.Get("text")
	id, _ := v.Get("id")
	name, _ := v.Get("name")
	thinking, _ := v.Get("thinking")
	b.text, b.id, b.name, b.thinking, b.hasThinking = text.Text, id.Text, name.Text, thinking.Text, thinking.Kind == KindString
	b.source, _ = v.Get("source")
	b.input, _ = v.Get("input")
	b.content, _ = v.Get("content")
	return b, nil
}

// wantKind accepts null or a value of kind k.
func wantKind(v Value, k Kind, what string) *Error {
	if v.Kind == KindNull || v.Kind == k {
		return nil
	}
	return invalid("", "expected %s, got %s", what, v.Kind)
}

// anthropicTools converts AnthropicTool definitions to the function tools
// vLLM builds from them (ChatCompletionToolsParam).
func anthropicTools(v Value) ([]Value, *Error) {
	switch v.Kind {
	case KindNull:
		return nil, nil
	case KindArray:
	default:
		return nil, invalid("", "expected an array of tools, got %s", v.Kind)
	}
	out := make([]Value, 0, len(v.Items))
	for i, t := range v.Items {
		if t.Kind != KindObject {
			return nil, at(index(i), invalid("", "expected a tool object, got %s", t.Kind))
		}
		name, _ := t.Get("name")
		desc, _ := t.Get("description")
		schema, ok := t.Get("input_schema")
		switch {
		case name.Kind != KindString:
			return nil, at(index(i), at("name", invalid("", "required: a string")))
		case desc.Kind != KindNull && desc.Kind != KindString:
			return nil, at(index(i), at("description", invalid("", "expected a string, got %s", desc.Kind)))
		case !ok || schema.Kind != KindObject:
			return nil, at(index(i), at("input_schema", invalid("", "input_schema must be a dictionary")))
		}
		if _, hasType := schema.Get("type"); !hasType {
			members := make([]Member, len(schema.Members), len(schema.Members)+1)
			copy(members, schema.Members)
			schema = Value{Kind: KindObject, Members: append(members, Member{Key: "type", Value: Value{Kind: KindString, Text: "object"}})}
		}
		out = append(out, Value{Kind: KindObject, Members: []Member{
			{Key: "type", Value: Value{Kind: KindString, Text: "function"}},
			{Key: "function", Value: Value{Kind: KindObject, Members: []Member{
				{Key: "name", Value: name}, {Key: "description", Value: desc}, {Key: "parameters", Value: schema},
			}}},
		}})
	}
	return out, nil
}

// anthropicToolChoice maps AnthropicToolChoice to the chat tool_choice.
func anthropicToolChoice(v Value) (Value, *Error) {
	if v.Kind == KindNull {
		return Value{}, nil
	}
	if v.Kind != KindObject {
		return Value{}, invalid("", "expected an object, got %s", v.Kind)
	}
	typ, _ := v.Get("type")
	switch typ.Text {
	case "auto":
		return Value{Kind: KindString, Text: "auto"}, nil
	case "any":
		return Value{Kind: KindString, Text: "required"}, nil
	case "tool":
		name, _ := v.Get("name")
		return Value{Kind: KindObject, Members: []Member{
			{Key: "type", Value: Value{Kind: KindString, Text: "function"}},
			{Key: "function", Value: Value{Kind: KindObject, Members: []Member{{Key: "name", Value: name}}}},
		}}, nil
	}
	return Value{}, at("type", invalid("", "Input should be 'auto', 'any' or 'tool'"))
}
