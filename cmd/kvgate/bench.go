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

	"github.com/kvgate/kvgate/e2e/benchmarks"
	"github.com/kvgate/kvgate/indexer/index"
	"github.com/kvgate/kvgate/indexer/redistest"
)

func init() {
	register("bench", command{
		summary: "run the benchmarks and write BENCHMARKS.md (--out, --only section,... ; --list names the sections)",
		run:     runBench,
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
	fs := flag.NewFlagSet("kvgate bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "BENCHMARKS.md", "Markdown file to write ('-' = stdout)")
	only := fs.String("only", "", "comma-separated sections to run (default: all)")
	phase := fs.Duration("phase", 2*time.Second, "length of each measured phase")
	list := fs.Bool("list", false, "print the section names and exit")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
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
			fmt.Fprintf(stderr, "kvgate bench: unknown section %q\n", name)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var doc bytes.Buffer
	fmt.Fprintf(&doc, "# kvgate benchmarks\n\nWritten by `make bench` (`kvgate bench %s`) on %s.\n", strings.Join(args, " "), time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&doc, "Machine: %d CPUs (GOMAXPROCS %d), %s/%s, %s. Shared machines are noisy: compare the ratios to the baseline measured in the same run, not absolute figures across runs.\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	for _, s := range benchSections {
		if len(want) > 0 && !want[s.name] {
			continue
		}
		fmt.Fprintf(stderr, "kvgate bench: %s…\n", s.name)
		fmt.Fprintf(&doc, "\n")
		if err := s.run(ctx, &doc, *phase); err != nil {
			fmt.Fprintf(stderr, "kvgate bench: %s: %v\n", s.name, err)
			return 1
		}
	}
	if *out == "-" {
		stdout.Write(doc.Bytes())
		return 0
	}
	if err := os.WriteFile(*out, doc.Bytes(), 0o644); err != nil {
		fmt.Fprintf(stderr, "kvgate bench: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "kvgate bench: wrote %s\n", *out)
	return 0
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
	backends := map[string]index.Index{"memory": index.NewMemory(index.MemoryConfig{})}
	rs, err := index.NewRedis(ctx, index.RedisConfig{Client: standalone.Client()})
	if err != nil {
		return err
	}
	backends["redis"] = rs
	rc, err := index.NewRedis(ctx, index.RedisConfig{Client: cluster.Client()})
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
	rc, err := index.NewRedis(ctx, index.RedisConfig{Client: cluster.Client()})
	if err != nil {
		return err
	}
	defer rc.Close()
	mem := index.NewMemory(index.MemoryConfig{})
	return benchmarks.Extproc(ctx, w, map[string]index.Index{"memory": mem, "redis-cluster": rc}, benchmarks.ExtprocOptions{Phase: phase, Command: "make bench"})
}

// benchRouting replays the Mooncake conversation trace with every routing
// policy side by side at 4, 8 and 16 workers.
func benchRouting(ctx context.Context, w io.Writer, _ time.Duration) error {
	return benchmarks.Routing(ctx, w, benchmarks.RoutingOptions{Command: "make bench"})
}
