package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The shipped configs, relative to this package's directory.
var shippedEnvoyConfigs = []string{
	"../../envoy/envoy.yaml",
	"../../envoy/envoy-header-routing.yaml",
	"../../envoy/envoy-buffered-failopen.yaml",
	"../../envoy/envoy-original-dst.yaml",
	"../../envoy/envoy-mtls.yaml",
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

// The shipped configs pass strictly: no error and no warning (what CI
// holds configs it ships to).
func TestValidateEnvoyCLIShippedConfigsOK(t *testing.T) {
	code, out, errOut := runValidateEnvoyCLI(t, append([]string{"--strict"}, shippedEnvoyConfigs...)...)
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
	broken := writeBrokenCopy(t, "../../envoy/envoy-original-dst.yaml", "lb_policy: CLUSTER_PROVIDED", "lb_policy: ROUND_ROBIN")
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
	broken := writeBrokenCopy(t, "../../envoy/istio/envoyfilter.yaml", "      # Before the router: Envoy requires the router to be the last filter.\n      operation: INSERT_BEFORE", "      operation: ADD")
	code, out, errOut := runValidateEnvoyCLI(t, missing, broken)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (unreadable wins over invalid)", code)
	}
	if !strings.Contains(errOut, missing) || !strings.Contains(errOut, "no such file") {
		t.Fatalf("stderr %q does not name the unreadable file", errOut)
	}
	if !strings.Contains(out, broken+": spec.configPatches[1].patch.operation: ADD appends the HTTP filter after the router") {
		t.Fatalf("the readable file was not checked; stdout:\n%s", out)
	}
}

func TestValidateEnvoyCLIUsage(t *testing.T) {
	code, out, errOut := runValidateEnvoyCLI(t)
	if code != 2 || out != "" || !strings.Contains(errOut, "usage: kvgate validate-envoy [--config kvgate.yaml] [--strict] FILE...") {
		t.Fatalf("no args: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, _ := runValidateEnvoyCLI(t, "--help"); code != 0 {
		t.Fatalf("--help: exit %d, want 0", code)
	}
}

// With --config the Envoy file is held to what that kvgate configuration
// sends: an ORIGINAL_DST cluster parses one ip:port, so kvgate's default
// (override_host with two fallbacks) is refused and original_dst accepted.
func TestValidateEnvoyCLIWithKvgateConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lists := write("list.yaml", "extproc: {fallbacks: 2}\n")
	single := write("single.yaml", "extproc: {envoy_routing: original_dst}\n")
	odst := "../../envoy/envoy-original-dst.yaml"
	code, out, errOut := runValidateEnvoyCLI(t, "--config", lists, odst)
	if code != 2 || !strings.Contains(out, "parseInternetAddressAndPortNoThrow") || !strings.Contains(out, "set extproc.envoy_routing: original_dst") {
		t.Fatalf("fallbacks with ORIGINAL_DST: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if code, out, errOut := runValidateEnvoyCLI(t, "--config", single, odst, "../../envoy/envoy.yaml"); code != 0 {
		t.Fatalf("one endpoint: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	bad := write("bad.yaml", "extproc: {envoy_routing: original_dst, fallbacks: 1}\n")
	if code, _, errOut := runValidateEnvoyCLI(t, "--config", bad, odst); code != 2 || !strings.Contains(errOut, "extproc.fallbacks: must be 0") {
		t.Fatalf("invalid kvgate config: exit %d, stderr %q", code, errOut)
	}
}

// Issue 31, finding 7: override_host without selected_host_key (as
// GIE-generated gateway configs may be) is a config Envoy accepts and
// kvgate routes through, though it books a fallback's request on the
// primary: a warning, exit 0, unless --strict (exit 2). An error (Envoy
// refuses the config) stays exit 2 either way.
func TestValidateEnvoyCLIWarningsExitZeroUnlessStrict(t *testing.T) {
	unreported := writeBrokenCopy(t, "../../envoy/envoy.yaml",
		"            selected_host_key:\n              key: envoy.lb\n              path:\n              - key: x-gateway-destination-endpoint-served\n", "")
	const warning = ": warning: static_resources.clusters[1].load_balancing_policy.policies[0].typed_extension_config.typed_config.selected_host_key: unset: Envoy never reports the host it used"
	code, out, _ := runValidateEnvoyCLI(t, unreported)
	if code != 0 || !strings.HasPrefix(out, unreported+warning) || strings.Contains(out, ": ok") {
		t.Fatalf("without --strict: exit %d, stdout:\n%s\nwant exit 0 and %q", code, out, unreported+warning)
	}
	if code, out, _ := runValidateEnvoyCLI(t, "--strict", unreported); code != 2 || !strings.HasPrefix(out, unreported+warning) {
		t.Fatalf("--strict: exit %d, stdout:\n%s\nwant exit 2", code, out)
	}
	broken := writeBrokenCopy(t, "../../envoy/envoy-original-dst.yaml", "lb_policy: CLUSTER_PROVIDED", "lb_policy: ROUND_ROBIN")
	if code, out, _ := runValidateEnvoyCLI(t, unreported, broken); code != 2 || !strings.Contains(out, broken+": static_resources.clusters[1].lb_policy: ORIGINAL_DST requires CLUSTER_PROVIDED") {
		t.Fatalf("an error beside a warning: exit %d, stdout:\n%s\nwant exit 2", code, out)
	}
}

// --types prints the extension types the validator checks: every type the
// shipped configs name is among them, and a type outside the list is
// reported as unknown with the list pointed at.
func TestValidateEnvoyCLITypes(t *testing.T) {
	code, out, errOut := runValidateEnvoyCLI(t, "--types")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	listed := strings.Fields(out)
	for _, want := range []string{
		"type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
		"type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost",
		"type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
	} {
		if !slices.Contains(listed, want) {
			t.Errorf("--types lacks %s; got:\n%s", want, out)
		}
	}
	data, err := os.ReadFile("../../envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const router = "envoy.extensions.filters.http.router.v3.Router"
	const jwt = "envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication"
	file := filepath.Join(t.TempDir(), "jwt.yaml")
	if err := os.WriteFile(file, bytes.Replace(data, []byte(router), []byte(jwt), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runValidateEnvoyCLI(t, file)
	if code != 2 || !strings.Contains(out, `unknown type "type.googleapis.com/`+jwt+`"`) || !strings.Contains(out, "validate-envoy --types") {
		t.Fatalf("unlinked extension: exit %d, stdout:\n%s", code, out)
	}
}
