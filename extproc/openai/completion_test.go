package openai

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseCompletionShapes(t *testing.T) {
	cases := []struct {
		prompt string
		want   []Prompt
	}{
		{`"hello"`, []Prompt{{Text: "hello"}}},
		{`["a", "b"]`, []Prompt{{Text: "a"}, {Text: "b"}}},
		{`[1, 2, 4294967295]`, []Prompt{{IsTokens: true, TokenIDs: []uint32{1, 2, 4294967295}}}},
		{`[[1], [2, 3]]`, []Prompt{{IsTokens: true, TokenIDs: []uint32{1}}, {IsTokens: true, TokenIDs: []uint32{2, 3}}}},
	}
	for _, c := range cases {
		body := `{"model":"m","max_tokens":5,"stream":true,"prompt":` + c.prompt + `,"echo":false}`
		r, err := ParseCompletion([]byte(body), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", c.prompt, err)
		}
		if r.Model != "m" || !r.Stream || !r.HasMaxTokens || r.MaxTokens != 5 || string(r.Body) != body {
			t.Errorf("%s: fields = %+v", c.prompt, r)
		}
		if !reflect.DeepEqual(r.Prompts, c.want) {
			t.Errorf("%s: prompts = %+v, want %+v", c.prompt, r.Prompts, c.want)
		}
	}
}

func TestParseCompletionErrors(t *testing.T) {
	cases := []struct {
		body    string
		lim     Limits
		status  int
		message string
	}{
		{`{"model":"m"}`, Limits{}, 400, "prompt: required"},
		{``, Limits{}, 400, "request body is empty: want a JSON object with model and prompt"},
		{`{"max_tokens":9223372036854775807,"prompt":"x"}`, Limits{}, 400, "max_tokens: 9223372036854775807 is more than the 67108864 tokens kvgate accepts"},
		{`{"prompt":null}`, Limits{}, 400, "prompt: required"},
		{`{"prompt":[]}`, Limits{}, 400, "prompt: must not be an empty array"},
		{`{"prompt":["a",1]}`, Limits{}, 400, "prompt[0]: expected a token id, got the string \"a\""},
		{`{"prompt":[1,-2]}`, Limits{}, 400, "prompt[1]: token id -2 out of range"},
		{`{"prompt":[4294967296]}`, Limits{}, 400, "prompt[0]: token id 4294967296 out of range"},
		{`{"prompt":[1.5]}`, Limits{}, 400, "prompt[0]: Input should be a valid integer, got a number with a fractional part"},
		{`{"prompt":[[1],[]]}`, Limits{}, 400, "prompt[1]: token-id prompt must not be empty"},
		{`{"prompt":[[1],["a"]]}`, Limits{}, 400, "prompt[1][0]: expected a token id, got the string \"a\""},
		{`{"prompt":{}}`, Limits{}, 400, "prompt: expected a string, an array of strings, an array of token ids or an array of token-id arrays, got object"},
		{`{"prompt":[[1,2],[3,4]]}`, Limits{MaxPromptTokens: 3}, 413, "prompt[1][1]: more than 3 prompt token ids"},
		{`{"prompt":["a","b","c"]}`, Limits{MaxPrompts: 2}, 413, "prompt: more than 2 prompts"},
	}
	for _, c := range cases {
		_, err := ParseCompletion([]byte(c.body), c.lim)
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("%s: error %v is not *Error", c.body, err)
		}
		if e.Status != c.status || e.Message != c.message {
			t.Errorf("%s: got %d %q, want %d %q", c.body, e.Status, e.Message, c.status, c.message)
		}
	}
}
