package openai

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// conversionCase is one case of testdata/vllm_api_conversions.json, whose
// expectations are transcribed from vLLM's conversion code (the file says
// which files and commits).
type conversionCase struct {
	API                  string          `json:"api"`
	Name                 string          `json:"name"`
	Branches             []string        `json:"branches"`
	Body                 json.RawMessage `json:"body"`
	Messages             []any           `json:"messages"`
	Tools                json.RawMessage `json:"tools"`
	ToolChoice           json.RawMessage `json:"tool_choice"`
	TemplateKwargs       map[string]any  `json:"template_kwargs"`
	ContinueFinalMessage bool            `json:"continue_final_message"`
	Approximate          bool            `json:"approximate"`
}

func loadConversions(t *testing.T) (map[string][]string, []conversionCase) {
	t.Helper()
	raw, err := os.ReadFile("testdata/vllm_api_conversions.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Branches map[string][]string `json:"branches"`
		Cases    []conversionCase    `json:"cases"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	return f.Branches, f.Cases
}

// The transcription covers every branch it names for each API, and names
// only branches it lists.
func TestVLLMConversionFixturesCoverEveryBranch(t *testing.T) {
	branches, cases := loadConversions(t)
	for api, list := range branches {
		covered := map[string]bool{}
		for _, c := range cases {
			if c.API != api {
				continue
			}
			for _, b := range c.Branches {
				covered[b] = true
			}
		}
		for _, b := range list {
			if !covered[b] {
				t.Errorf("%s: branch %q has no case", api, b)
			}
			delete(covered, b)
		}
		for b := range covered {
			t.Errorf("%s: a case names branch %q, which the list lacks", api, b)
		}
	}
	if len(branches["messages"]) == 0 || len(branches["responses"]) == 0 {
		t.Fatal("branch lists missing")
	}
}

func TestConversionsMatchVLLM(t *testing.T) {
	_, cases := loadConversions(t)
	for _, c := range cases {
		t.Run(c.API+"/"+c.Name, func(t *testing.T) {
			parse := ParseMessages
			if c.API == "responses" {
				parse = ParseResponses
			}
			r, err := parse(c.Body, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if c.Approximate {
				if r.Approximate == "" {
					t.Fatal("want the request flagged approximate")
				}
				return
			}
			if r.Approximate != "" {
				t.Fatalf("flagged approximate: %s", r.Approximate)
			}
			if got := messagesAsVLLM(t, r.Messages); !reflect.DeepEqual(got, c.Messages) {
				gj, _ := json.Marshal(got)
				wj, _ := json.Marshal(c.Messages)
				t.Fatalf("messages\n got %s\nwant %s", gj, wj)
			}
			if c.Tools != nil {
				if got, want := toolsJSON(r.Tools), compact(t, c.Tools); got != want {
					t.Fatalf("tools\n got %s\nwant %s", got, want)
				}
			}
			if c.ToolChoice != nil {
				if got, want := string(r.ToolChoice.AppendJSON(nil)), compact(t, c.ToolChoice); got != want {
					t.Fatalf("tool_choice %s, want %s", got, want)
				}
			}
			if r.ContinueFinalMessage != c.ContinueFinalMessage || r.AddGenerationPrompt == c.ContinueFinalMessage {
				t.Fatalf("continue_final_message %v, add_generation_prompt %v; want continue %v", r.ContinueFinalMessage, r.AddGenerationPrompt, c.ContinueFinalMessage)
			}
			kw := map[string]any{}
			for _, m := range r.ChatTemplateKwargs {
				kw[m.Key] = m.Value.Text
			}
			if len(kw) != len(c.TemplateKwargs) || (len(kw) > 0 && !reflect.DeepEqual(kw, c.TemplateKwargs)) {
				t.Fatalf("template kwargs %v, want %v", kw, c.TemplateKwargs)
			}
		})
	}
}

// messagesAsVLLM writes the converted messages as vLLM's message dicts
// (content absent when vLLM sets none), decoded as encoding/json decodes
// the fixture.
func messagesAsVLLM(t *testing.T, msgs []Message) []any {
	t.Helper()
	out := make([]any, 0, len(msgs))
	for _, m := range msgs {
		d := Value{Kind: KindObject}
		add := func(k string, v Value) { d.Members = append(d.Members, Member{Key: k, Value: v}) }
		str := func(s string) Value { return Value{Kind: KindString, Text: s} }
		add("role", str(m.Role))
		switch {
		case m.Content.IsParts:
			parts := Value{Kind: KindArray}
			for _, p := range m.Content.Parts {
				if p.IsText() {
					parts.Items = append(parts.Items, Value{Kind: KindObject, Members: []Member{{Key: "type", Value: str(p.Type)}, {Key: "text", Value: str(p.Text)}}})
				} else {
					parts.Items = append(parts.Items, p.Raw)
				}
			}
			add("content", parts)
		case m.Content.Text != "":
			add("content", str(m.Content.Text))
		}
		if m.Reasoning != nil {
			add("reasoning", str(*m.Reasoning))
		}
		if len(m.ToolCalls) > 0 {
			calls := Value{Kind: KindArray}
			for _, tc := range m.ToolCalls {
				calls.Items = append(calls.Items, Value{Kind: KindObject, Members: []Member{
					{Key: "id", Value: str(tc.ID)}, {Key: "type", Value: str(tc.Type)},
					{Key: "function", Value: Value{Kind: KindObject, Members: []Member{{Key: "name", Value: str(tc.Name)}, {Key: "arguments", Value: tc.Arguments}}}},
				}})
			}
			add("tool_calls", calls)
		}
		if m.ToolCallID != nil {
			add("tool_call_id", str(*m.ToolCallID))
		}
		var v any
		if err := json.Unmarshal(d.AppendJSON(nil), &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func toolsJSON(tools []Value) string {
	if tools == nil {
		return "null"
	}
	return string(Value{Kind: KindArray, Items: tools}.AppendJSON(nil))
}

func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	v, err := ParseValue(raw, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return string(v.AppendJSON(nil))
}

func TestPythonStrOfToolResultBlocks(t *testing.T) {
	// Each expectation is CPython 3's repr() of what json.loads makes of
	// the JSON (checked with python3 -c 'print(repr(json.loads(...)))').
	for in, want := range map[string]string{
		`[{"type":"text","text":"it's \"x\"\n\u0001é\u2028"}]`:       `[{'type': 'text', 'text': 'it\'s "x"\n\x01é\u2028'}]`,
		`[1e16, 1e-5, 0.1, 12345678901234567890, 2.5e15, -0.0, 1E2]`: `[1e+16, 1e-05, 0.1, 12345678901234567890, 2500000000000000.0, -0.0, 100.0]`,
		`[{"a":true,"b":null,"c":"it's"}]`:                           `[{'a': True, 'b': None, 'c': "it's"}]`,
		`"plain"`:                                                    `plain`,
	} {
		v, err := ParseValue([]byte(in), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if got := pythonStr(v); got != want {
			t.Errorf("pythonStr(%s) = %s, want %s", in, got, want)
		}
	}
}
