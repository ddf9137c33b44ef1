package openai

import "testing"

// The model field of a body on a route kvgate does not parse is read as
// json.loads would read it, and nothing else is taken for it.
func TestModelOf(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":"llama","input":"x"}`:                "llama",
		"\xef\xbb\xbf" + `{"input":[1,2],"model":"m"}`: "m",
		`{"model":"a","model":"b"}`:                    "b",
		`{"model":"a","nested":{"model":"b"}}`:         "a",
		`{"model":"l\u006cama"}`:                       "llama",
		`{"model":"x","temperature":NaN}`:              "x",
		`{"model":5}`:                                  "",
		`{"input":"x"}`:                                "",
		`["model","x"]`:                                "",
		`{"model":"x"`:                                 "",
		`{"model":"x"} trailing`:                       "",
		`model=x`:                                      "",
		``:                                             "",
	} {
		got, ok := ModelOf([]byte(body), Limits{})
		if got != want || ok != (want != "") {
			t.Errorf("ModelOf(%q) = %q %v, want %q", body, got, ok, want)
		}
	}
	if _, ok := ModelOf([]byte(`{"model":"x","a":[[[[[[[[[[1]]]]]]]]]]}`), Limits{MaxDepth: 4}); ok {
		t.Error("nesting past the limit read")
	}
}
