//go:build helm || kubeapiserver

package deploy

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/kvgate/kvgate/envoy"
)

// meshDocs joins a render's mesh objects into one multi-document file, so
// the validator's cross-document rules apply (every ext_proc may write the
// metadata namespace the ORIGINAL_DST cluster reads).
func meshDocs(ms []manifest) ([]byte, int) {
	var buf bytes.Buffer
	n := 0
	for _, m := range ms {
		if _, ok := meshKinds[m.Kind]; ok {
			buf.WriteString("---\n")
			buf.Write(m.YAML)
			buf.WriteString("\n")
			n++
		}
	}
	return buf.Bytes(), n
}

// The Istio and Envoy Gateway objects pass the same validator as the files
// in envoy/: Envoy's protos, PGV rules, start-up rules, kvgate's contract.
func TestMeshObjectsValidate(t *testing.T) {
	want := map[string][]envoy.Kind{
		"istio":         {envoy.KindEnvoyFilter, envoy.KindDestinationRule},
		"envoy-gateway": {envoy.KindEnvoyExtensionPolicy, envoy.KindEnvoyPatchPolicy, envoy.KindClientTrafficPolicy},
	}
	for _, sc := range scenarios {
		t.Run(scenarioName(sc), func(t *testing.T) {
			data, n := meshDocs(mustRender(t, sc, nil))
			if n == 0 {
				if want[scenarioName(sc)] != nil {
					t.Fatal("no mesh objects rendered")
				}
				return
			}
			kinds, err := envoy.Validate(data)
			if err != nil {
				t.Fatalf("mesh objects rejected:\n%v\n%s", err, data)
			}
			// Helm's install order puts kinds it does not know last, sorted by
			// kind (releaseutil.InstallOrder), not in template order.
			slices.Sort(kinds)
			if w := want[scenarioName(sc)]; w != nil && !reflect.DeepEqual(kinds, slices.Sorted(slices.Values(w))) {
				t.Errorf("kinds %v, want %v", kinds, w)
			}
		})
	}
}

// A broken value reaches the validator: an ORIGINAL_DST cluster must not
// have a negative timeout, and Istio TLS needs a known mode.
func TestMeshValidatorSeesValues(t *testing.T) {
	ms := mustRender(t, "testdata/values-istio.yaml", map[string]any{"mesh": map[string]any{"originalDst": map[string]any{"connectTimeout": "5 seconds"}}})
	data, _ := meshDocs(ms)
	if _, err := envoy.Validate(data); err == nil || !strings.Contains(err.Error(), "connect_timeout") {
		t.Errorf("connectTimeout \"5 seconds\": got %v, want an error naming connect_timeout", err)
	}
}

// Rendered for the release the envoy/ files assume (kvgate in
// kvgate-system, SIMPLE TLS with CA secret kvgate-extproc-ca), the chart's
// mesh objects equal those hand-checked files, field for field.
func TestMeshObjectsMatchEnvoyFolder(t *testing.T) {
	cases := []struct {
		values string
		files  []string
	}{
		{"testdata/values-istio.yaml", []string{"../envoy/istio/envoyfilter.yaml", "../envoy/istio/destinationrule.yaml"}},
		{"testdata/values-envoy-gateway.yaml", []string{"../envoy/envoy-gateway/extensionpolicy.yaml"}},
	}
	for _, c := range cases {
		rendered := map[string]map[string]any{}
		for _, m := range mustRender(t, c.values, nil) {
			if _, ok := meshKinds[m.Kind]; ok {
				rendered[m.Kind] = comparable(t, m.YAML)
			}
		}
		for _, f := range c.files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			docs, err := splitYAML(string(raw))
			if err != nil {
				t.Fatal(err)
			}
			for _, doc := range docs {
				want := comparable(t, doc)
				kind, _ := want["kind"].(string)
				got, ok := rendered[kind]
				if !ok {
					t.Errorf("%s: chart renders no %s", f, kind)
					continue
				}
				if !reflect.DeepEqual(got, want) {
					gy, _ := yaml.Marshal(got)
					wy, _ := yaml.Marshal(want)
					t.Errorf("%s: chart's %s differs\nchart:\n%s\nenvoy/:\n%s", f, kind, gy, wy)
				}
			}
		}
	}
}

// comparable is an object without the chart's labels (the one intended
// difference), as plain JSON values.
func comparable(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		t.Fatal(err)
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		delete(md, "labels")
	}
	return obj
}

