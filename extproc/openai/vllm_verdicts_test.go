package openai

import (
	"bufio"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

// verdictRow is one line of testdata/vllm_verdicts.tsv, written by
// testdata/gen_vllm_verdicts.py with pydantic v2 against vLLM's request
// models (the script names the files and commits it transcribes).
type verdictRow struct {
	line     int
	endpoint string
	accept   bool
	facts    map[string]any
	body     []byte
	why      string
}

func loadVerdicts(t *testing.T) []verdictRow {
	t.Helper()
	f, err := os.Open("testdata/vllm_verdicts.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []verdictRow
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 5 {
			t.Fatalf("line %d: %d columns", n, len(cols))
		}
		r := verdictRow{line: n, endpoint: cols[0], accept: cols[1] == "accept", why: cols[4]}
		if cols[1] != "accept" && cols[1] != "refuse" {
			t.Fatalf("line %d: verdict %q", n, cols[1])
		}
		if r.accept {
			if err := json.Unmarshal([]byte(cols[2]), &r.facts); err != nil {
				t.Fatalf("line %d facts: %v", n, err)
			}
		}
		var latin1 string
		if err := json.Unmarshal([]byte(cols[3]), &latin1); err != nil {
			t.Fatalf("line %d body: %v", n, err)
		}
		for _, c := range latin1 { // one byte per code point (the script wrote bytes as Latin-1)
			r.body = append(r.body, byte(c))
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// kvgate accepts exactly the bodies vLLM's models accept, and reads from
// them what vLLM's models hold (max_tokens, stream, the chat-template
// flags, the prompt's shape and values); it refuses the rest with a 400.
func TestParseAgreesWithVLLMVerdicts(t *testing.T) {
	rows := loadVerdicts(t)
	if len(rows) < 50 {
		t.Fatalf("only %d rows in the verdict table", len(rows))
	}
	for _, r := range rows {
		var got map[string]any
		var err error
		switch r.endpoint {
		case "chat":
			var c *ChatRequest
			if c, err = ParseChat(r.body, Limits{}); err == nil {
				got = map[string]any{"stream": c.Stream, "add_generation_prompt": c.AddGenerationPrompt,
					"continue_final_message": c.ContinueFinalMessage, "max_tokens": nil}
				if c.HasMaxTokens {
					got["max_tokens"] = float64(c.MaxTokens)
				}
			}
		case "completion":
			var c *CompletionRequest
			if c, err = ParseCompletion(r.body, Limits{}); err == nil {
				got = map[string]any{"stream": c.Stream, "prompt": promptFacts(c.Prompts)}
				if c.HasMaxTokens {
					got["max_tokens"] = float64(c.MaxTokens)
				}
			}
		default:
			t.Fatalf("line %d: endpoint %q", r.line, r.endpoint)
		}
		switch {
		case r.accept && err != nil:
			t.Errorf("line %d: vLLM serves %q, kvgate refuses it: %v", r.line, r.body, err)
		case !r.accept && err == nil:
			t.Errorf("line %d: vLLM refuses %q (%s), kvgate accepts it", r.line, r.body, r.why)
		case !r.accept:
			checkRejection(t, err)
		case !reflect.DeepEqual(got, r.facts):
			t.Errorf("line %d: %q read as %v, vLLM holds %v", r.line, r.body, got, r.facts)
		}
	}
}

// promptFacts writes prompts as the table does.
func promptFacts(ps []Prompt) map[string]any {
	if len(ps) == 1 && ps[0].IsTokens {
		return map[string]any{"tokens": ids(ps[0].TokenIDs)}
	}
	if len(ps) > 0 && ps[0].IsTokens {
		lists := []any{}
		for _, p := range ps {
			lists = append(lists, ids(p.TokenIDs))
		}
		return map[string]any{"token_lists": lists}
	}
	texts := []any{}
	for _, p := range ps {
		texts = append(texts, p.Text)
	}
	return map[string]any{"texts": texts}
}

func ids(t []uint32) []any {
	out := []any{}
	for _, id := range t {
		out = append(out, float64(id))
	}
	return out
}
