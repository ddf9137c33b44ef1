package chattemplate

import (
	"bufio"
	"encoding/json"
	"errors"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/extproc/openai"
)

// fixedNow is the clock the oracle (scripts/oracle/render_chat.py) uses.
var fixedNow = time.Date(2026, 3, 7, 9, 5, 3, 0, time.UTC)

func loadModel(t testing.TB, model string) *Config {
	t.Helper()
	dir, err := modelfiles.Model(model)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadDir(dir)
	if err != nil {
		t.Fatalf("load %s: %v (run `make models`)", dir, err)
	}
	return cfg
}

type goldenCase struct {
	Name     string          `json:"name"`
	Model    string          `json:"model"`
	Template *string         `json:"template"`
	Request  json.RawMessage `json:"request"`
	Expected *string         `json:"expected"`
	Error    *string         `json:"error"`
}

func readGolden(t *testing.T) []goldenCase {
	t.Helper()
	f, err := os.Open("testdata/golden_chat.jsonl")
	if err != nil {
		t.Fatalf("%v (run `make golden`)", err)
	}
	defer f.Close()
	var cases []goldenCase
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var c goldenCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("golden line %d: %v", len(cases)+1, err)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 40 {
		t.Fatalf("only %d golden cases", len(cases))
	}
	return cases
}

// TestGoldenChat renders every case of the oracle's golden file and compares
// the prompt byte for byte (or the raised error's message).
func TestGoldenChat(t *testing.T) {
	configs := map[string]*Config{}
	for _, c := range readGolden(t) {
		t.Run(c.Name, func(t *testing.T) {
			cfg, ok := configs[c.Model]
			if !ok {
				cfg = loadModel(t, c.Model)
				configs[c.Model] = cfg
			}
			if c.Template != nil {
				override := *cfg
				override.Templates = map[string]string{"default": *c.Template}
				cfg = &override
			}
			r, err := New(cfg, Options{Now: func() time.Time { return fixedNow }})
			if err != nil {
				t.Fatal(err)
			}
			req, err := openai.ParseChat(c.Request, openai.Limits{})
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			got, err := r.Render(req)
			if c.Error != nil {
				var te *TemplateError
				if !errors.As(err, &te) || te.Message != *c.Error {
					t.Fatalf("error = %v, want TemplateError %q", err, *c.Error)
				}
				return
			}
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if got != *c.Expected {
				t.Errorf("render differs from Python jinja2 at byte %d\n got %q\nwant %q", firstDiff(got, *c.Expected), got, *c.Expected)
			}
			if s := r.Stats(); s.Inexact != 0 {
				t.Errorf("case flagged inexact yet matched: %+v", s)
			}
		})
	}
}

func firstDiff(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func TestGoldenCoversRequiredCases(t *testing.T) {
	var qwen, llama, tools, errs int
	for _, c := range readGolden(t) {
		switch c.Model {
		case "qwen3":
			qwen++
		case "llama3_1":
			llama++
		}
		if strings.Contains(string(c.Request), `"tools"`) {
			tools++
		}
		if c.Error != nil {
			errs++
		}
	}
	if qwen < 30 || llama < 3 || tools < 8 || errs < 2 {
		t.Errorf("coverage: qwen3 %d, llama %d, with tools %d, raising %d", qwen, llama, tools, errs)
	}
}
