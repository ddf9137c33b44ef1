package deploy

import (
	"bufio"
	"os"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// objectValues are values whose whole object is one setting (documented as
// one row), not a tree of settings.
var objectValues = map[string]bool{
	"resources": true, "gatewaySelector": true, "podSecurityContext": true, "securityContext": true,
}

// valueKeys flattens values.yaml to dotted keys: maps recurse, except empty
// maps and objectValues; lists and scalars are leaves.
func valueKeys(prefix string, v any, out *[]string) {
	m, ok := v.(map[string]any)
	last := prefix[strings.LastIndex(prefix, ".")+1:]
	if !ok || len(m) == 0 || objectValues[last] {
		*out = append(*out, prefix)
		return
	}
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		valueKeys(p, sub, out)
	}
}

// Every key of values.yaml has a row in deploy/README.md's values table,
// either spelt out (`a.b.c`) or as a sibling in a grouped row (`a.b.x`,
// `.c`), so values cannot be added undocumented.
func TestValuesDocumented(t *testing.T) {
	raw, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	var keys []string
	valueKeys("", values, &keys)
	sort.Strings(keys)
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "| `") {
			rows = append(rows, sc.Text())
		}
	}
	if len(keys) < 50 {
		t.Fatalf("only %d keys flattened from values.yaml", len(keys))
	}
	for _, k := range keys {
		parent, leaf := "", k
		if i := strings.LastIndex(k, "."); i >= 0 {
			parent, leaf = k[:i], k[i+1:]
		}
		documented := false
		for _, r := range rows {
			cell := strings.SplitN(strings.TrimPrefix(r, "| "), " | ", 2)[0]
			if strings.Contains(cell, "`"+k+"`") ||
				(parent != "" && strings.Contains(cell, "`"+parent+".") && strings.Contains(cell, "`."+leaf+"`")) {
				documented = true
				break
			}
		}
		if !documented {
			t.Errorf("values.yaml key %s has no row in deploy/README.md's values table", k)
		}
	}
}
