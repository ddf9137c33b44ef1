package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The shipped configs, relative to this package's directory.
var shippedEnvoyConfigs = []string{
	"../../envoy/envoy.yaml",
	"../../envoy/envoy-header-routing.yaml",
	"../../envoy/envoy-buffered-failopen.yaml",
	"../../envoy/envoy-override-host.yaml",
	"../../envoy/istio/envoyfilter.yaml",
	"../../envoy/istio/destinationrule.yaml",
	"../../envoy/envoy-gateway/extensionpolicy.yaml",
}

func runValidateEnvoyCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := dispatch(append([]string{"validate-envoy"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestValidateEnvoyCLIShippedConfigsOK(t *testing.T) {
	code, out, errOut := runValidateEnvoyCLI(t, shippedEnvoyConfigs...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var want strings.Builder
	for _, f := range shippedEnvoyConfigs {
		want.WriteString(f + ": ok\n")
	}
	if out != want.String() {
		t.Fatalf("stdout:\n%s\nwant:\n%s", out, want.String())
	}
}

func writeBrokenCopy(t *testing.T, src, old, new string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(data), old) != 1 {
		t.Fatalf("%q must occur once in %s", old, src)
	}
	path := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestValidateEnvoyCLIInvalidConfig(t *testing.T) {
	broken := writeBrokenCopy(t, "../../envoy/envoy.yaml", "lb_policy: CLUSTER_PROVIDED", "lb_policy: ROUND_ROBIN")
	good := "../../envoy/envoy.yaml"
	code, out, _ := runValidateEnvoyCLI(t, good, broken)
	if code != 2 {
		t.Fatalf("exit %d, want 2; stdout:\n%s", code, out)
	}
	want := good + ": ok\n" + broken + ": static_resources.clusters[1].lb_policy: ORIGINAL_DST requires CLUSTER_PROVIDED, got ROUND_ROBIN"
	if !strings.HasPrefix(out, want) {
		t.Fatalf("stdout:\n%s\nwant prefix:\n%s", out, want)
	}
}

func TestValidateEnvoyCLIUnreadableFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	broken := writeBrokenCopy(t, "../../envoy/istio/envoyfilter.yaml", "operation: INSERT_BEFORE", "operation: ADD")
	code, out, errOut := runValidateEnvoyCLI(t, missing, broken)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (unreadable wins over invalid)", code)
	}
	if !strings.Contains(errOut, missing) || !strings.Contains(errOut, "no such file") {
		t.Fatalf("stderr %q does not name the unreadable file", errOut)
	}
	if !strings.Contains(out, broken+": spec.configPatches[0].patch.operation: ADD appends the HTTP filter after the router") {
		t.Fatalf("the readable file was not checked; stdout:\n%s", out)
	}
}

func TestValidateEnvoyCLIUsage(t *testing.T) {
	code, out, errOut := runValidateEnvoyCLI(t)
	if code != 2 || out != "" || !strings.Contains(errOut, "usage: kvgate validate-envoy FILE...") {
		t.Fatalf("no args: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, _ := runValidateEnvoyCLI(t, "--help"); code != 0 {
		t.Fatalf("--help: exit %d, want 0", code)
	}
}
