package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// makefileVariable returns the words of a `NAME := a b \` variable of the
// repository's Makefile, following backslash continuations.
func makefileVariable(t *testing.T, makefile, name string) []string {
	t.Helper()
	var words []string
	in := false
	for _, line := range strings.Split(makefile, "\n") {
		if !in {
			rest, ok := strings.CutPrefix(line, name+" :=")
			if !ok {
				continue
			}
			in, line = true, rest
		}
		cont := strings.HasSuffix(strings.TrimSpace(line), `\`)
		words = append(words, strings.Fields(strings.TrimSuffix(strings.TrimSpace(line), `\`))...)
		if !cont {
			return words
		}
	}
	if !in {
		t.Fatalf("Makefile: no %s := variable", name)
	}
	return words
}

var fuzzFuncRe = regexp.MustCompile(`(?m)^func (Fuzz\w+)\(\w+ \*testing\.F\)`)

// TestMakefileFuzzTargets: `make test` runs fuzz seed corpora through
// `go test ./...` and only `make fuzz` walks FUZZ_TARGETS, so nothing else
// would notice a target renamed, moved or added without being listed.
func TestMakefileFuzzTargets(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	listed := makefileVariable(t, string(b), "FUZZ_TARGETS")
	if len(listed) == 0 {
		t.Fatal("Makefile: FUZZ_TARGETS is empty")
	}
	var found []string
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "../.." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel("../..", filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, m := range fuzzFuncRe.FindAllStringSubmatch(string(src), -1) {
			found = append(found, "./"+filepath.ToSlash(rel)+":"+m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("found no Fuzz functions under the repository root")
	}
	for _, l := range listed {
		if !slices.Contains(found, l) {
			t.Errorf("Makefile FUZZ_TARGETS lists %s, which is no Fuzz function in that package", l)
		}
	}
	for _, f := range found {
		if !slices.Contains(listed, f) {
			t.Errorf("%s is missing from the Makefile's FUZZ_TARGETS (`make fuzz` would never fuzz it)", f)
		}
	}
}

// TestMakefileTestDoesItsOwnSetup: every target that runs tests or one of
// the binaries (which need the tokenizer files) depends on models itself, so
// that each does its own set-up on a fresh clone (issue 17: `make test`
// failed with "run make models"; issue 32: `make e2e` failed 46 tests and
// `make bench` stopped the same way). The rule is read off the Makefile, so a
// new target is held to it too.
func TestMakefileTestDoesItsOwnSetup(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	rule := regexp.MustCompile(`^([a-z0-9-]+):([^=]*)$`)
	// A recipe line that runs tests or a binary: go test anywhere in it,
	// bin/kvgate or bin/kvgate-lab as its command, or a program handed the lab.
	runs := regexp.MustCompile(`\$\(GO\) test |^\t[@\s]*\$\((?:LAB|BIN)\) |--kvgate-lab \$\(LAB\)`)
	var target string
	var deps []string
	checked := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := rule.FindStringSubmatch(line); m != nil {
			target, deps = m[1], strings.Fields(m[2])
			continue
		}
		if !strings.HasPrefix(line, "\t") {
			if strings.TrimSpace(line) == "" {
				target = ""
			}
			continue
		}
		if target == "" || checked[target] || !runs.MatchString(line) {
			continue
		}
		checked[target] = true
		if !slices.Contains(deps, "models") {
			t.Errorf("Makefile: %s runs %q but depends on %v, not on models", target, strings.TrimSpace(line), deps)
		}
	}
	for _, must := range []string{"unit", "run", "e2e", "kube-test", "chart-test", "bench", "soak", "race", "fuzz", "screenshots"} {
		if !checked[must] {
			t.Errorf("Makefile: target %s was not found running tests or a binary (the rule above did not see it)", must)
		}
	}
	for _, target := range []string{"test", "run"} {
		m := regexp.MustCompile(`(?m)^` + target + `:([^\n]*)$`).FindStringSubmatch(string(b))
		if m == nil || !slices.Contains(strings.Fields(m[1]), "models") {
			t.Errorf("Makefile: %s does not depend on models", target)
		}
	}
}

// TestMakefileBuildsBothBinaries: `make build` builds the production
// binary and the lab; `make run` (the demo) and `make bench` run the lab,
// since the production binary has no demo or bench any more.
func TestMakefileBuildsBothBinaries(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	mk := string(b)
	for _, want := range []string{"-o $(BIN) ./cmd/kvgate\n", "-o $(LAB) ./cmd/kvgate-lab\n", "\t$(LAB) demo $(ARGS)\n", "\t$(LAB) bench --out BENCHMARKS.md\n"} {
		if !strings.Contains(mk, want) {
			t.Errorf("Makefile has no %q", strings.TrimSpace(want))
		}
	}
	for _, v := range [][2]string{{"BIN", "bin/kvgate"}, {"LAB", "bin/kvgate-lab"}} {
		m := regexp.MustCompile(`(?m)^` + v[0] + `\s*:=\s*(\S+)\s*$`).FindStringSubmatch(mk)
		if m == nil || m[1] != v[1] {
			t.Errorf("Makefile %s := %v, want %s", v[0], m, v[1])
		}
	}
}
