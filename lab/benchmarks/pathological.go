package benchmarks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/tokenizer"
)

// PathologicalOptions sizes the pathological-input benchmark (issue 15
// item 5). Zero fields take the defaults noted.
type PathologicalOptions struct {
	RepoRoot  string // default: the go.mod directory above the working directory
	ModelsDir string // default $KVGATE_MODELS_DIR, else <RepoRoot>/.cache/models
	OracleDir string // npm tokenizers install; default <RepoRoot>/.cache/oracle
	Model     string // default qwen3
	Command   string // the command line shown in the report
	NoOracle  bool   // skip the Hugging Face binding
}

// pathologicalInput is one text fed to both tokenizers.
type pathologicalInput struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// pathologicalInputs are the shapes issue 15 named (long runs of one
// character, huge words) and the cheaper shapes an attacker falls back to
// when those are refused, with ordinary prose as the reference. Each
// fills what an 8 MiB body can carry.
func pathologicalInputs() []pathologicalInput {
	const size = 8<<20 - 256 // the JSON around the prompt
	run := func(s string, size int) string { return strings.Repeat(s, size/len(s)) }
	rng := rand.New(rand.NewPCG(15, 5))
	var words strings.Builder
	for words.Len() < 4<<20 {
		words.WriteByte(' ')
		for range 48 {
			words.WriteByte(byte('a' + rng.IntN(26)))
		}
	}
	var runs strings.Builder
	for runs.Len() < 6<<20 {
		runs.WriteString(" " + strings.Repeat("a", 200<<10))
	}
	prose := "The quarterly report covers revenue, costs and the outlook for next year; each section ends with a summary. "
	return []pathologicalInput{
		{"8 MiB of \"a\"", run("a", size)},
		{"8 MiB of spaces", run(" ", size)},
		{"4 MiB of newlines (8 MiB as JSON)", run("\n", size/2)},
		{"8 MiB of \"中\"", run("中", size)},
		{"6 MiB: 200 KiB runs of \"a\"", runs.String()},
		{"4 MiB: random 48-letter words", words.String()},
		{"4 MiB of prose (reference)", run(prose, 4<<20)},
	}
}

// PathologicalRow is one input's figures.
type PathologicalRow struct {
	Name           string
	Bytes, Tokens  int
	Unbounded      time.Duration // kvgate's encoder with no limits (the behaviour before issue 15)
	Oracle         time.Duration // HF binding, one encode call; 0 when not measured
	OracleNote     string
	OracleAgrees   bool   // same token count and checksum
	Outcome        string // what the request path answers with the shipped limits
	BoundedElapsed time.Duration
}

// Pathological measures, per input: kvgate's tokenizer unbounded, the
// Hugging Face binding on the same text in the same run, and the whole
// preprocessing of a chat request carrying it under the shipped
// extproc.preprocess defaults (what a client gets, and how fast).
func Pathological(ctx context.Context, w io.Writer, opt PathologicalOptions) error {
	topt := TokenizerOptions{RepoRoot: opt.RepoRoot, ModelsDir: opt.ModelsDir, OracleDir: opt.OracleDir}
	if err := topt.fill(); err != nil {
		return err
	}
	if opt.Model == "" {
		opt.Model = "qwen3"
	}
	if opt.Command == "" {
		opt.Command = "kvgate-lab bench --only pathological"
	}
	dir := filepath.Join(topt.ModelsDir, opt.Model)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return fmt.Errorf("pathological benchmark: %w (run `make models`)", err)
	}
	x := config.Default().Extproc
	reg, err := preprocess.New([]config.Model{{Name: opt.Model, BlockSize: 16, Tokenizer: dir}}, preprocess.OptionsFor(x.Preprocess, x.MaxBodyBytes, ""))
	if err != nil {
		return fmt.Errorf("pathological benchmark: %w", err)
	}
	inputs := pathologicalInputs()
	rows := make([]PathologicalRow, len(inputs))
	sums := make([]uint32, len(inputs))
	prev := runtime.GOMAXPROCS(1) // one core, like the binding's one thread
	defer runtime.GOMAXPROCS(prev)
	for i, in := range inputs {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := &rows[i]
		r.Name, r.Bytes = in.Name, len(in.Text)
		start := time.Now()
		ids := tok.EncodeAppend(make([]uint32, 0, len(in.Text)/4), in.Text)
		r.Unbounded = time.Since(start)
		r.Tokens, sums[i] = len(ids), idsChecksum(ids)

		body, err := json.Marshal(map[string]any{"model": opt.Model, "messages": []map[string]string{{"role": "user", "content": in.Text}}})
		if err != nil {
			return err
		}
		start = time.Now()
		_, err = reg.ChatContext(ctx, body)
		r.BoundedElapsed = time.Since(start)
		r.Outcome = outcomeOf(err)
	}
	runtime.GOMAXPROCS(prev)
	if opt.NoOracle {
		for i := range rows {
			rows[i].OracleNote = "skipped"
		}
	} else {
		measurePathologicalOracle(ctx, inputs, rows, sums, filepath.Join(dir, "tokenizer.json"), topt)
	}
	return writePathologicalReport(ctx, w, rows, x.Preprocess, opt)
}

