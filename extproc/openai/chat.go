package openai

// ChatRequest is what kvgate needs from a /v1/chat/completions body. Body is
// the original bytes, which kvgate forwards unchanged (the P/D sidecar, not
// kvgate, writes kv_transfer_params: extproc/server/responses.go,
// routingMutation, cites it).
type ChatRequest struct {
	Body   []byte
	Model  string
	Stream bool
	// MaxTokens is max_completion_tokens, or the legacy max_tokens when that
	// is absent; HasMaxTokens reports whether either was given.
	MaxTokens    int64
	HasMaxTokens bool
	Messages     []Message
	// Tools are the tool definitions in the client's order, each kept as an
	// ordered JSON object (nil when absent or null).
	Tools []Value
	// ToolChoice is tool_choice as sent (Kind null when absent).
	ToolChoice Value
	// ChatTemplateKwargs are chat_template_kwargs in the client's order; each
	// becomes a template variable (e.g. enable_thinking).
	ChatTemplateKwargs []Member
	// AddGenerationPrompt defaults to true, as in vLLM's ChatCompletionRequest.
	AddGenerationPrompt  bool
	ContinueFinalMessage bool
	// Documents are the RAG documents for templates that accept them.
	Documents []Value
	// ChatTemplate is a per-request template override (vLLM honours it only
	// with --trust-request-chat-template); HasChatTemplate reports it was
	// given and not null (an empty string counts, as in vLLM).
	ChatTemplate    string
	HasChatTemplate bool
	// CacheSalt is the request's cache_salt; "" when absent.
	CacheSalt string
	// Approximate, for a request converted from another API (Messages,
	// Responses), says why its rendering may differ from the engine's; ""
	// when it is exact.
	Approximate string
	// ApproximateReason classes Approximate for metrics: ReasonUnseenInput
	// or ReasonUnmodelledInput.
	ApproximateReason string
	// ToolsDumped reports Tools already in the shape the engine hands the
	// template (the Responses API's model_dump of its own tool models),
	// not chat's ChatCompletionToolsParam, whose field order the renderer
	// otherwise applies.
	ToolsDumped bool
}

// Classes of a converted request kvgate cannot render as the engine will
// (ChatRequest.ApproximateReason).
const (
	// ReasonUnseenInput: the engine adds input kvgate cannot see (a
	// Responses previous_response_id's stored conversation).
	ReasonUnseenInput = "unseen_input"
	// ReasonUnmodelledInput: the request holds something whose rendering
	// kvgate does not model (a Messages inline system message, a block type
	// newer than the transcribed source, a tool_use without an id).
	ReasonUnmodelledInput = "unmodelled_input"
)

// RequestTemplate names the field through which the request brings its own
// chat template, or "" when it brings none. vLLM refuses such a request
// with 400 unless started with --trust-request-chat-template: a
// chat_template, or a chat_template key in chat_template_kwargs, that is
// not None (vllm/entrypoints/openai/serving_engine.py,
// OpenAIServing._validate_chat_template; the same test in the newer
// vllm/entrypoints/serve render path's _render_messages).
func (r *ChatRequest) RequestTemplate() string {
	if r.HasChatTemplate {
		return "chat_template"
	}
	for _, kv := range r.ChatTemplateKwargs {
		if kv.Key == "chat_template" && kv.Value.Kind != KindNull {
			return "chat_template_kwargs.chat_template"
		}
	}
	return ""
}

// Message is one chat message.
type Message struct {
	Role    string
	Content Content
	// Name, ToolCallID and Reasoning are nil when absent.
	Name       *string
	ToolCallID *string
	// Reasoning is "reasoning", or the older "reasoning_content" when only
	// that is given (vLLM passes it to templates under both names).
	Reasoning *string
	ToolCalls []ToolCall
}

// Content is a message's content: a string, or an array of parts.
type Content struct {
	// IsParts reports an array; otherwise Text holds the string (empty for
	// null or absent content, which vLLM renders as "").
	IsParts bool
	Text    string
	Parts   []ContentPart
}

