//go:build helm || kubeapiserver

package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	// The release the tests install: with these, the chart's names equal
	// those of the hand-written files in envoy/istio and envoy/envoy-gateway.
	releaseName      = "kvgate"
	releaseNamespace = "kvgate-system"
)

// scenarios are the value sets every check runs on: the defaults and each
// file in testdata (named for what it turns on).
var scenarios = []string{
	"",
	"testdata/values-full.yaml",
	"testdata/values-istio.yaml",
	"testdata/values-envoy-gateway.yaml",
	"testdata/values-inference-pool.yaml",
}

func scenarioName(valuesFile string) string {
	if valuesFile == "" {
		return "defaults"
	}
	return strings.TrimSuffix(strings.TrimPrefix(path.Base(valuesFile), "values-"), ".yaml")
}

// manifest is one rendered YAML document.
type manifest struct {
	Template string // the chart template it came from
	Index    int    // its position among that template's documents
	YAML     []byte
	Kind     string
	Name     string
}

func (m manifest) String() string {
	return fmt.Sprintf("%s[%d] %s/%s", m.Template, m.Index, m.Kind, m.Name)
}

// kubeVersion is the Kubernetes the tests render for: the oldest the chart
// claims (Chart.yaml kubeVersion), so every API version it uses must exist
// there. (Helm's default, from client-go's build info, is newer.)
var kubeVersion = common.KubeVersion{Version: "v1.27.0", Major: "1", Minor: "27"}

// renderChart renders the chart as `helm install kvgate -n kvgate-system -f
// valuesFile` does, plus overrides (merged over the file, as --set is): Helm
// v4's own install action (helm.sh/helm/v4 pkg/action, Install.RunWithContext)
// with the client-side dry run of `helm template`, so dependencies, the values
// schema, the kubeVersion check, rendering, hook sorting and the install
// order are Helm's, not a copy. Its manifest is split back into documents by
// the "# Source:" line Helm writes before each (action.go renderResources).
func renderChart(valuesFile string, overrides map[string]any) ([]manifest, error) {
	charter, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", chartDir, err)
	}
	vals := map[string]any{}
	if valuesFile != "" {
		if vals, err = common.ReadValuesFile(valuesFile); err != nil {
			return nil, err
		}
	}
	if overrides != nil {
		vals = chartutil.CoalesceTables(deepCopy(overrides), vals)
	}
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName = releaseName
	install.Namespace = releaseNamespace
	kv := kubeVersion
	install.KubeVersion = &kv
	rel, err := install.RunWithContext(context.Background(), charter, vals)
	if err != nil {
		return nil, err
	}
	r, ok := rel.(*releasev1.Release)
	if !ok {
		return nil, fmt.Errorf("helm install returned a %T, not a v1 release", rel)
	}
	if len(r.Hooks) != 0 {
		return nil, fmt.Errorf("the chart renders %d hooks; the tests see only the manifest", len(r.Hooks))
	}
	return splitManifest(r.Manifest)
}

// splitManifest cuts Helm's release manifest into its documents, each
// labelled by the "# Source: <chart>/templates/<file>" line Helm puts first.
func splitManifest(s string) ([]manifest, error) {
	docs, err := splitYAML(s)
	if err != nil {
		return nil, err
	}
	var out []manifest
	count := map[string]int{}
	for i, doc := range docs {
		var src []byte
		for _, line := range bytes.Split(doc, []byte("\n")) {
			if t := bytes.TrimSpace(line); len(t) != 0 && string(t) != "---" {
				if rest, ok := bytes.CutPrefix(t, []byte("# Source: ")); ok {
					src = rest
				}
				break
			}
		}
		if len(src) == 0 {
			return nil, fmt.Errorf("manifest document %d has no # Source line first", i)
		}
		name := strings.TrimPrefix(string(src), "kvgate/")
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("%s: not YAML: %w", name, err)
		}
		out = append(out, manifest{Template: name, Index: count[name], YAML: doc, Kind: head.Kind, Name: head.Metadata.Name})
		count[name]++
	}
	return out, nil
}

// splitYAML returns the non-empty documents of a multi-document stream.
func splitYAML(s string) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(s)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if isBlankYAML(doc) {
			continue
		}
		docs = append(docs, doc)
	}
}

// isBlankYAML reports a document holding only comments and blank lines
// (what a disabled template renders to).
func isBlankYAML(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' && string(t) != "---" {
			return false
		}
	}
	return true
}

func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = deepCopy(sub)
		}
		out[k] = v
	}
	return out
}

// mustRender renders a scenario or fails the test.
func mustRender(t *testing.T, valuesFile string, overrides map[string]any) []manifest {
	t.Helper()
	ms, err := renderChart(valuesFile, overrides)
	if err != nil {
		t.Fatalf("rendering %s: %v", scenarioName(valuesFile), err)
	}
	if len(ms) == 0 {
		t.Fatalf("rendering %s: no objects", scenarioName(valuesFile))
	}
	return ms
}

func byKind(ms []manifest, kind string) []manifest {
	var out []manifest
	for _, m := range ms {
		if m.Kind == kind {
			out = append(out, m)
		}
	}
	return out
}
