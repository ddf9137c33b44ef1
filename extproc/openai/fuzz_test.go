package openai

import (
	"bytes"
	"errors"
	"testing"
)

func checkRejection(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not *Error", err, err)
	}
	if e.Status != 400 && e.Status != 413 {
		t.Fatalf("status %d for %q", e.Status, e.Message)
	}
	if e.Type != "invalid_request_error" || e.Message == "" {
		t.Fatalf("error shape %+v", e)
	}
}

// fuzzLimits are small so the fuzzer reaches every limit.
var fuzzLimits = Limits{MaxBodyBytes: 1 << 16, MaxDepth: 8, MaxStringBytes: 512, MaxMessages: 8, MaxPrompts: 4, MaxPromptTokens: 16, MaxKeptValues: 64}

func FuzzParseChat(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}],"chat_template_kwargs":{"enable_thinking":false}}`,
		`{"messages":[{"role":"tool","tool_call_id":"1","content":"x","reasoning":"r"}],"max_tokens":5,"stream":true}`,
		"\xef\xbb\xbf" + `{"messages":[{"role":"user","content":"x"}],"max_tokens":"2.0","stream":"yes","temperature":NaN}`,
		`{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":2e0,"add_generation_prompt":0,"continue_final_message":"on","documents":[{"t":"x"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		orig := bytes.Clone(body)
		r, err := ParseChat(body, fuzzLimits)
		if !bytes.Equal(body, orig) {
			t.Fatal("ParseChat modified its input")
		}
		if err != nil {
			checkRejection(t, err)
			return
		}
		if !bytes.Equal(r.Body, orig) || len(r.Messages) == 0 || len(r.Messages) > fuzzLimits.MaxMessages {
			t.Fatalf("accepted request breaks invariants: %d messages", len(r.Messages))
		}
	})
}

func FuzzParseCompletion(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hi"}`,
		`{"prompt":["a","b"],"max_tokens":3}`,
		`{"prompt":[1,2,3]}`,
		`{"prompt":[[1],[2,3]],"stream":false}`,
		`{"prompt":[1,"2",3.0,true],"max_tokens":" 3 ","stream":1}`,
		`{"prompt":["1","2"],"max_tokens":-Infinity}`,
		"\xff\xfe{\x00\"\x00p\x00r\x00o\x00m\x00p\x00t\x00\"\x00:\x00\"\x00h\x00\"\x00}\x00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseCompletion(body, fuzzLimits)
		if err != nil {
			checkRejection(t, err)
			return
		}
		tokens := 0
		for _, p := range r.Prompts {
			tokens += len(p.TokenIDs)
			if p.IsTokens && len(p.TokenIDs) == 0 {
				t.Fatal("empty token prompt accepted")
			}
		}
		if len(r.Prompts) == 0 || tokens > fuzzLimits.MaxPromptTokens {
			t.Fatalf("accepted request breaks invariants: %d prompts, %d tokens", len(r.Prompts), tokens)
		}
	})
}

// checkConverted holds a converted Messages or Responses request to the
// chat parser's invariants.
func checkConverted(t *testing.T, body, orig []byte, r *ChatRequest, err error) {
	t.Helper()
	if !bytes.Equal(body, orig) {
		t.Fatal("the parser modified its input")
	}
	if err != nil {
		checkRejection(t, err)
		return
	}
	if (len(r.Messages) == 0 && r.Approximate == "") || len(r.Messages) > fuzzLimits.MaxMessages || r.MaxTokens > DefaultLimits.MaxOutputTokens {
		t.Fatalf("accepted request breaks invariants: %d messages, max tokens %d", len(r.Messages), r.MaxTokens)
	}
	if r.ContinueFinalMessage && r.AddGenerationPrompt {
		t.Fatal("both continue_final_message and add_generation_prompt")
	}
}

func FuzzParseMessages(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":"8","system":[{"type":"text","text":"s"}],"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"any"},"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"tool_use","id":"1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","id":"1","content":[{"type":"text","text":"r"}]},{"type":"image","source":{"data":"x"}}]}]}`,
		`{"max_tokens":0,"messages":[]}`,
		`{"max_tokens":1,"messages":[{"role":"system","content":"x"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		orig := bytes.Clone(body)
		r, err := ParseMessages(body, fuzzLimits)
		checkConverted(t, body, orig, r, err)
	})
}

func FuzzParseResponses(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi","instructions":"be brief"}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"reasoning","summary":[{"text":"r"}]},{"type":"function_call","id":"mcp_1","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[{"type":"function","name":"f"}],"reasoning":{"effort":"low"}}`,
		`{"input":[{"type":"message","role":"assistant","status":"incomplete","content":[{"type":"output_text","text":"p"}]}],"previous_response_id":"r","max_output_tokens":"3"}`,
		`{"input":[],"prompt":{"id":"p"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		orig := bytes.Clone(body)
		r, err := ParseResponses(body, fuzzLimits)
		checkConverted(t, body, orig, r, err)
	})
}
