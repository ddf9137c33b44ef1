package importrules

import (
	"slices"
	"strings"
	"testing"
)

// configPackage is the whole configuration file (config.Config). The
// components take their own sections plus the expanded workers and models
// (issue 18 item 4: extproc.RouterConfig, indexer.ServiceConfig,
// planner.New's plannerconfig.Config); only the composition points
// (cmd/*, daemon/..., deploy/inventory, lab/...) read the file.
const configPackage = modulePath + "/config"

// componentTrees are the component libraries that must not link the whole
// file: each tree, its subpackages included.
var componentTrees = []string{
	modulePath + "/extproc",
	modulePath + "/indexer",
	modulePath + "/planner-sidecar",
}

// inComponentTree reports whether path is one of componentTrees or below one.
func inComponentTree(path string) bool {
	for _, root := range componentTrees {
		if path == root || strings.HasPrefix(path, root+"/") {
			return true
		}
	}
	return false
}

// linksWholeFile reports whether p links config, directly or through any
// dependency (a subpackage that imports it counts as much as the root).
func linksWholeFile(p listedPackage) bool {
	return p.ImportPath == configPackage || slices.Contains(p.Deps, configPackage)
}

// TestComponentsTakeTheirSectionsNotTheFile: no non-test package under
// extproc/, indexer/ or planner-sidecar/ links github.com/kvgate/kvgate/config.
func TestComponentsTakeTheirSectionsNotTheFile(t *testing.T) {
	patterns := make([]string, len(componentTrees))
	for i, root := range componentTrees {
		patterns[i] = root + "/..."
	}
	pkgs := listDeps(t, patterns...)
	checked := 0
	for path, p := range pkgs {
		if !inComponentTree(path) {
			continue
		}
		checked++
		if linksWholeFile(p) {
			t.Errorf("%s links %s (take the section and the expanded workers instead): %s",
				path, configPackage, strings.Join(importChain(pkgs, path, configPackage), " → "))
		}
	}
	for _, root := range componentTrees {
		if _, ok := pkgs[root]; !ok {
			t.Errorf("%s: not listed by go list", root)
		}
	}
	if checked < 3*len(componentTrees) {
		t.Fatalf("only %d packages checked under %v", checked, componentTrees)
	}
}

// The rule itself: the composition points, which do read the file, are
// caught, and a component is not.
func TestWholeFileRule(t *testing.T) {
	composition := []string{modulePath + "/daemon/extprocd", modulePath + "/cmd/kvgate"}
	pkgs := listDeps(t, append(composition, modulePath+"/extproc")...)
	for _, p := range composition {
		if !linksWholeFile(pkgs[p]) {
			t.Errorf("%s reads the file but is not caught", p)
		}
		if inComponentTree(p) {
			t.Errorf("%s counted as a component", p)
		}
	}
	if linksWholeFile(pkgs[modulePath+"/extproc"]) {
		t.Errorf("extproc caught")
	}
	for _, p := range []string{modulePath + "/extproc", modulePath + "/indexer/indexerconfig", modulePath + "/planner-sidecar/plannerconfig"} {
		if !inComponentTree(p) {
			t.Errorf("%s not counted as a component", p)
		}
	}
	if inComponentTree(modulePath + "/extprocx") {
		t.Error("a sibling sharing the prefix counted as a component")
	}
}
