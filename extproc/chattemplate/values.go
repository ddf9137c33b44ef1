package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/internal/third_party/jinja"

	"github.com/kvgate/kvgate/extproc/openai"
)

// ErrMediaContent is returned for image/audio/video parts in the "string"
// content format: vLLM replaces them with model-specific placeholder tokens
// that kvgate does not model.
var ErrMediaContent = errors.New("media content parts need model-specific placeholders")

// bridge converts the parsed request into template values the way vLLM's
// chat_utils.parse_chat_messages and serving_chat do, recording values that
// Python would hold differently (see inexact).
type bridge struct {
	format         ContentFormat
	functionFields []string
	inexact        string // first reason the render may differ from Python, "" if none
}

func (b *bridge) messages(msgs []openai.Message) (jinja.Value, error) {
	items := make([]jinja.Value, 0, len(msgs))
	for i, m := range msgs {
		d, err := b.message(m)
		if err != nil {
			return jinja.Value{}, fmt.Errorf("messages[%d]: %w", i, err)
		}
		items = append(items, d)
	}
	return jinja.NewList(items), nil
}

// message builds the dict in the key order vLLM's ConversationMessage gets:
// role, content, then tool_calls and reasoning (assistant) or tool_call_id
// (tool), then name.
func (b *bridge) message(m openai.Message) (jinja.Value, error) {
	d := jinja.NewDict()
	dict := d.AsDict()
	dict.Set("role", jinja.NewString(m.Role))
	content, err := b.content(m.Role, m.Content)
	if err != nil {
		return jinja.Value{}, fmt.Errorf("content: %w", err)
	}
	dict.Set("content", content)
	switch m.Role {
	case "assistant":
		// vLLM drops an empty tool_calls list so templates take the plain path.
		if len(m.ToolCalls) > 0 {
			calls := make([]jinja.Value, len(m.ToolCalls))
			for i, tc := range m.ToolCalls {
				calls[i] = b.toolCall(tc)
			}
			dict.Set("tool_calls", jinja.NewList(calls))
		}
		if m.Reasoning != nil {
			dict.Set("reasoning", jinja.NewString(*m.Reasoning))
			dict.Set("reasoning_content", jinja.NewString(*m.Reasoning))
		}
	case "tool":
		if m.ToolCallID != nil {
			dict.Set("tool_call_id", jinja.NewString(*m.ToolCallID))
		}
	}
	if m.Name != nil {
		dict.Set("name", jinja.NewString(*m.Name))
	}
	return d, nil
}

func (b *bridge) content(role string, c openai.Content) (jinja.Value, error) {
	if !c.IsParts {
		if b.format == ContentOpenAI && c.Text == "" {
			// vLLM turns null content into [] before formatting; a string
			// becomes one text part.
			return jinja.NewList(nil), nil
		}
		if b.format == ContentOpenAI {
			return jinja.NewList([]jinja.Value{textPart(c.Text)}), nil
		}
		return jinja.NewString(c.Text), nil
	}
	if b.format == ContentString || role == "tool" {
		texts := make([]string, 0, len(c.Parts))
		for i, p := range c.Parts {
			if !p.IsText() {
				if b.format == ContentString {
					return jinja.Value{}, fmt.Errorf("[%d] (%s): %w", i, p.Type, ErrMediaContent)
				}
				// vLLM keeps a tool message's parts as a list when any is
				// not text.
				return b.partsList(c.Parts), nil
			}
			if p.HasText {
				texts = append(texts, p.Text)
			}
		}
		// vLLM joins text parts with "\n" (_parse_chat_message_content_parts).
		return jinja.NewString(strings.Join(texts, "\n")), nil
	}
	return b.partsList(c.Parts), nil
}

// partsList is the "openai" content format: text parts as {type, text}, media
// parts as {type: modality}.
func (b *bridge) partsList(parts []openai.ContentPart) jinja.Value {
	items := make([]jinja.Value, 0, len(parts))
	for _, p := range parts {
		if p.IsText() {
			if p.HasText {
				items = append(items, textPart(p.Text))
			}
			continue
		}
		d := jinja.NewDict()
		d.AsDict().Set("type", jinja.NewString(modality(p.Type)))
		items = append(items, d)
	}
	return jinja.NewList(items)
}