// ContentPart is one element of an array content.
type ContentPart struct {
	Type string
	// Text is the text of a text-like part (text, input_text, output_text,
	// refusal, thinking); HasText is false when it was null or absent, which
	// vLLM skips.
	Text    string
	HasText bool
	// Raw is the whole part as sent, kept for media parts (image_url,
	// input_audio, …) whose handling is model-specific.
	Raw Value
}

// IsText reports whether the part contributes text rather than media.
func (p ContentPart) IsText() bool { return textPartField(p.Type) != "" }

// ToolCall is one assistant tool call.
type ToolCall struct {
	ID   string
	Type string
	Name string
	// Arguments is function.arguments decoded the way vLLM does before
	// rendering (chat_utils._postprocess_messages): a JSON string is parsed
	// into an ordered value, and one that does not parse, or a missing or
	// null argument, becomes the empty object.
	Arguments Value
}

// textPartField names the member that holds a text-like part's text, per
// vLLM's MM_PARSER_MAP (entrypoints/chat_utils.py); "" for other types.
func textPartField(typ string) string {
	switch typ {
	case "text", "input_text", "output_text":
		return "text"
	case "refusal":
		return "refusal"
	case "thinking":
		return "thinking"
	}
	return ""
}

// mediaPartTypes are the non-text part types vLLM accepts; any other type is
// rejected, as vLLM does ("Unsupported chat content part type").
var mediaPartTypes = map[string]bool{
	"image_url": true, "input_image": true, "image_embeds": true, "image_pil": true,
	"audio_url": true, "input_audio": true, "audio_embeds": true, "video_url": true,
	"prompt_embeds": true, "tool_reference": true,
}

// ParseChat parses a /v1/chat/completions body in one pass. The request's
// strings share body's memory: body must not be modified while the request is
// in use.
func ParseChat(body []byte, lim Limits) (*ChatRequest, error) {
	r, err := parseChat(body, lim)
	if err != nil {
		return nil, finish(err)
	}
	return r, nil
}

