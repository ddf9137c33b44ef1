package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// README.md's "Run it locally without Envoy" recipe, run as written: the
// test takes the command lines from the README's marked blocks (so the
// README is the one source of the recipe) and runs each with sh, from a
// folder laid out like the repository (examples/, .cache/models,
// bin/kvgate-lab, which is this test binary acting as kvgate-lab, and
// bin/kvgate, the production binary built for the test). The only change
// is the port numbers: every loopback port in the recipe and in examples/
// is swapped for a free one, the same everywhere, so the run neither
// collides with other tests nor with a user's Redis. A drift between the
// README, examples/ and the binary (a renamed flag, a port that differs
// between the commands and the config, a process that needs a step the
// recipe leaves out) fails here.

// registryStaleness is index.RedisConfig's default RegistryStaleness.
const registryStaleness = 250 * time.Millisecond

const (
	recipeProcessesMarker = "<!-- recipe: processes"
	recipeRequestsMarker  = "<!-- recipe: requests"
	repoRoot              = "../.."
)

// recipeBlock returns the command lines of the fenced sh block after the
// marker: comments and blank lines dropped, backslash continuations
// joined.
func recipeBlock(t *testing.T, md, marker string) []string {
	t.Helper()
	i := strings.Index(md, marker)
	if i < 0 {
		t.Fatalf("README.md has no %q block", marker)
	}
	blocks := fencedBlocks(md[i:])
	if len(blocks) == 0 || blocks[0].lang != "sh" {
		t.Fatalf("README.md: no ```sh block after %q", marker)
	}
	var out []string
	cont := ""
	for _, l := range strings.Split(blocks[0].body, "\n") {
		l = strings.TrimSpace(l)
		if cont == "" && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cont += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		out = append(out, cont+l)
		cont = ""
	}
	return out
}

// loopbackPort finds the ports a recipe line or example file names: a
// loopback address's port, or redis-server's --port.
var loopbackPort = regexp.MustCompile(`(127\.0\.0\.1:|--port )(\d+)\b`)

// freePorts maps every port of texts to a distinct free one (freeport
// never hands one process the same port twice).
func freePorts(t *testing.T, texts []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, s := range texts {
		for _, sub := range loopbackPort.FindAllStringSubmatch(s, -1) {
			if _, ok := m[sub[2]]; ok {
				continue
			}
			m[sub[2]] = strconv.Itoa(freeport.Pick(t))
		}
	}
	return m
}

func rewritePorts(s string, ports map[string]string) string {
	return loopbackPort.ReplaceAllStringFunc(s, func(match string) string {
		sub := loopbackPort.FindStringSubmatch(match)
		return sub[1] + ports[sub[2]]
	})
}

// exampleFiles reads every file under examples/, by path relative to the
// repository root.
func exampleFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(filepath.Join(repoRoot, "examples"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		files[rel] = string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("examples/ is empty")
	}
	return files
}

// Every file under examples/ loads with the real parsers: a kvgate
// configuration with config.Load (its tokenizer directories present, and
// fitting the Envoy file kvgate-lab gateway plays by default), an Envoy
// configuration with the validator and the harness.
func TestExamplesLoad(t *testing.T) {
	for rel := range exampleFiles(t) {
		path := filepath.Join(repoRoot, rel)
		switch filepath.Ext(rel) {
		case ".md":
			continue
		case ".yaml", ".yml":
		default:
			t.Errorf("%s: no parser for this kind of file; teach TestExamplesLoad to load it", rel)
			continue
		}
		cfg, kvErr := config.Load(path)
		if kvErr == nil {
			for i, m := range cfg.Models {
				dir := m.Tokenizer
				if !filepath.IsAbs(dir) {
					dir = filepath.Join(filepath.Dir(path), dir)
				}
				if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
					t.Errorf("%s: models[%d].tokenizer: %v", rel, i, err)
				}
			}
			if _, err := planGateway(gatewayFlags{listen: "127.0.0.1:8080", cfgPath: path}); err != nil {
				t.Errorf("%s: kvgate-lab gateway --config: %v", rel, err)
			}
			continue
		}
		data, _ := os.ReadFile(path)
		if _, envoyErr := envoyharness.ParseConfig(data); envoyErr != nil {
			t.Errorf("%s: neither a kvgate config (%v) nor an Envoy config (%v)", rel, kvErr, envoyErr)
		}
	}
}

// recipeReady says when a recipe process is up: the line it prints.
func recipeReady(line string) (*regexp.Regexp, error) {
	f := strings.Fields(line)
	switch {
	case f[0] == "redis-server":
		return regexp.MustCompile(`Ready to accept connections`), nil
	case (f[0] == "bin/kvgate" || f[0] == "bin/kvgate-lab") && len(f) > 1:
		return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(filepath.Base(f[0])+" "+f[1]) + `: `), nil
	}
	return nil, fmt.Errorf("recipe line %q: not a redis-server, bin/kvgate or bin/kvgate-lab command (teach TestLocalRecipe when it is up)", line)
}

