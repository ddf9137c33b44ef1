package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/lab/benchmarks"
	"github.com/kvgate/kvgate/lab/testkit/redistest"
)

func init() {
	register("bench", cli.Command{
		Summary: "run the benchmarks and write BENCHMARKS.md (--out, --only section,... ; --list names the sections)",
		Run:     runBench,
	})
}

// benchSection writes one section of BENCHMARKS.md.
type benchSection struct {
	name string
	run  func(ctx context.Context, w io.Writer, phase time.Duration) error
}

var benchSections = []benchSection{
	{"index", benchIndex},
	{"tokenizer", benchTokenizer},
	{"preprocess", benchPreprocess},
	{"extproc", benchExtproc},
	{"routing", benchRouting},
}

// registerBench adds a section from its own file (bench_<name>.go), so a
// new benchmark touches nothing else; sections run in registration order.
func registerBench(name string, run func(ctx context.Context, w io.Writer, phase time.Duration) error) {
	for _, s := range benchSections {
		if s.name == name {
			panic("kvgate: duplicate bench section " + name)
		}
	}
	benchSections = append(benchSections, benchSection{name, run})
}

func runBench(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate-lab bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "BENCHMARKS.md", "Markdown file to write ('-' = stdout)")
	only := fs.String("only", "", "comma-separated sections to run (default: all)")
	phase := fs.Duration("phase", 2*time.Second, "length of each measured phase")
	list := fs.Bool("list", false, "print the section names and exit")
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	if *list {
		for _, s := range benchSections {
			fmt.Fprintln(stdout, s.name)
		}
		return 0
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	for name := range want {
		found := false
		for _, s := range benchSections {
			found = found || s.name == name
		}
		if !found {
			fmt.Fprintf(stderr, "kvgate-lab bench: unknown section %q\n", name)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var doc bytes.Buffer
	fmt.Fprintf(&doc, "# kvgate benchmarks\n\nWritten by `make bench` (`kvgate-lab bench %s`) on %s.\n", strings.Join(args, " "), time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&doc, "Machine: %d CPUs (GOMAXPROCS %d), %s/%s, %s. Shared machines are noisy: compare the ratios to the baseline measured in the same run, not absolute figures across runs.\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	var ran []renderedSection
	for _, s := range benchSections {
		if len(want) > 0 && !want[s.name] {
			continue
		}
		fmt.Fprintf(stderr, "kvgate-lab bench: %s…\n", s.name)
		var body bytes.Buffer
		if err := s.run(ctx, &body, *phase); err != nil {
			fmt.Fprintf(stderr, "kvgate-lab bench: %s: %v\n", s.name, err)
			return 1
		}
		ran = append(ran, renderedSection{s.name, body.Bytes()})
		doc.WriteString("\n")
		writeMarkedSection(&doc, s.name, body.Bytes())
	}
	if *out == "-" {
		stdout.Write(doc.Bytes())
		return 0
	}
	if len(want) > 0 {
		// --only replaces its own sections in the file and keeps the rest.
		if old, err := os.ReadFile(*out); err == nil {
			doc.Reset()
			doc.Write(mergeBenchSections(old, ran))
		} else if !os.IsNotExist(err) {
			fmt.Fprintf(stderr, "kvgate-lab bench: %v\n", err)
			return 1
		}
	}
	if err := os.WriteFile(*out, doc.Bytes(), 0o644); err != nil {
		fmt.Fprintf(stderr, "kvgate-lab bench: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "kvgate-lab bench: wrote %s\n", *out)
	return 0
}

// renderedSection is one section's Markdown, as its run wrote it.
type renderedSection struct {
	name string
	body []byte
}

// Each section is written between HTML comments (invisible in rendered
// Markdown) naming it, so that a later `--only` run finds and replaces
// exactly that section.
func benchMarkers(name string) (begin, end string) {
	return "<!-- bench:" + name + " -->\n", "<!-- /bench:" + name + " -->\n"
}

func writeMarkedSection(w *bytes.Buffer, name string, body []byte) {
	begin, end := benchMarkers(name)
	w.WriteString(begin)
	w.Write(body)
	if len(body) > 0 && body[len(body)-1] != '\n' {
		w.WriteByte('\n')
	}
	w.WriteString(end)
}

// mergeBenchSections puts each section into old in place of its previous
// version and leaves everything else as it was. The previous version is
// found by its markers; in a file written before markers existed, by the
// section's first "## " heading, up to the next heading the new version
// does not have; a section found neither way is appended.
func mergeBenchSections(old []byte, sections []renderedSection) []byte {
	doc := string(old)
	for _, s := range sections {
		var b bytes.Buffer
		writeMarkedSection(&b, s.name, s.body)
		begin, end := benchMarkers(s.name)
		if i := strings.Index(doc, begin); i >= 0 {
			if j := strings.Index(doc[i:], end); j >= 0 {
				doc = doc[:i] + b.String() + doc[i+j+len(end):]
				continue
			}
		}
		if i, j, ok := headingSpan(doc, s.body); ok {
			if j < len(doc) {
				b.WriteString("\n") // the blank line before the next heading
			}
			doc = doc[:i] + b.String() + doc[j:]
			continue
		}
		if !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		doc += "\n" + b.String()
	}
	return []byte(doc)
}

// headingSpan is where, in an unmarked doc, the old version of a section
// whose new body is body lies: from the line of body's first "## " heading
// to the next "## " line (or marker) that body does not contain.
func headingSpan(doc string, body []byte) (int, int, bool) {
	var first string
	own := map[string]bool{}
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "## ") {
			if first == "" {
				first = l
			}
			own[l] = true
		}
	}
	if first == "" {
		return 0, 0, false
	}
	i := -1
	for off := 0; off < len(doc); {
		k := strings.Index(doc[off:], first+"\n")
		if k < 0 {
			break
		}
		if at := off + k; at == 0 || doc[at-1] == '\n' {
			i = at
			break
		}
		off += k + 1
	}
	if i < 0 {
		return 0, 0, false
	}
	j := i + len(first) + 1
	for j < len(doc) {
		nl := strings.IndexByte(doc[j:], '\n')
		line := doc[j:]
		if nl >= 0 {
			line = doc[j : j+nl]
		}
		if (strings.HasPrefix(line, "## ") && !own[line]) || strings.HasPrefix(line, "<!-- bench:") {
			break
		}
		if nl < 0 {
			j = len(doc)
			break
		}
		j += nl + 1
	}
	return i, j, true
}

// benchIndex measures the in-memory backend, Redis standalone and a
// 3-master Redis Cluster, each on real redis-server processes started on
// free loopback ports.
func benchIndex(ctx context.Context, w io.Writer, phase time.Duration) error {
	standalone, err := redistest.StartStandalone(ctx, redistest.Options{})
	if err != nil {
		return err
	}
	defer standalone.Close()
	cluster, err := redistest.StartCluster(ctx, redistest.ClusterOptions{Masters: 3})
	if err != nil {
		return err
	}
	defer cluster.Close()
	backends := map[string]kvindex.Index{"memory": kvindex.NewMemory(kvindex.MemoryConfig{})}
	rs, err := kvindex.NewRedis(ctx, kvindex.RedisConfig{Client: standalone.Client()})
	if err != nil {
		return err
	}
	backends["redis"] = rs
	rc, err := kvindex.NewRedis(ctx, kvindex.RedisConfig{Client: cluster.Client()})
	if err != nil {
		return err
	}
	backends["redis-cluster"] = rc
	defer func() {
		for _, b := range backends {
			b.Close()
		}
	}()
	return benchmarks.Index(ctx, w, backends, benchmarks.IndexOptions{Phase: phase})
}

func benchTokenizer(ctx context.Context, w io.Writer, phase time.Duration) error {
	return benchmarks.Tokenizer(ctx, w, benchmarks.TokenizerOptions{Phase: phase, Command: "make bench"})
}

func benchPreprocess(ctx context.Context, w io.Writer, phase time.Duration) error {
	return benchmarks.Preprocess(ctx, w, benchmarks.PreprocessOptions{Phase: phase, Command: "make bench"})
}

// benchExtproc measures decision overhead with the in-memory index and a
// 3-master Redis Cluster on real redis-server processes.
func benchExtproc(ctx context.Context, w io.Writer, phase time.Duration) error {
	cluster, err := redistest.StartCluster(ctx, redistest.ClusterOptions{Masters: 3})
	if err != nil {
		return err
	}
	defer cluster.Close()
	rc, err := kvindex.NewRedis(ctx, kvindex.RedisConfig{Client: cluster.Client()})
	if err != nil {
		return err
	}
	defer rc.Close()
	mem := kvindex.NewMemory(kvindex.MemoryConfig{})
	return benchmarks.Extproc(ctx, w, map[string]kvindex.Index{"memory": mem, "redis-cluster": rc}, benchmarks.ExtprocOptions{Phase: phase, Command: "make bench"})
}

// benchRouting replays the Mooncake conversation slice embedded in this
// binary (demo_trace.go) with every routing policy side by side at 4, 8
// and 16 workers.
func benchRouting(ctx context.Context, w io.Writer, _ time.Duration) error {
	reqs, name, err := loadTrace("", 0)
	if err != nil {
		return err
	}
	return benchmarks.Routing(ctx, w, benchmarks.RoutingOptions{Command: "make bench", Trace: reqs, TraceName: name})
}
