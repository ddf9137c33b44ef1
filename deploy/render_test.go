package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	chartDir = "helm/kvgate"
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

// renderChart renders the chart as `helm install kvgate -n kvgate-system -f
// valuesFile` would, plus overrides (merged over the file, as --set is).
func renderChart(valuesFile string, overrides map[string]any) ([]manifest, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", chartDir, err)
	}
	vals := chartutil.Values{}
	if valuesFile != "" {
		if vals, err = chartutil.ReadValuesFile(valuesFile); err != nil {
			return nil, err
		}
	}
	if overrides != nil {
		vals = chartutil.CoalesceTables(deepCopy(overrides), vals)
	}
	// Render for the oldest Kubernetes the chart claims (Chart.yaml
	// kubeVersion): every API version it uses must exist there. (Helm's
	// default, taken from client-go's build info, is v1.20 in tests.)
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.27.0", Major: "1", Minor: "27"}
	if !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart kubeVersion %q does not accept Kubernetes %s", ch.Metadata.KubeVersion, caps.KubeVersion.String())
	}
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: releaseName, Namespace: releaseNamespace, Revision: 1, IsInstall: true, IsUpgrade: false,
	}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []manifest
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") || strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		docs, err := splitYAML(files[name])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for i, doc := range docs {
			var head struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal(doc, &head); err != nil {
				return nil, fmt.Errorf("%s[%d]: not YAML: %w", name, i, err)
			}
			out = append(out, manifest{Template: strings.TrimPrefix(name, "kvgate/"), Index: i, YAML: doc, Kind: head.Kind, Name: head.Metadata.Name})
		}
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