// The mesh objects carry the same ext_proc filter and ORIGINAL_DST cluster
// as the standalone envoy/envoy-original-dst.yaml (only the ext_proc's
// cluster name differs: Istio names the Service's cluster itself).
func TestMeshObjectsMatchStandaloneEnvoy(t *testing.T) {
	raw, err := os.ReadFile("../envoy/envoy-original-dst.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var boot map[string]any
	if err := yaml.Unmarshal(raw, &boot); err != nil {
		t.Fatal(err)
	}
	var wantFilter, wantCluster map[string]any
	hcm := dig(t, boot, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config")
	for _, f := range hcm["http_filters"].([]any) {
		if f := f.(map[string]any); f["name"] == "envoy.filters.http.ext_proc" {
			wantFilter = f["typed_config"].(map[string]any)
		}
	}
	for _, c := range dig(t, boot, "static_resources")["clusters"].([]any) {
		if c := c.(map[string]any); c["name"] == "kvgate-original-dst" {
			wantCluster = c
		}
	}
	if wantFilter == nil || wantCluster == nil {
		t.Fatal("envoy/envoy-original-dst.yaml: ext_proc filter or kvgate-original-dst cluster not found")
	}
	dropClusterName := func(f map[string]any) map[string]any {
		delete(f["grpc_service"].(map[string]any), "envoy_grpc")
		return f
	}
	wantFilter = dropClusterName(wantFilter)

	for _, m := range mustRender(t, "testdata/values-istio.yaml", nil) {
		if m.Kind != "EnvoyFilter" {
			continue
		}
		ef := comparable(t, m.YAML)
		gotFilter := dropClusterName(dig(t, ef, "spec", "configPatches", 1, "patch", "value", "typed_config"))
		if !reflect.DeepEqual(gotFilter, wantFilter) {
			t.Errorf("EnvoyFilter ext_proc filter differs from envoy/envoy-original-dst.yaml's:\n%v\n%v", gotFilter, wantFilter)
		}
		if got := dig(t, ef, "spec", "configPatches", 2, "patch", "value"); !reflect.DeepEqual(got, wantCluster) {
			t.Errorf("EnvoyFilter cluster differs from envoy/envoy-original-dst.yaml's:\n%v\n%v", got, wantCluster)
		}
	}
	for _, m := range mustRender(t, "testdata/values-envoy-gateway.yaml", nil) {
		if m.Kind != "EnvoyPatchPolicy" {
			continue
		}
		got := dig(t, comparable(t, m.YAML), "spec", "jsonPatches", 0, "operation", "value")
		if !reflect.DeepEqual(got, wantCluster) {
			t.Errorf("EnvoyPatchPolicy cluster differs from envoy/envoy-original-dst.yaml's:\n%v\n%v", got, wantCluster)
		}
	}
}

// dig walks maps (string keys) and lists (int keys) to an object.
func dig(t *testing.T, v any, path ...any) map[string]any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %v: not an object", p)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("at %v: not a list that long", p)
			}
			v = l[k]
		}
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%v: not an object", path)
	}
	return m
}

// The Envoy Gateway policy's cross-namespace backendRef is allowed by a
// ReferenceGrant in the Service's namespace naming exactly that policy
// kind, its namespace and the Service.
func TestEnvoyGatewayReferenceGrant(t *testing.T) {
	ms := mustRender(t, "testdata/values-envoy-gateway.yaml", nil)
	var ref map[string]any
	var policyNS string
	for _, m := range ms {
		if m.Kind == "EnvoyExtensionPolicy" {
			p := comparable(t, m.YAML)
			policyNS = p["metadata"].(map[string]any)["namespace"].(string)
			ref = dig(t, p, "spec", "extProc", 0, "backendRefs", 0)
		}
	}
	if ref == nil {
		t.Fatal("no EnvoyExtensionPolicy rendered")
	}
	objs := decodeAll(t, ms)
	var grants []*gatewayv1beta1.ReferenceGrant
	for _, o := range objs {
		if g, ok := o.(*gatewayv1beta1.ReferenceGrant); ok {
			grants = append(grants, g)
		}
	}
	if len(grants) != 1 {
		t.Fatalf("%d ReferenceGrants, want 1", len(grants))
	}
	g := grants[0]
	if g.Namespace != ref["namespace"] || len(g.Spec.From) != 1 || len(g.Spec.To) != 1 {
		t.Fatalf("ReferenceGrant %s/%s does not match backendRef %v", g.Namespace, g.Name, ref)
	}
	from, to := g.Spec.From[0], g.Spec.To[0]
	if string(from.Group) != "gateway.envoyproxy.io" || string(from.Kind) != "EnvoyExtensionPolicy" || string(from.Namespace) != policyNS {
		t.Errorf("ReferenceGrant from %+v, want EnvoyExtensionPolicy in %s", from, policyNS)
	}
	if string(to.Kind) != ref["kind"] || to.Name == nil || string(*to.Name) != ref["name"] {
		t.Errorf("ReferenceGrant to %+v, want the backendRef %v", to, ref)
	}
	// Same namespace: no grant needed, none rendered.
	same := mustRender(t, "testdata/values-envoy-gateway.yaml", map[string]any{"mesh": map[string]any{"envoyGateway": map[string]any{"namespace": releaseNamespace}}})
	if n := len(byKind(same, "ReferenceGrant")); n != 0 {
		t.Errorf("policy in the release namespace: %d ReferenceGrants, want 0", n)
	}
}
