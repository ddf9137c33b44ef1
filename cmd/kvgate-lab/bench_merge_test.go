package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMergeBenchSectionsReplacesOnlyItsOwn(t *testing.T) {
	old := "# kvgate benchmarks\n\nheader\n\n" +
		"<!-- bench:alpha -->\n## Alpha\nold alpha\n<!-- /bench:alpha -->\n\n" +
		"## Hand-written soak\nkept\n\n" +
		"<!-- bench:beta -->\n## Beta\nold beta\n<!-- /bench:beta -->\n"
	got := string(mergeBenchSections([]byte(old), []renderedSection{{"beta", []byte("## Beta\nnew beta\n")}}))
	want := strings.Replace(old, "old beta", "new beta", 1)
	if got != want {
		t.Fatalf("merge:\n%s\nwant:\n%s", got, want)
	}
}

func TestMergeBenchSectionsFindsUnmarkedSectionsByHeading(t *testing.T) {
	// A file written before the markers: the section is found by its
	// first heading and replaced up to the next heading it does not own.
	old := "# kvgate benchmarks\n\n## Routing (trace replay)\nold table\n\n### detail\nold\n\n## HA: 1 vs 3\nkept ha\n"
	got := string(mergeBenchSections([]byte(old), []renderedSection{{"routing", []byte("## Routing (trace replay)\nnew table\n")}}))
	want := "# kvgate benchmarks\n\n<!-- bench:routing -->\n## Routing (trace replay)\nnew table\n<!-- /bench:routing -->\n\n## HA: 1 vs 3\nkept ha\n"
	if got != want {
		t.Fatalf("merge:\n%q\nwant:\n%q", got, want)
	}
	// A section in neither form is appended.
	got = string(mergeBenchSections([]byte("# x\n"), []renderedSection{{"new", []byte("## New\nbody\n")}}))
	if got != "# x\n\n<!-- bench:new -->\n## New\nbody\n<!-- /bench:new -->\n" {
		t.Fatalf("append: %q", got)
	}
}

func TestBenchOnlyKeepsTheOtherSections(t *testing.T) {
	saved := benchSections
	defer func() { benchSections = saved }()
	n := 0
	benchSections = []benchSection{
		{"one", func(_ context.Context, w io.Writer, _ time.Duration) error {
			fmt.Fprintf(w, "## One\nrun %d\n", n)
			return nil
		}},
		{"two", func(_ context.Context, w io.Writer, _ time.Duration) error {
			n++
			fmt.Fprintf(w, "## Two\nrun %d\n", n)
			return nil
		}},
	}
	out := filepath.Join(t.TempDir(), "B.md")
	var so, se bytes.Buffer
	if code := runBench([]string{"--out", out}, nil, &so, &se); code != 0 {
		t.Fatalf("full run: exit %d: %s", code, se.String())
	}
	if code := runBench([]string{"--out", out, "--only", "two"}, nil, &so, &se); code != 0 {
		t.Fatalf("--only: exit %d: %s", code, se.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if !strings.Contains(doc, "## One\nrun 0\n") || !strings.Contains(doc, "## Two\nrun 2\n") || strings.Contains(doc, "run 1") {
		t.Fatalf("after --only two:\n%s", doc)
	}
}