func textPart(text string) jinja.Value {
	d := jinja.NewDict()
	d.AsDict().Set("type", jinja.NewString("text"))
	d.AsDict().Set("text", jinja.NewString(text))
	return d
}

func modality(partType string) string {
	switch partType {
	case "image_url", "input_image", "image_embeds", "image_pil":
		return "image"
	case "audio_url", "input_audio", "audio_embeds":
		return "audio"
	case "video_url":
		return "video"
	}
	return partType
}

func (b *bridge) toolCall(tc openai.ToolCall) jinja.Value {
	fn := jinja.NewDict()
	fn.AsDict().Set("name", jinja.NewString(tc.Name))
	fn.AsDict().Set("arguments", b.value(tc.Arguments))
	d := jinja.NewDict()
	d.AsDict().Set("id", jinja.NewString(tc.ID))
	d.AsDict().Set("type", jinja.NewString(tc.Type))
	d.AsDict().Set("function", fn)
	return d
}

// tool shapes a tool definition like vLLM's tool.model_dump(): "type" then
// "function" with its declared fields first (None when absent) and any extra
// fields after, in the client's order; extra tool-level fields follow.
func (b *bridge) tool(t openai.Value) jinja.Value {
	d := jinja.NewDict()
	dict := d.AsDict()
	typ := jinja.NewString("function")
	if v, ok := t.Get("type"); ok {
		typ = b.value(v)
	}
	dict.Set("type", typ)
	if fnv, ok := t.Get("function"); ok && fnv.Kind == openai.KindObject {
		fn := jinja.NewDict()
		for _, f := range b.functionFields {
			v, _ := fnv.Get(f)
			fn.AsDict().Set(f, b.value(v))
		}
		for _, m := range fnv.Members {
			if !fn.AsDict().Has(m.Key) {
				fn.AsDict().Set(m.Key, b.value(m.Value))
			}
		}
		dict.Set("function", fn)
	} else if ok {
		dict.Set("function", b.value(fnv))
	}
	for _, m := range t.Members {
		if !dict.Has(m.Key) {
			dict.Set(m.Key, b.value(m.Value))
		}
	}
	return d
}

// value converts an ordered JSON value, keeping member order.
func (b *bridge) value(v openai.Value) jinja.Value {
	switch v.Kind {
	case openai.KindBool:
		return jinja.NewBool(v.Bool)
	case openai.KindNumber:
		return b.number(v.Text)
	case openai.KindString:
		return jinja.NewString(v.Text)
	case openai.KindArray:
		items := make([]jinja.Value, len(v.Items))
		for i, it := range v.Items {
			items[i] = b.value(it)
		}
		return jinja.NewList(items)
	case openai.KindObject:
		d := jinja.NewDict()
		for _, m := range v.Members {
			d.AsDict().Set(m.Key, b.value(m.Value))
		}
		return d
	}
	return jinja.None()
}

// number converts a JSON number as Python's json.loads would: an integer
// literal is an int, anything with '.', 'e' or 'E' a float.
func (b *bridge) number(lit string) jinja.Value {
	if lit == "NaN" || strings.HasSuffix(lit, "Infinity") {
		// json.loads takes these as floats (openai.parsePyNumber); how a
		// template prints one is Python's business, not worth guessing.
		b.flag("a NaN or Infinity the template would print")
		return jinja.NewString(lit)
	}
	if !strings.ContainsAny(lit, ".eE") {
		if n, err := strconv.ParseInt(lit, 10, 64); err == nil {
			return jinja.NewInt(n)
		}
		b.flag("integer beyond int64 (Python keeps it exact)")
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) {
		// Python's json.loads gives inf for 1e999, which json.dumps prints
		// as Infinity; the engine refuses it.
		b.flag("float out of range")
		return jinja.NewString(lit)
	}
	return jinja.NewFloat(f)
}

func (b *bridge) flag(reason string) {
	if b.inexact == "" {
		b.inexact = reason
	}
}