func TestLocalRecipe(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not on PATH: the recipe's requests are curl commands (apt-get install curl)")
	}
	md, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	procLines := recipeBlock(t, string(md), recipeProcessesMarker)
	reqLines := recipeBlock(t, string(md), recipeRequestsMarker)
	examples := exampleFiles(t)
	texts := append(append([]string{}, procLines...), reqLines...)
	for _, s := range examples {
		texts = append(texts, s)
	}
	ports := freePorts(t, texts)

	// A folder laid out like the repository root.
	root := t.TempDir()
	for rel, body := range examples {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(rewritePorts(body, ports)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cache, err := filepath.Abs(filepath.Join(repoRoot, ".cache"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(cache, filepath.Join(root, ".cache")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(kvgateExecutable(t), filepath.Join(root, "bin", "kvgate-lab")); err != nil {
		t.Fatal(err)
	}
	// The production processes (extproc, indexer) are another binary, which
	// this test binary cannot act as: build it, as `make build` does. After
	// `go vet ./...` every package is compiled, so this is mostly the link.
	build := exec.Command("go", "build", "-o", filepath.Join(root, "bin", "kvgate"), "github.com/kvgate/kvgate/cmd/kvgate")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kvgate: %v\n%s", err, out)
	}
	makefile, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{runAsKVGateEnv + "=1"}

	var procs []*testProc
	for _, line := range procLines {
		if f := strings.Fields(line); f[0] == "make" {
			// Set-up this test has had already: the test binary is the
			// build, and the tests need `make models`. The targets must
			// exist.
			for _, target := range f[1:] {
				if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).Match(makefile) {
					t.Errorf("recipe %q: the Makefile has no target %s", line, target)
				}
			}
			continue
		}
		ready, err := recipeReady(line)
		if err != nil {
			t.Fatal(err)
		}
		run := rewritePorts(line, ports)
		p := startProc(t, run, root, env, "sh", "-c", "exec "+run)
		p.waitOutput(t, p.stdout, ready, 2*time.Minute)
		procs = append(procs, p)
	}
	if len(procs) < 5 {
		t.Fatalf("the recipe starts %d processes; want Redis, engines, indexer, extproc and gateway", len(procs))
	}

	cfg, err := config.Load(filepath.Join(root, "examples", "local", "kvgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	indexed := func() uint64 { return indexerBlocksStored(t, cfg.Indexer.Listen) }
	var chats []chatReply
	var decisions []recipeDecision
	before := indexed()
	for _, line := range reqLines {
		if !strings.HasPrefix(line, "curl ") {
			t.Fatalf("recipe request %q is not a curl command", line)
		}
		isChat := strings.Contains(line, "/v1/chat/completions")
		if isChat && len(chats) > 0 {
			// A person types the next request seconds later; by then the
			// engine's KV events for the previous one are in the index
			// (waited for here) and the extproc's snapshot of the index's
			// worker registry, which names the engine that stored them,
			// has been re-read (it is at most index.RedisConfig
			// RegistryStaleness old, 250 ms by default: waited out twice).
			poll.True(t, "the indexer to store a block of the previous request", 30*time.Second, func() bool { return indexed() > before })
			time.Sleep(2 * registryStaleness)
			before = indexed()
		}
		run := rewritePorts(line, ports)
		cmd := exec.Command("sh", "-c", run)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", run, err, out)
		}
		switch {
		case isChat:
			var r chatReply
			if err := json.Unmarshal(out, &r); err != nil || r.Object != "chat.completion" || len(r.Choices) == 0 || r.Usage.PromptTokens == 0 {
				t.Fatalf("%s: not a chat completion (%v):\n%s", run, err, out)
			}
			chats = append(chats, r)
		case strings.Contains(line, "/debug/decisions"):
			if err := json.Unmarshal(out, &decisions); err != nil {
				t.Fatalf("%s: %v\n%s", run, err, out)
			}
		default:
			t.Fatalf("recipe request %q: neither a chat completion nor /debug/decisions (teach TestLocalRecipe what to check)", line)
		}
	}
	if len(chats) < 2 || decisions == nil {
		t.Fatalf("the recipe sends %d chat requests and reads decisions: %v; want two requests sharing a prefix and the decisions", len(chats), decisions != nil)
	}
	// Newest first: [0] is the second request, [1] the first.
	if len(decisions) < 2 {
		t.Fatalf("decisions: %+v", decisions)
	}
	second, first := decisions[0], decisions[1]
	credited := false
	for _, c := range second.Candidates {
		if strings.HasPrefix(c.Worker, first.Endpoint+"#") && c.CachedBlocks.Device > 0 {
			credited = true
		}
	}
	if !credited {
		t.Errorf("the index credited no cached block of the shared prefix to %s, which served the first request: %+v", first.Endpoint, second)
	}
	// Where the second request goes is the picker's call (cache credit
	// against load and measured prefill speed); if it went to the same
	// engine, that engine must have found the prefix in its cache too.
	if second.Endpoint == first.Endpoint && chats[1].Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Errorf("the second request went to %s, which holds the prefix by the index, but the engine reports no cached prompt token: %+v", second.Endpoint, chats[1].Usage)
	}

	// Ctrl-C in each terminal, last started first: each drains and exits 0.
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].signal(syscall.SIGINT)
		if code := procs[i].exitCode(t, 30*time.Second); code != 0 {
			t.Errorf("%s: exit %d after SIGINT", procs[i].name, code)
		}
	}
}

type chatReply struct {
	Object  string            `json:"object"`
	Choices []json.RawMessage `json:"choices"`
	Usage   struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// recipeDecision is the part of /debug/decisions the recipe shows.
type recipeDecision struct {
	Tokens     int    `json:"tokens"`
	Blocks     int    `json:"blocks"`
	Chosen     string `json:"chosen"`
	Endpoint   string `json:"endpoint"`
	Candidates []struct {
		Worker       string `json:"worker"`
		CachedBlocks struct {
			Device int `json:"device"`
		} `json:"cached_blocks"`
	} `json:"candidates"`
}

// indexerBlocksStored sums the blocks the indexer has stored for every
// worker (/status).
func indexerBlocksStored(t *testing.T, listen string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+listen+"/status", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("indexer /status: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var st struct {
		Workers []struct {
			Ingest struct{ BlocksStored uint64 }
		} `json:"workers"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("indexer /status: %v: %s", err, body)
	}
	var n uint64
	for _, w := range st.Workers {
		n += w.Ingest.BlocksStored
	}
	return n
}