// idsChecksum is scripts/oracle/tokenizer_pathological.js's checksum.
func idsChecksum(ids []uint32) uint32 {
	var h uint32
	for _, id := range ids {
		h = h*31 + id + 1
	}
	return h
}

func outcomeOf(err error) string {
	var oe *openai.Error
	switch {
	case err == nil:
		return "routed"
	case errors.As(err, &oe):
		key := ""
		switch {
		case strings.Contains(oe.Message, "max_word_bytes"):
			key = "max_word_bytes"
		case strings.Contains(oe.Message, "tokens"):
			key = "max_prompt_tokens"
		case oe.Code == "preprocess_timeout":
			key = "timeout"
		case oe.Code == "request_too_large":
			key = "max_body_bytes"
		}
		return fmt.Sprintf("%d %s", oe.Status, key)
	}
	return "error: " + err.Error()
}

// measurePathologicalOracle runs the binding on every input in one node
// process; a failure becomes the rows' note (node and the binding are
// optional on a benchmark machine).
func measurePathologicalOracle(ctx context.Context, inputs []pathologicalInput, rows []PathologicalRow, sums []uint32, tokPath string, opt TokenizerOptions) {
	note := func(s string) {
		for i := range rows {
			rows[i].OracleNote = s
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		note("node not installed")
		return
	}
	if _, err := os.Stat(filepath.Join(opt.OracleDir, "node_modules", "tokenizers")); err != nil {
		note("npm tokenizers not installed (`make golden`)")
		return
	}
	f, err := os.CreateTemp("", "kvgate-pathological-*.jsonl")
	if err != nil {
		note(err.Error())
		return
	}
	defer os.Remove(f.Name())
	enc := json.NewEncoder(f)
	for _, in := range inputs {
		if err := enc.Encode(in); err != nil {
			f.Close()
			note(err.Error())
			return
		}
	}
	f.Close()
	cmd := exec.CommandContext(ctx, node, filepath.Join(opt.RepoRoot, "scripts", "oracle", "tokenizer_pathological.js"), opt.OracleDir, tokPath, f.Name())
	cmd.Env = append(os.Environ(), "TOKENIZERS_PARALLELISM=false", "RAYON_NUM_THREADS=1")
	out, err := cmd.Output()
	if err != nil {
		note(fmt.Sprintf("binding failed: %v", err))
		return
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for i := 0; sc.Scan() && i < len(rows); i++ {
		var res struct {
			Name     string  `json:"name"`
			Tokens   int     `json:"tokens"`
			Checksum uint32  `json:"checksum"`
			Seconds  float64 `json:"seconds"`
		}
		if err := json.Unmarshal(sc.Bytes(), &res); err != nil || res.Name != rows[i].Name {
			rows[i].OracleNote = fmt.Sprintf("binding printed %q", sc.Text())
			continue
		}
		rows[i].Oracle = time.Duration(res.Seconds * float64(time.Second))
		rows[i].OracleAgrees = res.Tokens == rows[i].Tokens && res.Checksum == sums[i]
	}
}

func writePathologicalReport(ctx context.Context, w io.Writer, rows []PathologicalRow, p preprocess.Config, opt PathologicalOptions) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## Tokenizer on pathological inputs (issue 15)\n\n")
	fmt.Fprintf(&b, "Machine: %s, %d CPUs, %s (uname -m: %s). Command: `%s`. Model %s.\n\n",
		cpuModel(), runtime.NumCPU(), runtime.Version(), machineArch(ctx), opt.Command, opt.Model)
	fmt.Fprintf(&b, "Each input once, one core: kvgate's encoder with no limits (the behaviour before issue 15), and Hugging Face's "+
		"Node binding (npm tokenizers 0.23.2, Rust core, one thread, one encode call; ids compared by count and checksum) on the same "+
		"text in the same run. Then a chat request carrying the text through the request path with the shipped limits "+
		"(extproc.preprocess: max_word_bytes %d, max_prompt_tokens %d, timeout %s): what the client gets, and when.\n\n",
		p.MaxWordBytes, p.MaxPromptTokens, p.Timeout.D())
	b.WriteString("| input | bytes | tokens | HF binding | kvgate unbounded | HF ÷ kvgate | same ids | request path (shipped limits) | answered after |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|:-:|---|---:|\n")
	for _, r := range rows {
		oracle, ratio, same := r.OracleNote, "", ""
		if r.Oracle > 0 {
			oracle = fmtDur(r.Oracle)
			ratio = fmt.Sprintf("%.1f×", r.Oracle.Seconds()/r.Unbounded.Seconds())
			same = map[bool]string{true: "yes", false: "**no**"}[r.OracleAgrees]
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %s | %s | %s |\n",
			r.Name, r.Bytes, r.Tokens, oracle, fmtDur(r.Unbounded), ratio, same, r.Outcome, fmtDur(r.BoundedElapsed))
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("pathological benchmark: write report: %w", err)
	}
	return nil
}

// fmtDur is dur with seconds for the multi-second rows.
func fmtDur(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return dur(d)
}
