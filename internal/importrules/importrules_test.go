package importrules

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// modulePath is the module these rules check (production_test.go, h18c's,
// names it module; one of the two can go once both files are merged).
const modulePath = "github.com/kvgate/kvgate"

// listedPackage is the part of `go list -json` these rules read.
type listedPackage struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
}

// listDeps runs `go list -deps -json` on roots (non-test files only, as
// the binaries link them) and returns every package listed, by path.
func listDeps(t *testing.T, roots ...string) map[string]listedPackage {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the import rules need the go command on PATH: %v", err)
	}
	args := append([]string{"list", "-deps", "-json"}, roots...)
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	pkgs := map[string]listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// importChain is the shortest import path from root to dep, for the
// failure message ("picker → x → net/http").
func importChain(pkgs map[string]listedPackage, root, dep string) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == dep {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, imp := range pkgs[p].Imports {
			if _, seen := prev[imp]; !seen {
				prev[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return []string{root, "…", dep}
}

// ioPackage reports whether path is one of the I/O packages the request
// path's pure core must not link: networking, process launching, database
// drivers, the Redis and gRPC clients.
func ioPackage(path string) bool {
	switch {
	case path == "net", path == "os/exec":
		return true
	case strings.HasPrefix(path, "net/http"), strings.HasPrefix(path, "database/"), path == "database":
		return true
	case strings.HasPrefix(path, "github.com/redis/"), strings.HasPrefix(path, "google.golang.org/grpc"):
		return true
	}
	return false
}

// The pure picker, the fleet vocabulary and the request-path core
// (parse → template → tokenize → hash) compute; they never do I/O. Linking
// an I/O package is how that starts to slip (the picker linked go-redis
// through the index package until issue 18).
func TestPureCoreLinksNoIO(t *testing.T) {
	roots := []string{
		modulePath + "/picker",
		modulePath + "/kv/kvfleet",
		modulePath + "/internal/yamlconf",
		modulePath + "/extproc/preprocess",
		modulePath + "/extproc/openai",
		modulePath + "/extproc/tokenizer",
		modulePath + "/extproc/chattemplate",
		modulePath + "/kv/blockhash",
	}
	pkgs := listDeps(t, roots...)
	for _, root := range roots {
		p, ok := pkgs[root]
		if !ok {
			t.Errorf("%s: not listed by go list", root)
			continue
		}
		for _, dep := range p.Deps {
			if ioPackage(dep) {
				t.Errorf("%s links %s: %s", root, dep, strings.Join(importChain(pkgs, root, dep), " → "))
			}
		}
	}
}

// Leaves: kvfleet (worker, tier and role vocabulary) is standard library
// only; the picker adds only kvfleet; yamlconf (shared YAML value types)
// adds only the YAML decoder. Every component may import them, so they may
// import no component.
func TestLeafPackagesImportOnlyTheirAllowance(t *testing.T) {
	allowed := map[string][]string{
		modulePath + "/kv/kvfleet":        nil,
		modulePath + "/picker":            {modulePath + "/kv/kvfleet"},
		modulePath + "/internal/yamlconf": {"gopkg.in/yaml.v3"},
	}
	roots := make([]string, 0, len(allowed))
	for r := range allowed {
		roots = append(roots, r)
	}
	slices.Sort(roots)
	pkgs := listDeps(t, roots...)
	for _, root := range roots {
		for _, dep := range pkgs[root].Deps {
			if pkgs[dep].Standard || slices.Contains(allowed[root], dep) {
				continue
			}
			t.Errorf("%s links %s (allowed beyond the standard library: %v): %s",
				root, dep, allowed[root], strings.Join(importChain(pkgs, root, dep), " → "))
		}
	}
}

// The rules themselves: a package that the rule must catch is caught.
func TestIOPackageRule(t *testing.T) {
	for _, p := range []string{"net", "net/http", "net/http/httptrace", "os/exec", "database/sql",
		"github.com/redis/go-redis/v9", "google.golang.org/grpc", "google.golang.org/grpc/credentials"} {
		if !ioPackage(p) {
			t.Errorf("%s not caught", p)
		}
	}
	for _, p := range []string{"net/url", "net/netip", "os", "encoding/json", "github.com/kvgate/kvgate/picker"} {
		if ioPackage(p) {
			t.Errorf("%s caught", p)
		}
	}
}