func parseChat(body []byte, lim Limits) (*ChatRequest, *Error) {
	lim = lim.withDefaults()
	s, serr := openBody(body, lim, "model and messages")
	if serr != nil {
		return nil, serr
	}
	r := &ChatRequest{Body: body, AddGenerationPrompt: true}
	var common requestFields
	var maxTokens, maxCompletionTokens *int64
	haveMessages := false
	// Python truthiness of the two flags as sent, for vLLM's
	// check_generation_prompt (a mode="before" validator: it sees the raw
	// values, before pydantic coerces them).
	var rawContinue, rawGeneration bool
	err := s.object(func(key string) *Error {
		if handled, err := common.read(s, key); handled {
			return at(key, err)
		}
		var err *Error
		switch key {
		case "max_tokens":
			maxTokens, err = optionalInt(s)
		case "max_completion_tokens":
			maxCompletionTokens, err = optionalInt(s)
		case "messages":
			haveMessages = true
			r.Messages, err = parseMessages(s)
		case "tools":
			r.Tools, err = objectList(s)
		case "tool_choice":
			r.ToolChoice, err = s.value()
		case "chat_template_kwargs":
			r.ChatTemplateKwargs, err = optionalObject(s)
		case "add_generation_prompt":
			r.AddGenerationPrompt, rawGeneration, err = laxBool(s, false, true)
		case "continue_final_message":
			r.ContinueFinalMessage, rawContinue, err = laxBool(s, false, false)
		case "documents":
			r.Documents, err = documentList(s)
		case "chat_template":
			var tmpl *string
			if tmpl, err = optionalStringPtr(s); tmpl != nil {
				r.ChatTemplate, r.HasChatTemplate = *tmpl, true
			}
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
	if !haveMessages {
		return nil, at("messages", invalid("", "required"))
	}
	if len(r.Messages) == 0 {
		return nil, at("messages", invalid("", "must contain at least one message"))
	}
	if (rawContinue && rawGeneration) || (r.ContinueFinalMessage && r.AddGenerationPrompt) {
		// vLLM's check_generation_prompt refuses the pair as sent (Python
		// truthiness: "no" is truthy there); with add_generation_prompt
		// left at its default, transformers' apply_chat_template refuses
		// the coerced pair, and vLLM answers 400 either way.
		return nil, invalid("continue_final_message", "cannot set both continue_final_message and add_generation_prompt to true")
	}
	for _, f := range []struct {
		name string
		n    *int64
	}{{"max_tokens", maxTokens}, {"max_completion_tokens", maxCompletionTokens}} {
		if err := checkMaxTokens(f.name, f.n, lim); err != nil {
			return nil, err
		}
	}
	switch {
	case maxCompletionTokens != nil:
		r.MaxTokens, r.HasMaxTokens = *maxCompletionTokens, true
	case maxTokens != nil:
		r.MaxTokens, r.HasMaxTokens = *maxTokens, true
	}
	return r, nil
}

func parseMessages(s *scanner) ([]Message, *Error) {
	if k, err := s.peekKind(); err != nil {
		return nil, err
	} else if k != KindArray {
		return nil, invalid("", "expected an array of messages, got %s", k)
	}
	var msgs []Message
	err := s.array(func(i int) *Error {
		if i >= s.lim.MaxMessages {
			return tooLarge("", "more than %d messages", s.lim.MaxMessages)
		}
		m, err := parseMessage(s)
		if err != nil {
			return at(index(i), err)
		}
		msgs = append(msgs, m)
		return nil
	})
	if msgs == nil && err == nil {
		msgs = []Message{}
	}
	return msgs, err
}

func parseMessage(s *scanner) (Message, *Error) {
	var m Message
	if k, err := s.peekKind(); err != nil {
		return m, err
	} else if k != KindObject {
		return m, invalid("", "expected a message object, got %s", k)
	}
	haveRole := false
	var reasoning, reasoningContent *string
	err := s.object(func(key string) *Error {
		var err *Error
		switch key {
		case "role":
			haveRole = true
			m.Role, err = s.readTyped()
		case "content":
			m.Content, err = parseContent(s)
		case "name":
			m.Name, err = optionalStringPtr(s)
		case "tool_call_id":
			m.ToolCallID, err = optionalStringPtr(s)
		case "reasoning":
			reasoning, err = optionalStringPtr(s)
		case "reasoning_content":
			reasoningContent, err = optionalStringPtr(s)
		case "tool_calls":
			m.ToolCalls, err = parseToolCalls(s)
		default:
			err = s.skip()
		}
		return at(key, err)
	})
	if err != nil {
		return m, err
	}
	if !haveRole {
		return m, at("role", invalid("", "required"))
	}
	m.Reasoning = reasoning
	if m.Reasoning == nil {
		m.Reasoning = reasoningContent
	}
	return m, nil
}

// readTyped reads a required string.
func (s *scanner) readTyped() (string, *Error) {
	if k, err := s.peekKind(); err != nil {
		return "", err
	} else if k != KindString {
		return "", invalid("", "expected a string, got %s", k)
	}
	return s.readString()
}

func parseContent(s *scanner) (Content, *Error) {
	var c Content
	k, err := s.peekKind()
	if err != nil {
		return c, err
	}
	switch k {
	case KindNull:
		return c, s.literal("null")
	case KindString:
		c.Text, err = s.readString()
		return c, err
	case KindArray:
	default:
		return c, invalid("", "expected a string, an array of content parts or null, got %s", k)
	}
	c.IsParts = true
	c.Parts = []ContentPart{}
	err = s.array(func(i int) *Error {
		p, err := parseContentPart(s)
		if err != nil {
			return at(index(i), err)
		}
		c.Parts = append(c.Parts, p)
		return nil
	})
	return c, err
}

func parseContentPart(s *scanner) (ContentPart, *Error) {
	var p ContentPart
	k, err := s.peekKind()
	if err != nil {
		return p, err
	}
	if k == KindString {
		// vLLM accepts a bare string as a text part.
		p.Type = "text"
		p.Text, err = s.readString()
		p.HasText = err == nil
		return p, err
	}
	if k != KindObject {
		return p, invalid("", "expected a content part object, got %s", k)
	}
	// Text parts, by far the most common, are decoded in place; a media part
	// is re-read as a kept tree once its type is known.
	start := s.pos
	var typ, text, refusal, thinking Value
	err = s.object(func(key string) *Error {
		var dst *Value
		switch key {
		case "type":
			dst = &typ
		case "text":
			dst = &text
		case "refusal":
			dst = &refusal
		case "thinking":
			dst = &thinking
		default:
			return at(key, s.skip())
		}
		k, err := s.peekKind()
		if err != nil {
			return at(key, err)
		}
		if k != KindString && k != KindNull {
			return at(key, invalid("", "expected a string, got %s", k))
		}
		v, err := s.value()
		*dst = v
		return at(key, err)
	})
	if err != nil {
		return p, err
	}
	if typ.Kind == KindNull {
		return p, invalid("", "content part has no type")
	}
	p.Type = typ.Text
	switch textPartField(p.Type) {
	case "text":
		p.Text, p.HasText = text.Text, text.Kind == KindString
		return p, nil
	case "refusal":
		p.Text, p.HasText = refusal.Text, refusal.Kind == KindString
		return p, nil
	case "thinking":
		p.Text, p.HasText = thinking.Text, thinking.Kind == KindString
		return p, nil
	}
	if !mediaPartTypes[p.Type] {
		return p, invalid("", "unknown content part type %q", p.Type)
	}
	end := s.pos
	s.pos = start
	p.Raw, err = s.value()
	s.pos = end
	return p, err
}

func parseToolCalls(s *scanner) ([]ToolCall, *Error) {
	return orNull(s, KindArray, func() ([]ToolCall, *Error) {
		var calls []ToolCall
		err := s.array(func(i int) *Error {
			tc, err := parseToolCall(s)
			if err != nil {
				return at(index(i), err)
			}
			calls = append(calls, tc)
			return nil
		})
		return calls, err
	}, expected("an array of tool calls"))
}

func parseToolCall(s *scanner) (ToolCall, *Error) {
	var tc ToolCall
	if k, err := s.peekKind(); err != nil {
		return tc, err
	} else if k != KindObject {
		return tc, invalid("", "expected a tool call object, got %s", k)
	}
	haveFunction := false
	var args Value
	err := s.object(func(key string) *Error {
		var err *Error
		switch key {
		case "id":
			tc.ID, err = optionalString(s)
		case "type":
			tc.Type, err = optionalString(s)
		case "function":
			haveFunction = true
			if k, perr := s.peekKind(); perr != nil {
				return at(key, perr)
			} else if k != KindObject {
				return at(key, invalid("", "required object"))
			}
			err = s.object(func(key string) *Error {
				var err *Error
				switch key {
				case "name":
					tc.Name, err = optionalString(s)
				case "arguments":
					args, err = s.value()
				default:
					err = s.skip()
				}
				return at(key, err)
			})
		default:
			err = s.skip()
		}
		return at(key, err)
	})
	if err != nil {
		return tc, err
	}
	if !haveFunction {
		return tc, at("function", invalid("", "required object"))
	}
	tc.Arguments = decodeArguments(args)
	return tc, nil
}

// decodeArguments mirrors vLLM's _postprocess_messages: a string is parsed as
// JSON, falling back to {} when it does not parse; an object or array is kept;
// anything else becomes {}.
func decodeArguments(args Value) Value {
	empty := Value{Kind: KindObject, Members: []Member{}}
	switch args.Kind {
	case KindObject, KindArray:
		return args
	case KindString:
		v, err := ParseValue([]byte(args.Text), Limits{})
		if err != nil {
			return empty
		}
		return v
	}
	return empty
}

// documentList reads documents, `list[dict[str, str]] | None` in vLLM's
// ChatCompletionRequest: pydantic's lax str takes only strings, so a
// document member that is not one is refused as vLLM refuses it.
func documentList(s *scanner) ([]Value, *Error) {
	docs, err := objectList(s)
	if err != nil {
		return nil, err
	}
	for i, d := range docs {
		for _, m := range d.Members {
			if m.Value.Kind != KindString {
				return nil, at(index(i), at(m.Key, invalid("", "Input should be a valid string, got %s", m.Value.Kind)))
			}
		}
	}
	return docs, nil
}
