package importrules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The rooms (issue 28): the top-level folders say what a package is.
//   - kv/ and internal/ are leaf rooms: libraries every process shares (the
//     KV vocabulary, block hashes, event decoding, the fleet index, the
//     event stream; YAML value types, secrets, the admin listener). A leaf
//     imports no component and no composition point, so any process can link
//     it without linking another process.
//   - extproc/, picker/, indexer/, kvagent/, planner-sidecar/, envoy/ are the
//     components; daemon/, cmd/, config/, deploy/ compose them.
//   - lab/ is the workshop; e2e/ holds the end-to-end tests and nothing else.
var leafRooms = []string{"/kv/", "/internal/"}

// upperRooms are what a leaf must not import: the components, the
// composition points and the workshop.
var upperRooms = []string{
	"/extproc", "/picker", "/indexer", "/kvagent", "/planner-sidecar", "/envoy",
	"/daemon", "/cmd", "/config", "/deploy", "/lab", "/e2e",
}

// roomOf reports which of rooms p sits in ("" when none).
func roomOf(p string, rooms []string) string {
	rel := strings.TrimPrefix(p, module)
	for _, r := range rooms {
		if rel == strings.TrimSuffix(r, "/") || strings.HasPrefix(rel, strings.TrimSuffix(r, "/")+"/") {
			return r
		}
	}
	return ""
}

// TestLeafRoomsImportNoComponent walks the non-test import graph of the whole
// module: nothing under kv/ or internal/ imports a component, a composition
// point or the workshop.
func TestLeafRoomsImportNoComponent(t *testing.T) {
	g := importGraph(t, false, "./...")
	leaves := 0
	for from, imps := range g {
		if roomOf(from, leafRooms) == "" {
			continue
		}
		leaves++
		for _, i := range imps {
			if r := roomOf(i, upperRooms); r != "" {
				t.Errorf("%s (a leaf room) imports %s (room %s): move what it needs down into a leaf, or pass it in", from, i, r)
			}
		}
	}
	if leaves < 10 {
		t.Fatalf("only %d packages found in the leaf rooms %v", leaves, leafRooms)
	}
}

// The rule catches what it must and nothing else.
func TestRoomRule(t *testing.T) {
	for p, want := range map[string]string{
		module + "/kv/kvindex":           "/kv/",
		module + "/internal/yamlconf":    "/internal/",
		module + "/extproc/openai":       "",
		module + "/kvagent/store":        "",
		module + "/kvx":                  "",
		module + "/internal":             "/internal/",
		module + "/indexer":              "",
		module + "/planner-sidecar/plan": "",
	} {
		if got := roomOf(p, leafRooms); got != want {
			t.Errorf("roomOf(%s, leaves) = %q, want %q", p, got, want)
		}
	}
	for _, p := range []string{module + "/extproc", module + "/indexer", module + "/daemon/extprocd", module + "/lab/replay", module + "/e2e"} {
		if roomOf(p, upperRooms) == "" {
			t.Errorf("%s not counted as an upper room", p)
		}
	}
	for _, p := range []string{module + "/kv/kvfleet", module + "/indexerx", module + "/internal/cli"} {
		if r := roomOf(p, upperRooms); r != "" {
			t.Errorf("%s counted as upper room %s", p, r)
		}
	}
}

// TestEndToEndRoomHoldsOnlyTests: every Go file directly under e2e/ is a test
// file and e2e/ has no Go subpackages (the workshop libraries live in lab/).
func TestEndToEndRoomHoldsOnlyTests(t *testing.T) {
	root := filepath.Join("..", "..", "e2e")
	files := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		files++
		if filepath.Dir(path) != root {
			t.Errorf("%s: a Go package below e2e/ (workshop libraries belong in lab/)", path)
		} else if !strings.HasSuffix(path, "_test.go") {
			t.Errorf("%s: a non-test file in e2e/ (workshop libraries belong in lab/)", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 10 {
		t.Fatalf("only %d Go files under %s", files, root)
	}
}
