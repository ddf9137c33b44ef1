package preprocess

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
)

// chatCase joins a golden chat render (request and prompt, written by
// Python jinja2: extproc/chattemplate/testdata/golden_chat.jsonl) with its
// token ids (written by Hugging Face's binding: testdata/golden_chat_ids.jsonl).
type chatCase struct {
	Name, Model string
	Request     json.RawMessage
	Prompt      string
	IDs         []uint32
}

func readJSONL(t testing.TB, path string, each func(line []byte)) {
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

// goldenChatCases returns every golden case that has token ids; root is the
// repository root relative to the caller's working directory.
func goldenChatCases(t testing.TB, root string) []chatCase {
	t.Helper()
	renders := map[string]chatCase{}
	readJSONL(t, root+"/extproc/chattemplate/testdata/golden_chat.jsonl", func(line []byte) {
		var c struct {
			Name     string          `json:"name"`
			Model    string          `json:"model"`
			Request  json.RawMessage `json:"request"`
			Expected *string         `json:"expected"`
		}
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		if c.Expected != nil {
			renders[c.Name] = chatCase{Name: c.Name, Model: c.Model, Request: c.Request, Prompt: *c.Expected}
		}
	})
	var out []chatCase
	readJSONL(t, root+"/extproc/preprocess/testdata/golden_chat_ids.jsonl", func(line []byte) {
		var c struct {
			Name string   `json:"name"`
			IDs  []uint32 `json:"ids"`
		}
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		r, ok := renders[c.Name]
		if !ok {
			t.Fatalf("ids for %q but no render", c.Name)
		}
		r.IDs = c.IDs
		out = append(out, r)
	})
	return out
}
