package tokenizer

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// modelsDir is $KVGATE_MODELS_DIR or <repo root>/.cache/models, where
// `make models` puts the tokenizer files.
func modelsDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("KVGATE_MODELS_DIR"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, ".cache", "models")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory; set KVGATE_MODELS_DIR")
		}
		dir = parent
	}
}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*Tokenizer{}
)

// loadModel loads (once per test binary) a model from the models dir; a
// missing model fails the test: the goldens are meaningless without it.
func loadModel(t testing.TB, name string) *Tokenizer {
	t.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if tok, ok := loaded[name]; ok {
		return tok
	}
	dir := filepath.Join(modelsDir(t), name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatalf("model %s missing (%v): run `make models`", name, err)
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	loaded[name] = tok
	return tok
}

func readModelFile(t testing.TB, name string) []byte {
	t.Helper()
	path := filepath.Join(modelsDir(t), name, "tokenizer.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run `make models`", err)
	}
	return data
}

type goldenCase struct {
	Text string   `json:"text"`
	IDs  []uint32 `json:"ids"`
}

// readGolden reads testdata/<name> (or <name>.gz) as JSON lines.
func readGolden(t testing.TB, name string) []json.RawMessage {
	t.Helper()
	path := filepath.Join("testdata", name)
	f, err := os.Open(path)
	var r io.Reader = f
	if os.IsNotExist(err) {
		f, err = os.Open(path + ".gz")
		if err == nil {
			gz, gzErr := gzip.NewReader(f)
			if gzErr != nil {
				t.Fatal(gzErr)
			}
			r = gz
		}
	}
	if err != nil {
		t.Fatalf("%v (regenerate with scripts/golden-tokenizer.sh)", err)
	}
	defer f.Close()
	var lines []json.RawMessage
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			lines = append(lines, json.RawMessage(append([]byte(nil), sc.Bytes()...)))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

func readCases(t testing.TB, name string) []goldenCase {
	t.Helper()
	var cases []goldenCase
	for i, line := range readGolden(t, name) {
		var c goldenCase
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatalf("%s line %d: %v", name, i+1, err)
		}
		cases = append(cases, c)
	}
	return cases
}
