package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// tokensOf flattens a document with encoding/json's streaming Decoder, which
// reports object keys in document order: an independent oracle for both
// content and member order.
func tokensOf(data []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out []string
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() == "EOF" {
				return out, nil
			}
			return nil, err
		}
		out = append(out, fmt.Sprintf("%T:%v", tok, tok))
	}
}

// flatten writes v in the same token form as tokensOf.
func flatten(v Value, out []string) []string {
	switch v.Kind {
	case KindNull:
		return append(out, "<nil>:<nil>")
	case KindBool:
		return append(out, fmt.Sprintf("bool:%v", v.Bool))
	case KindNumber:
		return append(out, "json.Number:"+v.Text)
	case KindString:
		return append(out, "string:"+v.Text)
	case KindArray:
		out = append(out, "json.Delim:[")
		for _, it := range v.Items {
			out = flatten(it, out)
		}
		return append(out, "json.Delim:]")
	default:
		out = append(out, "json.Delim:{")
		for _, m := range v.Members {
			out = append(out, "string:"+m.Key)
			out = flatten(m.Value, out)
		}
		return append(out, "json.Delim:}")
	}
}

func TestParseValueMatchesEncodingJSON(t *testing.T) {
	docs := []string{
		`{"z": 1, "a": [true, false, null, -0.5e+3, 0, "x"], "m": {"é": "\u00e9\ud83d\ude00\n\t\"\\\/"}}`,
		`[]`, `{}`, `"plain"`, `-12`, `1E5`, `[[[]], {"": ""}]`,
		`{"k": "日本語", "emoji": "😀", "ctl": "\u0001"}`,
	}
	for _, d := range docs {
		v, err := ParseValue([]byte(d), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		want, err := tokensOf([]byte(d))
		if err != nil {
			t.Fatalf("oracle %s: %v", d, err)
		}
		if got := flatten(v, nil); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s:\n got %v\nwant %v", d, got, want)
		}
	}
}

func TestParseValueDuplicateKeysLikePython(t *testing.T) {
	// json.loads('{"a":1,"b":2,"a":3}') == {"a": 3, "b": 2}: last value, first position.
	v, err := ParseValue([]byte(`{"a":1,"b":2,"a":3}`), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(v.AppendJSON(nil)); got != `{"a":3,"b":2}` {
		t.Errorf("got %s", got)
	}
	// Past the size where a map takes over from the linear scan.
	var b strings.Builder
	b.WriteString("{")
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&b, `"k%d":%d,`, i, i)
	}
	b.WriteString(`"k3":"again"}`)
	v, err = ParseValue([]byte(b.String()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Members) != 40 || v.Members[3].Key != "k3" || v.Members[3].Value.Text != "again" {
		t.Errorf("members = %d, [3] = %+v", len(v.Members), v.Members[3])
	}
}

// NaN, Infinity and -Infinity are not JSON, but Python's json.loads, which
// the engines read bodies (and tool-call arguments) with, takes them as
// floats (Lib/json/scanner.py); so does kvgate, and writes them back as
// they came.
func TestParseValueAcceptsPythonsNonFiniteLiterals(t *testing.T) {
	for _, d := range []string{`NaN`, `Infinity`, `-Infinity`, `[NaN,-Infinity]`} {
		v, err := ParseValue([]byte(d), Limits{})
		if err != nil {
			t.Errorf("%q refused: %v", d, err)
			continue
		}
		if got := string(v.AppendJSON(nil)); got != d {
			t.Errorf("%q written back as %q", d, got)
		}
	}
}

func TestParseValueRejectsWhatEncodingJSONRejects(t *testing.T) {
	for _, d := range []string{`{"a" 1}`, `[1,]`, `{"a":1,}`, `01`, `1.`, `.5`, `-`, `1e`, `tru`, `nul`, `"\x"`, `"a`, `[`, `{`, `nan`, `Inf`, `-NaN`, "\"\x01\"", `'a'`} {
		if _, err := ParseValue([]byte(d), Limits{}); err == nil {
			t.Errorf("%q accepted", d)
		}
		if json.Valid([]byte(d)) {
			t.Errorf("oracle accepts %q; test case is wrong", d)
		}
	}
}

func FuzzParseValue(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, `"\ud83d\ude00"`, `[1e5,-0.1,true]`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseValue(data, Limits{MaxDepth: 32})
		if err != nil {
			var e *Error
			if !asError(err, &e) || (e.Status != 400 && e.Status != 413) {
				t.Fatalf("error %v is not a 400/413 *Error", err)
			}
			return
		}
		// Whatever we accept, encoding/json accepts with the same tokens,
		// except that Go keeps every duplicate key where we keep the last.
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		if !utf8.Valid(data) {
			t.Fatalf("accepted invalid UTF-8 %q", data)
		}
		want, err := tokensOf(data)
		if err != nil {
			t.Fatalf("oracle: %v", err)
		}
		if duplicateKeys(want) {
			return
		}
		if got := flatten(v, nil); strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("tokens differ for %q:\n got %q\nwant %q", data, got, want)
		}
	})
}

// duplicateKeys reports whether an oracle token stream has an object with a
// repeated key, where the two decoders legitimately differ.
func duplicateKeys(tokens []string) bool {
	dup := false
	var walk func(i int) int // returns the index after the value at i
	walk = func(i int) int {
		switch tokens[i] {
		case "json.Delim:{":
			seen := map[string]bool{}
			i++
			for tokens[i] != "json.Delim:}" {
				if seen[tokens[i]] {
					dup = true
				}
				seen[tokens[i]] = true
				i = walk(i + 1)
			}
			return i + 1
		case "json.Delim:[":
			i++
			for tokens[i] != "json.Delim:]" {
				i = walk(i)
			}
			return i + 1
		}
		return i + 1
	}
	walk(0)
	return dup
}

func asError(err error, target **Error) bool { return errors.As(err, target) }
