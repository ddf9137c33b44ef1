package benchmarks

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/kvgate/kvgate/extproc/tokenizer"
)

// TokenizerOptions sizes the tokenizer benchmark. Zero fields take the
// defaults noted.
type TokenizerOptions struct {
	RepoRoot  string        // holds extproc/tokenizer/testdata and scripts/oracle; default: the go.mod directory above the working directory
	ModelsDir string        // default $KVGATE_MODELS_DIR, else <RepoRoot>/.cache/models (`make models`)
	OracleDir string        // npm tokenizers install; default <RepoRoot>/.cache/oracle (`make golden`)
	Models    []string      // default qwen3, llama3_1
	Phase     time.Duration // minimum length of each warm measurement; default 2s
	ColdRuns  int           // cold-cache passes over the corpus (each after a cache reset); default 5
	Command   string        // the command line shown in the report; default "kvgate-lab bench"
	NoOracle  bool          // skip the Hugging Face binding measurement
}

func (o *TokenizerOptions) fill() error {
	if o.RepoRoot == "" {
		root, err := findRepoRoot()
		if err != nil {
			return err
		}
		o.RepoRoot = root
	}
	if o.ModelsDir == "" {
		o.ModelsDir = os.Getenv("KVGATE_MODELS_DIR")
	}
	if o.ModelsDir == "" {
		o.ModelsDir = filepath.Join(o.RepoRoot, ".cache", "models")
	}
	if o.OracleDir == "" {
		o.OracleDir = filepath.Join(o.RepoRoot, ".cache", "oracle")
	}
	if len(o.Models) == 0 {
		o.Models = []string{"qwen3", "llama3_1"}
	} else {
		o.Models = slices.Clone(o.Models)
	}
	if o.Phase == 0 {
		o.Phase = 2 * time.Second
	}
	if o.ColdRuns == 0 {
		o.ColdRuns = 5
	}
	if o.Command == "" {
		o.Command = "kvgate-lab bench"
	}
	switch {
	case o.Phase < 0 || o.Phase > 10*time.Minute:
		return fmt.Errorf("tokenizer benchmark: phase %v out of range (0, 10m]", o.Phase)
	case o.ColdRuns < 0 || o.ColdRuns > 1000:
		return fmt.Errorf("tokenizer benchmark: cold runs %d out of range [1, 1000]", o.ColdRuns)
	}
	for _, m := range o.Models {
		if m == "" || strings.ContainsAny(m, `/\`) || m == "." || m == ".." {
			return fmt.Errorf("tokenizer benchmark: bad model name %q", m)
		}
	}
	return nil
}

func findRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("tokenizer benchmark: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("tokenizer benchmark: no go.mod above the working directory; set RepoRoot")
		}
		dir = parent
	}
}

// TokenizerRow is one model's figures.
type TokenizerRow struct {
	Model         string
	Texts, Tokens int // corpus size
	Exact         int // texts whose ids equal the golden ids
	WarmPerSec    float64
	ColdPerSec    float64
	OraclePerSec  float64 // 0 when not measured
	OracleNote    string  // why the oracle was not measured
}

// Tokenizer measures extproc/tokenizer on the golden corpus (the texts of
// testdata/golden_<model>.jsonl) on one core, warm and cold word cache, and
// Hugging Face's Node binding on the same texts in the same run (encodeBatch,
// one thread), and writes a Markdown section.
func Tokenizer(ctx context.Context, w io.Writer, opt TokenizerOptions) error {
	if err := opt.fill(); err != nil {
		return err
	}
	var rows []TokenizerRow
	for _, m := range opt.Models {
		row, err := benchTokenizerModel(ctx, m, opt)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	return writeTokenizerReport(ctx, w, rows, opt)
}

type tokenizerCase struct {
	Text string   `json:"text"`
	IDs  []uint32 `json:"ids"`
}

func readTokenizerCorpus(path string) ([]tokenizerCase, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer benchmark: %w", err)
	}
	defer f.Close()
	var cases []tokenizerCase
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var c tokenizerCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("tokenizer benchmark: %s line %d: %w", path, line, err)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokenizer benchmark: %s: %w", path, err)
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("tokenizer benchmark: %s is empty", path)
	}
	return cases, nil
}

func benchTokenizerModel(ctx context.Context, model string, opt TokenizerOptions) (TokenizerRow, error) {
	row := TokenizerRow{Model: model}
	corpusPath := filepath.Join(opt.RepoRoot, "extproc", "tokenizer", "testdata", "golden_"+model+".jsonl")
	cases, err := readTokenizerCorpus(corpusPath)
	if err != nil {
		return row, err
	}
	tok, err := tokenizer.Load(filepath.Join(opt.ModelsDir, model))
	if err != nil {
		return row, fmt.Errorf("tokenizer benchmark: %w (run `make models`)", err)
	}
	row.Texts = len(cases)
	dst := make([]uint32, 0, 1<<16)
	for _, c := range cases {
		row.Tokens += len(c.IDs)
		dst = tok.EncodeAppend(dst[:0], c.Text)
		if slices.Equal(dst, c.IDs) {
			row.Exact++
		}
	}

	// One core: the encoder is single-goroutine; GOMAXPROCS 1 keeps the
	// garbage collector on the same core too.
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	pass := func() {
		for _, c := range cases {
			dst = tok.EncodeAppend(dst[:0], c.Text)
		}
	}
	var cold time.Duration
	for range opt.ColdRuns {
		if err := ctx.Err(); err != nil {
			return row, err
		}
		tok.ResetWordCache()
		start := time.Now()
		pass()
		cold += time.Since(start)
	}
	row.ColdPerSec = float64(row.Tokens*opt.ColdRuns) / cold.Seconds()
	pass() // fill the cache
	passes, start := 0, time.Now()
	for time.Since(start) < opt.Phase {
		if err := ctx.Err(); err != nil {
			return row, err
		}
		pass()
		passes++
	}
	row.WarmPerSec = float64(row.Tokens*passes) / time.Since(start).Seconds()
	runtime.GOMAXPROCS(prev)

	if opt.NoOracle {
		row.OracleNote = "skipped"
		return row, nil
	}
	row.OraclePerSec, row.OracleNote = measureOracle(ctx, model, corpusPath, opt)
	return row, nil
}

// measureOracle runs scripts/oracle/tokenizer_bench.js; any failure becomes
// a note in the table rather than an error, since node and the binding are
// optional on a benchmark machine.
func measureOracle(ctx context.Context, model, corpusPath string, opt TokenizerOptions) (float64, string) {
	node, err := exec.LookPath("node")
	if err != nil {
		return 0, "node not installed"
	}
	if _, err := os.Stat(filepath.Join(opt.OracleDir, "node_modules", "tokenizers")); err != nil {
		return 0, "npm tokenizers not installed (`make golden`)"
	}
	script := filepath.Join(opt.RepoRoot, "scripts", "oracle", "tokenizer_bench.js")
	cmd := exec.CommandContext(ctx, node, script, opt.OracleDir, filepath.Join(opt.ModelsDir, model, "tokenizer.json"),
		corpusPath, fmt.Sprintf("%.3f", opt.Phase.Seconds()))
	// One thread, like the Go figure: the Rust core parallelises batches
	// with rayon unless told not to.
	cmd.Env = append(os.Environ(), "TOKENIZERS_PARALLELISM=false", "RAYON_NUM_THREADS=1")
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Sprintf("binding failed: %v", err)
	}
	var res struct {
		TokensPerSec float64 `json:"tokens_per_s"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.TokensPerSec <= 0 {
		return 0, fmt.Sprintf("binding printed %q", strings.TrimSpace(string(out)))
	}
	return res.TokensPerSec, ""
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func writeTokenizerReport(ctx context.Context, w io.Writer, rows []TokenizerRow, opt TokenizerOptions) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## Tokenizer\n\n")
	fmt.Fprintf(&b, "Machine: %s, %d CPUs, %s, %s/%s (uname -m: %s). Command: `%s`.\n\n",
		cpuModel(), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, machineArch(ctx), opt.Command)
	fmt.Fprintf(&b, "Corpus: the texts of extproc/tokenizer/testdata/golden_<model>.jsonl (prose in many scripts, code, "+
		"emoji, whitespace runs, numbers, special tokens, four 20–35 KB documents). kvgate: extproc/tokenizer on one core "+
		"(GOMAXPROCS 1); cold = each of %d passes after emptying the word cache, warm = repeated passes for %v. "+
		"Hugging Face = the official Node binding (npm tokenizers 0.23.2, Rust core) measured in the same run with "+
		"encodeBatch over the whole corpus, one thread (TOKENIZERS_PARALLELISM=false, RAYON_NUM_THREADS=1).\n\n", opt.ColdRuns, opt.Phase)
	b.WriteString("| model | texts | tokens | exact vs golden | kvgate cold tok/s | kvgate warm tok/s | HF binding tok/s | warm × HF |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		oracle, ratio := r.OracleNote, ""
		if r.OraclePerSec > 0 {
			oracle = fmt.Sprintf("%.0f", r.OraclePerSec)
			ratio = fmt.Sprintf("%.1f", r.WarmPerSec/r.OraclePerSec)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d/%d | %.0f | %.0f | %s | %s |\n",
			r.Model, r.Texts, r.Tokens, r.Exact, r.Texts, r.ColdPerSec, r.WarmPerSec, oracle, ratio)
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("tokenizer benchmark: write report: %w", err)
	}
	return nil
}
