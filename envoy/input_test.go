package envoy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMalformedInputRejected(t *testing.T) {
	cases := []struct {
		name, data, wantPath, wantMsg string
	}{
		{"not YAML", "static_resources: [", "", "YAML document 1"},
		{"duplicate key", "admin: {}\nadmin: {}\n", "", `mapping key "admin" already defined`},
		{"empty", "# nothing\n", "", "no YAML document"},
		{"top level not an object", "- 1\n- 2\n", "", "expected an object (envoy.config.bootstrap.v3.Bootstrap), got a list"},
		{"unknown top-level field", "static_resource: {}\n", "static_resource", `did you mean "static_resources"?`},
		{"non-string key", "static_resources: {1: x}\n", "", "mapping key 1 is a int, not a string"},
		{"infinite number", "stats_flush_interval: .inf\n", "", "has no JSON form"},
		{"Any without @type", "static_resources:\n  listeners:\n  - name: l\n    listener_filters:\n    - name: f\n      typed_config: {foo: 1}\n",
			"static_resources.listeners[0].listener_filters[0].typed_config.@type", `needs an "@type"`},
		{"document without metadata name", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {}\nspec: {host: h}\n", "metadata.name", "required"},
		{"wrong API group", "apiVersion: gateway.envoyproxy.io/v1alpha1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: h}\n", "apiVersion", "belongs to API group networking.istio.io"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Validate([]byte(c.data))
			assertProblem(t, err, c.wantPath, c.wantMsg)
		})
	}
}

func TestOversizedInputRejected(t *testing.T) {
	data := []byte("# " + strings.Repeat("x", MaxConfigBytes) + "\n")
	_, err := Validate(data)
	assertProblem(t, err, "", "more than the 4194304 allowed")

	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ValidateFile(path, nil)
	assertProblem(t, err, "", "more than the 4194304 allowed")
}

// protojson accepts enum numbers; a defined number is as valid as its name.
func TestDefinedEnumNumberAccepted(t *testing.T) {
	orig, err := os.ReadFile("envoy-original-dst.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// 4 is ORIGINAL_DST and 6 is CLUSTER_PROVIDED in cluster.proto.
	data := strings.Replace(string(orig), "type: ORIGINAL_DST", "type: 4", 1)
	data = strings.Replace(data, "lb_policy: CLUSTER_PROVIDED", "lb_policy: 6", 1)
	if data == string(orig) {
		t.Fatal("mutation did not apply")
	}
	if _, err := Validate([]byte(data)); err != nil {
		t.Fatalf("defined enum numbers rejected:\n%v", err)
	}
	// And the rules still see the cluster as ORIGINAL_DST.
	broken := strings.Replace(data, "lb_policy: 6", "lb_policy: 0", 1)
	_, err = Validate([]byte(broken))
	assertProblem(t, err, odst+".lb_policy", "ORIGINAL_DST requires CLUSTER_PROVIDED, got ROUND_ROBIN")
}

func TestUnreadableFileIsNotAConfigError(t *testing.T) {
	_, err := ValidateFile(filepath.Join(t.TempDir(), "missing.yaml"), nil)
	var verr *Error
	if err == nil || errors.As(err, &verr) {
		t.Fatalf("got %v (%T), want a plain read error", err, err)
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v, want a not-exist error", err)
	}
	_, err = ValidateFile(t.TempDir(), nil)
	if err == nil || errors.As(err, &verr) || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("directory: got %v, want a plain 'is a directory' error", err)
	}
}

// CDS may deliver clusters at run time, so references are not checked
// against the static ones then.
func TestClusterReferencesUncheckedWithCDS(t *testing.T) {
	orig, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	missing := strings.Replace(string(orig), "cluster: kvgate-workers", "cluster: from-cds", 1)
	_, err = Validate([]byte(missing))
	assertProblem(t, err, hcm+".route_config.virtual_hosts[0].routes[0].route.cluster", `cluster "from-cds" is not defined`)

	withCDS := missing + "dynamic_resources:\n  cds_config:\n    path_config_source: {path: /etc/envoy/cds.yaml}\n"
	if _, err := Validate([]byte(withCDS)); err != nil {
		t.Fatalf("config with CDS rejected:\n%v", err)
	}
}

func FuzzValidate(f *testing.F) {
	for name := range shippedConfigs {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("static_resources: {clusters: [{name: a, type: 42}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		kinds, err := Validate(data)
		var verr *Error
		if err != nil && !errors.As(err, &verr) {
			t.Fatalf("Validate returned %T, want *Error", err)
		}
		if verr != nil && len(verr.Problems) == 0 {
			t.Fatal("an *Error with no problems")
		}
		if err == nil && len(kinds) == 0 {
			t.Fatal("valid config with no documents")
		}
	})
}
