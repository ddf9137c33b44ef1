//go:build helm || kubeapiserver

package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var updateSchema = flag.Bool("update-schema", false, "rewrite helm/kvgate/values.schema.json from values.yaml")

// freeForm are values whose contents are not the chart's to constrain:
// kvgate config sections (config.Parse checks them), Kubernetes objects
// passed through (resources, affinity, …) and label/annotation maps.
var freeForm = map[string]bool{
	"config": true, "commonLabels": true, "podAnnotations": true, "nodeSelector": true, "affinity": true,
	"resources": true, "annotations": true, "labels": true, "gatewaySelector": true,
	"podSecurityContext": true, "securityContext": true, "matchLabels": true,
}

// schemaFor derives a JSON schema from a default value: objects list their
// properties and allow no others (a misspelt value fails `helm install`
// instead of being ignored), scalars keep their type.
func schemaFor(name string, v any) map[string]any {
	switch x := v.(type) {
	case map[string]any:
		if freeForm[name] {
			return map[string]any{"type": "object"}
		}
		props := map[string]any{}
		for k, sub := range x {
			props[k] = schemaFor(k, sub)
		}
		return map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	case []any:
		return map[string]any{"type": "array"}
	case bool:
		return map[string]any{"type": "boolean"}
	case float64:
		if x == float64(int64(x)) {
			return map[string]any{"type": "integer"}
		}
		return map[string]any{"type": "number"}
	case string:
		return map[string]any{"type": "string"}
	default:
		return map[string]any{}
	}
}

func generatedSchema(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	s := schemaFor("", values)
	s["$schema"] = "http://json-schema.org/draft-07/schema#"
	s["title"] = "kvgate chart values (generated from values.yaml by `go test ./deploy/ -run TestValuesSchema -update-schema`)"
	out, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

// values.schema.json is what values.yaml implies; Helm checks values
// against it on install, so a misspelt key is an error, not a silent default.
func TestValuesSchema(t *testing.T) {
	path := chartDir + "/values.schema.json"
	want := generatedSchema(t)
	if *updateSchema {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with values.yaml; run: go test -tags helm ./deploy/ -run TestValuesSchema -update-schema", path)
	}
	// Helm applies it: a misspelt value stops the render, naming it.
	_, err = renderChart("", map[string]any{"extproc": map[string]any{"replicsa": 3}})
	if err == nil || !strings.Contains(err.Error(), "replicsa") {
		t.Errorf("values with extproc.replicsa: got %v, want a schema error naming it", err)
	}
	_, err = renderChart("", map[string]any{"extproc": map[string]any{"replicas": "two"}})
	if err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Errorf("values with extproc.replicas \"two\": got %v, want a schema error naming it", err)
	}
}
