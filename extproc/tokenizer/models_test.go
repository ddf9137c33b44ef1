package tokenizer

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

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
	dir, err := modelfiles.Model(name)
	if err != nil {
		t.Fatal(err)
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
	dir, err := modelfiles.Model(name)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokenizer.json")
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
