package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// `kvgate tokenize --chat` must reproduce the whole oracle chain: Python
// jinja2's prompt and Hugging Face's ids. Every golden case goes through
// extproc/preprocess's test; the CLI, which loads the tokenizer afresh on
// each run (~0.5 s), takes every fourth.
func TestTokenizeChatMatchesOracles(t *testing.T) {
	// Requests and prompts from Python jinja2's goldens; ids from HF's.
	type render struct {
		Model, Prompt string
		Request       json.RawMessage
	}
	renders := map[string]render{}
	eachLine(t, "../../extproc/chattemplate/testdata/golden_chat.jsonl", func(line []byte) {
		var c struct {
			Name, Model string
			Request     json.RawMessage
			Expected    *string
		}
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		if c.Expected != nil {
			renders[c.Name] = render{c.Model, *c.Expected, c.Request}
		}
	})
	n, line := 0, 0
	eachLine(t, "../../extproc/preprocess/testdata/golden_chat_ids.jsonl", func(b []byte) {
		if line++; line%4 != 1 {
			return
		}
		var c struct {
			Name string
			IDs  []uint32
		}
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		r := renders[c.Name]
		dir, err := modelfiles.Model(r.Model)
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := dispatch([]string{"tokenize", "--tokenizer", dir, "--chat", "--now", "2026-03-07T09:05:03Z"}, bytes.NewReader(r.Request), &out, &errb)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.Name, code, errb.String())
		}
		var got struct {
			Prompt string   `json:"prompt"`
			IDs    []uint32 `json:"ids"`
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if got.Prompt != r.Prompt || !slices.Equal(got.IDs, c.IDs) {
			t.Fatalf("%s: output differs from the oracles\n got %q\nwant %q", c.Name, got.Prompt, r.Prompt)
		}
		n++
	})
	if n < 10 {
		t.Fatalf("only %d cases", n)
	}
}

func eachLine(t *testing.T, path string, each func([]byte)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if len(sc.Bytes()) > 0 {
			each(sc.Bytes())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// Plain mode against the tokenizer goldens (HF binding, add_special_tokens=False).
func TestTokenizeTextMatchesOracle(t *testing.T) {
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "extproc", "tokenizer", "testdata", "golden_qwen3.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	for i, line := range lines[:min(len(lines), 8)] {
		var c struct {
			Text string   `json:"text"`
			IDs  []uint32 `json:"ids"`
		}
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := dispatch([]string{"tokenize", "--tokenizer", dir}, strings.NewReader(c.Text), &out, &errb); code != 0 {
			t.Fatalf("line %d: exit %d: %s", i+1, code, errb.String())
		}
		var got struct {
			IDs []uint32 `json:"ids"`
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil || !slices.Equal(got.IDs, c.IDs) {
			t.Fatalf("line %d: got %s (%v)", i+1, out.String(), err)
		}
	}
}

func TestTokenizeBadInput(t *testing.T) {
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		in   string
		want string
	}{
		{[]string{"tokenize"}, "x", "usage"},
		{[]string{"tokenize", "--tokenizer", t.TempDir()}, "x", "tokenizer.json"},
		{[]string{"tokenize", "--tokenizer", dir}, "\xff\xfe", "UTF-8"},
		{[]string{"tokenize", "--tokenizer", dir, "--chat"}, `{"model":"m","messages":[{"role":"user","content":1}]}`, "messages[0].content"},
		{[]string{"tokenize", "--tokenizer", dir, "--chat"}, `{"model":`, "JSON"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		if code := dispatch(c.args, strings.NewReader(c.in), &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("%v %q: exit %d, stderr %q, want one line mentioning %q", c.args, c.in, code, errb.String(), c.want)
		}
	}
}
