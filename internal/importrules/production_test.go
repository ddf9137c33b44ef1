package importrules

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The product/workshop boundary (issue 18): what an operator deploys is
// cmd/kvgate; the demo, benchmarks, simulators and the development gateway
// are cmd/kvgate-lab. These rules keep the workshop and the test kits out
// of the production binary, checked on the real import graph (go list),
// so a new import that crosses the line fails `make test` wherever it is
// written.

const module = "github.com/kvgate/kvgate"

// goList runs `go list` from the module root with args and returns its
// output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// importGraph maps each package of pattern's dependency graph (or of the
// pattern itself without deps) to its non-test imports.
func importGraph(t *testing.T, deps bool, pattern string) map[string][]string {
	t.Helper()
	args := []string{"-f", "{{.ImportPath}} {{join .Imports \" \"}}"}
	if deps {
		args = append([]string{"-deps"}, args...)
	}
	g := map[string][]string{}
	for _, l := range goList(t, append(args, pattern)...) {
		f := strings.Fields(l)
		g[f[0]] = f[1:]
	}
	return g
}

// importers names the packages of g that import p, for a failure that says
// where to cut.
func importers(g map[string][]string, p string) []string {
	var out []string
	for from, imps := range g {
		for _, i := range imps {
			if i == p {
				out = append(out, from)
			}
		}
	}
	slices.Sort(out)
	return out
}

// forbiddenInProduction says why p must not be in the production binary's
// dependency graph, or "" when it may.
func forbiddenInProduction(p string) string {
	switch {
	case p == "testing":
		return "the testing package (a test kit or a test helper in a non-test file)"
	case p == "gonum.org/v1/plot" || strings.HasPrefix(p, "gonum.org/v1/plot/"):
		return "plotting (the lab's reports)"
	case strings.HasPrefix(p, module+"/lab/testkit/"):
		return "a test kit (lab/testkit: redis-server launchers, TLS and model fixtures)"
	case strings.HasPrefix(p, module+"/lab/"):
		return "the workshop (simulators, replayer, benchmarks, harnesses under lab/)"
	case p == module+"/e2e" || strings.HasPrefix(p, module+"/e2e/"):
		return "the end-to-end tests"
	case strings.HasPrefix(p, module+"/cmd/kvgate-lab"):
		return "the lab binary"
	}
	return ""
}

// TestProductionBinaryLinksNoWorkshop: `go list -deps ./cmd/kvgate` holds
// no testing, no gonum/plot, nothing under lab/ or e2e/.
func TestProductionBinaryLinksNoWorkshop(t *testing.T) {
	g := importGraph(t, true, "./cmd/kvgate")
	if _, ok := g[module+"/cmd/kvgate"]; !ok {
		t.Fatalf("go list -deps ./cmd/kvgate did not list the binary itself (%d packages)", len(g))
	}
	for p := range g {
		if why := forbiddenInProduction(p); why != "" {
			t.Errorf("./cmd/kvgate links %s: %s; imported by %v", p, why, importers(g, p))
		}
	}
}

// TestThirdPartyOnlyBehindItsWrapper: the vendored jinja fork
// (internal/third_party) is reached only through extproc/chattemplate, so
// its API does not leak into the request path.
func TestThirdPartyOnlyBehindItsWrapper(t *testing.T) {
	g := importGraph(t, true, "./cmd/kvgate")
	for from, imps := range g {
		if from == module+"/extproc/chattemplate" || strings.HasPrefix(from, module+"/internal/third_party/") {
			continue
		}
		for _, i := range imps {
			if strings.HasPrefix(i, module+"/internal/third_party/") {
				t.Errorf("%s imports %s: only extproc/chattemplate may (re-export what callers need there)", from, i)
			}
		}
	}
}

// TestNothingOutsideTheWorkshopImportsIt: no non-test file outside lab/
// and cmd/kvgate-lab imports lab/... (production never imports the
// workshop; tests anywhere may).
func TestNothingOutsideTheWorkshopImportsIt(t *testing.T) {
	g := importGraph(t, false, "./...")
	if len(g) < 20 {
		t.Fatalf("go list ./... listed only %d packages", len(g))
	}
	for from, imps := range g {
		if strings.HasPrefix(from, module+"/lab/") || from == module+"/cmd/kvgate-lab" {
			continue
		}
		for _, i := range imps {
			if strings.HasPrefix(i, module+"/lab/") || strings.HasPrefix(i, module+"/e2e") {
				t.Errorf("%s (a non-test file) imports the workshop package %s: move the code it needs out of lab/, or pass it in from a test", from, i)
			}
		}
	}
}
