package envoy

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// shippedConfigs lists every YAML file in this folder and what it holds.
var shippedConfigs = map[string][]Kind{
	"envoy.yaml":                         {KindBootstrap},
	"envoy-header-routing.yaml":          {KindBootstrap},
	"envoy-buffered-failopen.yaml":       {KindBootstrap},
	"envoy-original-dst.yaml":            {KindBootstrap},
	"envoy-mtls.yaml":                    {KindBootstrap},
	"istio/envoyfilter.yaml":             {KindEnvoyFilter},
	"istio/destinationrule.yaml":         {KindDestinationRule},
	"envoy-gateway/extensionpolicy.yaml": {KindEnvoyExtensionPolicy, KindEnvoyPatchPolicy, KindClientTrafficPolicy},
}

// TestShippedConfigsValidate checks every shipped config with the Go
// validator and, where an envoy binary is installed, with Envoy itself.
func TestShippedConfigsValidate(t *testing.T) {
	envoyBin, _ := exec.LookPath("envoy")
	for name, wantKinds := range shippedConfigs {
		t.Run(name, func(t *testing.T) {
			kinds, err := ValidateFile(name, nil)
			if err != nil {
				t.Fatalf("shipped config rejected:\n%v", err)
			}
			if !slices.Equal(kinds, wantKinds) {
				t.Fatalf("kinds = %v, want %v", kinds, wantKinds)
			}
			if envoyBin == "" || wantKinds[0] != KindBootstrap {
				return // the Go validation above is the check; Envoy adds one when present
			}
			out, err := exec.Command(envoyBin, "--mode", "validate", "-c", name).CombinedOutput()
			if err != nil {
				t.Fatalf("envoy --mode validate -c %s: %v\n%s", name, err, out)
			}
		})
	}
}

// TestEveryShippedYAMLIsListed keeps shippedConfigs complete, so a new
// config cannot be shipped unvalidated.
func TestEveryShippedYAMLIsListed(t *testing.T) {
	var found []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml") {
			found = append(found, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != len(shippedConfigs) {
		t.Errorf("found %d YAML files %v, shippedConfigs lists %d", len(found), found, len(shippedConfigs))
	}
	for _, f := range found {
		if _, ok := shippedConfigs[f]; !ok {
			t.Errorf("%s is not in shippedConfigs", f)
		}
	}
}

// mutation is a deliberately broken copy of a shipped config and the
// problem the validator must report for it.
type mutation struct {
	name     string
	file     string
	old, new string // old must occur exactly once in file
	wantPath string
	wantMsg  string
	// warning: Envoy accepts the config and kvgate routes through it, but
	// cannot account something (Problem.Warning; not Fatal).
	warning bool
}

const (
	hcm     = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config"
	extProc = hcm + ".http_filters[1].typed_config"
	odst    = "static_resources.clusters[1]"
	workers = "static_resources.clusters[1]"
	ohost   = workers + ".load_balancing_policy.policies[0].typed_extension_config.typed_config"
)

var mutations = []mutation{
	{
		name: "unknown field", file: "envoy-original-dst.yaml",
		old: "    cleanup_interval: 60s", new: "    cleanup_intervall: 60s",
		wantPath: odst + ".cleanup_intervall", wantMsg: `unknown field "cleanup_intervall" in envoy.config.cluster.v3.Cluster (did you mean "cleanup_interval"?)`,
	},
	{
		name: "bad enum name", file: "envoy-original-dst.yaml",
		old: "lb_policy: CLUSTER_PROVIDED", new: "lb_policy: CLUSTER_PROVIDE",
		wantPath: odst + ".lb_policy", wantMsg: `"CLUSTER_PROVIDE" is not a value of enum envoy.config.cluster.v3.Cluster.LbPolicy`,
	},
	{
		name: "bad enum number", file: "envoy-original-dst.yaml",
		old: "type: ORIGINAL_DST", new: "type: 42",
		wantPath: odst + ".type", wantMsg: "42 is not a defined number of enum envoy.config.cluster.v3.Cluster.DiscoveryType",
	},
	{
		name: "misspelt field inside the ext_proc typed_config", file: "envoy.yaml",
		old: "failure_mode_allow: false", new: "failure_mode_alow: false",
		wantPath: extProc + ".failure_mode_alow", wantMsg: `unknown field "failure_mode_alow" in envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor`,
	},
	{
		name: "bad enum inside nested typed_config", file: "envoy.yaml",
		old: "request_body_mode: FULL_DUPLEX_STREAMED", new: "request_body_mode: FULL_DUPLEX",
		wantPath: extProc + ".processing_mode.request_body_mode", wantMsg: `"FULL_DUPLEX" is not a value of enum`,
	},
	{
		name: "unregistered Any type", file: "envoy.yaml",
		old: "envoy.extensions.filters.http.router.v3.Router", new: "envoy.extensions.filters.http.router.v3.Routr",
		wantPath: hcm + ".http_filters[2].typed_config.@type", wantMsg: `unknown type "type.googleapis.com/envoy.extensions.filters.http.router.v3.Routr"`,
	},
	{
		name: "validate rule inside an Any payload", file: "envoy.yaml",
		old: "stat_prefix: kvgate_ingress", new: `stat_prefix: ""`,
		wantPath: hcm + ".stat_prefix", wantMsg: "value length must be at least 1 runes",
	},
	{
		name: "validate rule at top level", file: "envoy-original-dst.yaml",
		old: "connect_timeout: 5s", new: "connect_timeout: 0s",
		wantPath: odst + ".connect_timeout", wantMsg: "value must be greater than 0s",
	},
	{
		name: "duration not in protobuf JSON form", file: "envoy-buffered-failopen.yaml",
		old: "message_timeout: 0.5s", new: "message_timeout: 500ms",
		wantPath: extProc + ".message_timeout", wantMsg: `"500ms" is not a protobuf JSON duration`,
	},
	{
		name: "wrong scalar type", file: "envoy.yaml",
		old: "port_value: 8080", new: "port_value: eighty",
		wantPath: "static_resources.listeners[0].address.socket_address.port_value", wantMsg: `expected an integer, got "eighty"`,
	},
	{
		name: "ORIGINAL_DST with ROUND_ROBIN", file: "envoy-original-dst.yaml",
		old: "lb_policy: CLUSTER_PROVIDED", new: "lb_policy: ROUND_ROBIN",
		wantPath: odst + ".lb_policy", wantMsg: "ORIGINAL_DST requires CLUSTER_PROVIDED, got ROUND_ROBIN",
	},
	{
		name: "ORIGINAL_DST with a load_assignment", file: "envoy-original-dst.yaml",
		old: "    cleanup_interval: 60s\n", new: "    cleanup_interval: 60s\n    load_assignment: {cluster_name: kvgate-original-dst}\n",
		wantPath: odst + ".load_assignment", wantMsg: "ORIGINAL_DST clusters must have no load_assignment",
	},
	{
		name: "ORIGINAL_DST http_header_name without use_http_header", file: "envoy-original-dst.yaml",
		old: "      use_http_header: false\n", new: "      use_http_header: false\n      http_header_name: x-gateway-destination-endpoint\n",
		wantPath: odst + ".original_dst_lb_config.http_header_name", wantMsg: "OriginalDstClusterFactory::createClusterImpl",
	},
	{
		name: "CLUSTER_PROVIDED on a STATIC cluster", file: "envoy.yaml",
		old: "  - name: kvgate-extproc\n    type: STATIC\n", new: "  - name: kvgate-extproc\n    type: STATIC\n    lb_policy: CLUSTER_PROVIDED\n",
		wantPath: "static_resources.clusters[0].lb_policy", wantMsg: "CLUSTER_PROVIDED is only valid for ORIGINAL_DST",
	},
	{
		name: "FULL_DUPLEX_STREAMED with request trailers skipped", file: "envoy.yaml",
		old: "request_trailer_mode: SEND", new: "request_trailer_mode: SKIP",
		wantPath: extProc + ".processing_mode.request_trailer_mode", wantMsg: "request_body_mode FULL_DUPLEX_STREAMED requires request_trailer_mode SEND, got SKIP",
	},
	{
		name: "FULL_DUPLEX_STREAMED response with trailers by default", file: "envoy.yaml",
		old: "                response_trailer_mode: SEND\n", new: "",
		wantPath: extProc + ".processing_mode.response_trailer_mode", wantMsg: "requires response_trailer_mode SEND, got DEFAULT",
	},
	{
		name: "request bodies STREAMED", file: "envoy.yaml",
		old: "request_body_mode: FULL_DUPLEX_STREAMED", new: "request_body_mode: STREAMED",
		wantPath: extProc + ".processing_mode.request_body_mode", wantMsg: "STREAMED is not served by kvgate",
	},
	{
		name: "request bodies BUFFERED_PARTIAL", file: "envoy-buffered-failopen.yaml",
		old: "request_body_mode: BUFFERED", new: "request_body_mode: BUFFERED_PARTIAL",
		wantPath: extProc + ".processing_mode.request_body_mode", wantMsg: "BUFFERED_PARTIAL is not served by kvgate",
	},
	{
		name: "request headers skipped", file: "envoy.yaml",
		old: "request_header_mode: SEND", new: "request_header_mode: SKIP",
		wantPath: extProc + ".processing_mode.request_header_mode", wantMsg: "ext_proc.cc decodeHeaders",
	},
	{
		name: "observability mode", file: "envoy.yaml",
		old: "allow_mode_override: false", new: "allow_mode_override: false\n              observability_mode: true",
		wantPath: extProc + ".observability_mode", wantMsg: "ext_proc.cc onReceiveMessage",
	},
	{
		name: "immediate responses disabled", file: "envoy.yaml",
		old: "allow_mode_override: false", new: "allow_mode_override: false\n              disable_immediate_response: true",
		wantPath: extProc + ".disable_immediate_response", wantMsg: "as spurious messages (ext_proc.cc onReceiveMessage)",
	},
	{
		name: "ext_proc cluster missing", file: "envoy.yaml",
		old: "envoy_grpc: {cluster_name: kvgate-extproc}", new: "envoy_grpc: {cluster_name: kvgate-ext-proc}",
		wantPath: extProc + ".grpc_service.envoy_grpc.cluster_name", wantMsg: `cluster "kvgate-ext-proc" is not defined`,
	},
	{
		name: "route cluster missing", file: "envoy-original-dst.yaml",
		old: "cluster: kvgate-original-dst", new: "cluster: kvgate-workers",
		wantPath: hcm + ".route_config.virtual_hosts[0].routes[0].route.cluster", wantMsg: `cluster "kvgate-workers" is not defined`,
	},
	{
		name: "duplicate cluster name", file: "envoy-original-dst.yaml",
		old: "  - name: kvgate-original-dst\n", new: "  - name: kvgate-extproc\n",
		wantPath: odst + ".name", wantMsg: `duplicate cluster name "kvgate-extproc"`,
	},
	{
		name: "router not last", file: "envoy.yaml",
		old:      "              \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n",
		new:      "              \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n          - name: envoy.filters.http.buffer\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer\n              max_request_bytes: 1024\n",
		wantPath: hcm + ".http_filters[2]", wantMsg: "the router must be the last HTTP filter",
	},
	{
		name: "last filter not the router", file: "envoy.yaml",
		old:      "          - name: envoy.filters.http.router\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n",
		new:      "          - name: envoy.filters.http.buffer\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer\n              max_request_bytes: 1024\n",
		wantPath: hcm + ".http_filters[2]", wantMsg: `the last HTTP filter is "envoy.filters.http.buffer"; it must be the router`,
	},
	{
		name: "envoy.lb not a receiving namespace", file: "envoy-original-dst.yaml",
		old: "receiving_namespaces:\n                  untyped: [envoy.lb]", new: "receiving_namespaces:\n                  untyped: [kvgate]",
		wantPath: extProc + ".metadata_options.receiving_namespaces.untyped", wantMsg: `does not include "envoy.lb", which ` + odst + ".original_dst_lb_config.metadata_key reads",
	},
	{
		name: "metadata path not the destination key", file: "envoy-original-dst.yaml",
		old: "        - key: x-gateway-destination-endpoint", new: "        - key: x-gateway-destination",
		wantPath: odst + ".original_dst_lb_config.metadata_key.path", wantMsg: "must be [{key: x-gateway-destination-endpoint}]",
	},
	{
		name: "header routing on another header", file: "envoy-header-routing.yaml",
		old: "http_header_name: x-gateway-destination-endpoint", new: "http_header_name: x-destination",
		wantPath: odst + ".original_dst_lb_config.http_header_name", wantMsg: `routes on header "x-destination" but kvgate writes "x-gateway-destination-endpoint"`,
	},
	{
		name: "override_host without fallback", file: "envoy.yaml",
		old: "            fallback_policy:\n              policies:\n              - typed_extension_config:\n                  name: envoy.load_balancing_policies.least_request\n                  typed_config:\n                    \"@type\": type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest\n", new: "",
		wantPath: ohost + ".fallback_policy", wantMsg: "value is required",
	},
	{
		name: "override_host on a cluster without endpoints", file: "envoy.yaml",
		old: "    load_assignment:\n      cluster_name: kvgate-workers\n      endpoints:\n      - lb_endpoints:\n        - endpoint:\n            address:\n              socket_address: {address: 10.0.0.11, port_value: 8000}\n        - endpoint:\n            address:\n              socket_address: {address: 10.0.0.12, port_value: 8000}\n        - endpoint:\n            address:\n              socket_address: {address: 10.0.0.13, port_value: 8000}\n", new: "",
		wantPath: workers + ".load_assignment", wantMsg: "override_host only picks hosts the cluster already knows, and this STATIC cluster has no endpoints",
	},
	{
		name: "override_host reading another metadata key", file: "envoy.yaml",
		old: "            - metadata:\n                key: envoy.lb", new: "            - metadata:\n                key: kvgate",
		wantPath: ohost + ".override_host_sources[0].metadata.key", wantMsg: `kvgate writes the destination to metadata namespace "envoy.lb", not "kvgate"`,
	},
	{
		name: "override_host that never reports the served host", file: "envoy.yaml",
		old: "            selected_host_key:\n              key: envoy.lb\n              path:\n              - key: x-gateway-destination-endpoint-served\n", new: "",
		wantPath: ohost + ".selected_host_key", wantMsg: "load_balancer.cc addSelectedHostKey", warning: true,
	},
	{
		name: "served host reported under another key", file: "envoy.yaml",
		old: "              - key: x-gateway-destination-endpoint-served", new: "              - key: served",
		wantPath: ohost + ".selected_host_key", wantMsg: "must be {key: envoy.lb, path: [{key: x-gateway-destination-endpoint-served}]}", warning: true,
	},
	{
		name: "served host not forwarded to kvgate", file: "envoy.yaml",
		old: "untyped: [envoy.lb, envoy.lb.subset_hint]", new: "untyped: [envoy.lb.subset_hint]",
		wantPath: extProc + ".metadata_options.forwarding_namespaces.untyped", wantMsg: "ext_proc.cc addDynamicMetadata", warning: true,
	},
	{
		name: "Istio: ext_proc added after the router", file: "istio/envoyfilter.yaml",
		old: "      # Before the router: Envoy requires the router to be the last filter.\n      operation: INSERT_BEFORE", new: "      operation: ADD",
		wantPath: "spec.configPatches[1].patch.operation", wantMsg: "ADD appends the HTTP filter after the router",
	},
	{
		name: "Istio: ext_proc inserted after the router", file: "istio/envoyfilter.yaml",
		old: "      # Before the router: Envoy requires the router to be the last filter.\n      operation: INSERT_BEFORE", new: "      operation: INSERT_AFTER",
		wantPath: "spec.configPatches[1].patch.operation", wantMsg: "INSERT_AFTER the router",
	},
	{
		name: "Istio: fragment with observability mode", file: "istio/envoyfilter.yaml",
		old: "failure_mode_allow: false", new: "failure_mode_allow: false\n          observability_mode: true",
		wantPath: "spec.configPatches[1].patch.value.typed_config.observability_mode", wantMsg: "ext_proc.cc onReceiveMessage",
	},
	{
		name: "Istio: cluster fragment with ROUND_ROBIN", file: "istio/envoyfilter.yaml",
		old: "lb_policy: CLUSTER_PROVIDED", new: "lb_policy: ROUND_ROBIN",
		wantPath: "spec.configPatches[2].patch.value.lb_policy", wantMsg: "ORIGINAL_DST requires CLUSTER_PROVIDED",
	},
	{
		name: "Istio: unknown field in a MERGE fragment", file: "istio/envoyfilter.yaml",
		old: "          idle_timeout: 300s", new: "          idle_timout: 300s",
		wantPath: "spec.configPatches[4].patch.value.route.idle_timout", wantMsg: `unknown field "idle_timout" in envoy.config.route.v3.RouteAction`,
	},
	{
		name: "Istio: route to a cluster nobody defines", file: "istio/envoyfilter.yaml",
		old: "          cluster: kvgate-original-dst", new: "          cluster: kvgate-original",
		wantPath: "spec.configPatches[4].patch.value.route.cluster", wantMsg: `cluster "kvgate-original" is not defined`,
	},
	{
		name: "Istio: receiving namespace missing", file: "istio/envoyfilter.yaml",
		old: "receiving_namespaces:\n              untyped: [envoy.lb]", new: "receiving_namespaces:\n              untyped: []",
		wantPath: "spec.configPatches[1].patch.value.typed_config.metadata_options.receiving_namespaces.untyped", wantMsg: `does not include "envoy.lb"`,
	},
	{
		name: "Istio: bad applyTo", file: "istio/envoyfilter.yaml",
		old: "  - applyTo: CLUSTER\n    match:\n      context: GATEWAY\n    patch:", new: "  - applyTo: CLUSTERS\n    match:\n      context: GATEWAY\n    patch:",
		wantPath: "spec.configPatches[2].applyTo", wantMsg: "CLUSTERS is not one of",
	},
	{
		name: "Istio: bad TLS mode", file: "istio/destinationrule.yaml",
		old: "mode: SIMPLE", new: "mode: STRICT",
		wantPath: "spec.trafficPolicy.tls.mode", wantMsg: "STRICT is not one of DISABLE, SIMPLE, MUTUAL, ISTIO_MUTUAL",
	},
	{
		name: "EG: FullDuplexStreamed failing open", file: "envoy-gateway/extensionpolicy.yaml",
		old: "failOpen: false", new: "failOpen: true",
		wantPath: "documents[0].spec.extProc[0].failOpen", wantMsg: "must be false with FullDuplexStreamed",
	},
	{
		name: "EG: envoy.lb not writable", file: "envoy-gateway/extensionpolicy.yaml",
		old: "writableNamespaces: [envoy.lb]", new: "writableNamespaces: [kvgate]",
		wantPath: "documents[0].spec.extProc[0].metadata.writableNamespaces", wantMsg: `does not include "envoy.lb", which documents[1].spec.jsonPatches[0].operation.value.original_dst_lb_config.metadata_key reads`,
	},
	{
		name: "EG: bad body mode", file: "envoy-gateway/extensionpolicy.yaml",
		old: "        body: FullDuplexStreamed\n    metadata", new: "        body: FullDuplex\n    metadata",
		wantPath: "documents[0].spec.extProc[0].processingMode.response.body", wantMsg: "FullDuplex is not one of",
	},
	{
		name: "EG: gRPC health check settings on an HTTP check", file: "envoy-gateway/extensionpolicy.yaml",
		old: "type: GRPC", new: "type: HTTP",
		wantPath: "documents[0].spec.extProc[0].backendSettings.healthCheck.active.grpc", wantMsg: "can only be set with type GRPC",
	},
	{
		name: "EG: patched cluster with ROUND_ROBIN", file: "envoy-gateway/extensionpolicy.yaml",
		old: "lb_policy: CLUSTER_PROVIDED", new: "lb_policy: ROUND_ROBIN",
		wantPath: "documents[1].spec.jsonPatches[0].operation.value.lb_policy", wantMsg: "ORIGINAL_DST requires CLUSTER_PROVIDED",
	},
	{
		name: "EG: route patched to an undefined cluster", file: "envoy-gateway/extensionpolicy.yaml",
		old: "      value: kvgate-original-dst", new: "      value: kvgate-orig-dst",
		wantPath: "documents[1].spec.jsonPatches[1].operation.value@/virtual_hosts/0/routes/0/route.cluster", wantMsg: `cluster "kvgate-orig-dst" is not defined`,
	},
	{
		name: "EG: patch path naming no field", file: "envoy-gateway/extensionpolicy.yaml",
		old: "path: /virtual_hosts/0/routes/0/route/cluster", new: "path: /virtual_hosts/0/routes/0/route/clustr",
		wantPath: "documents[1].spec.jsonPatches[1].operation.path", wantMsg: `no field "clustr" in envoy.config.route.v3.RouteAction`,
	},
	{
		name: "EG: patched value of the wrong form", file: "envoy-gateway/extensionpolicy.yaml",
		old: "      value: 0s", new: "      value: 0",
		wantPath: "documents[1].spec.jsonPatches[2].operation.value@/virtual_hosts/0/routes/0/route.timeout", wantMsg: "is not a protobuf JSON duration",
	},
	{
		name: "EG: early header filter with a bad name", file: "envoy-gateway/extensionpolicy.yaml",
		old: "      - x-kvgate-debug", new: "      - \"x kvgate debug\"",
		wantPath: "documents[2].spec.headers.earlyRequestHeaders.remove[0]", wantMsg: "is not an HTTP header name",
	},
	{
		name: "unsupported kind", file: "istio/destinationrule.yaml",
		old: "kind: DestinationRule", new: "kind: VirtualService",
		wantPath: "kind", wantMsg: `unsupported kind "VirtualService"`,
	},
}

// kvgateMutations hold a shipped config to a kvgate configuration
// (ValidateWith): what kvgate sends must be what Envoy can route.
var kvgateMutations = []struct {
	name     string
	file     string
	noRetry  bool // the route's retry_policy removed
	kvgate   Kvgate
	wantPath string // "" means: accepted
	wantMsg  string
	warning  bool // see mutation.warning
}{
	{name: "ORIGINAL_DST with kvgate sending fallbacks", file: "envoy-original-dst.yaml", kvgate: Kvgate{EnvoyRouting: "override_host", Fallbacks: 2},
		wantPath: odst + ".original_dst_lb_config", wantMsg: "parseInternetAddressAndPortNoThrow"},
	{name: "header ORIGINAL_DST with kvgate sending fallbacks", file: "envoy-header-routing.yaml", kvgate: Kvgate{EnvoyRouting: "override_host", Fallbacks: 1},
		wantPath: odst + ".original_dst_lb_config", wantMsg: "original_dst_cluster.cc metadataOverrideHost"},
	{name: "Istio ORIGINAL_DST with kvgate sending fallbacks", file: "istio/envoyfilter.yaml", kvgate: Kvgate{EnvoyRouting: "override_host", Fallbacks: 2},
		wantPath: "spec.configPatches[2].patch.value.original_dst_lb_config", wantMsg: "every request would get 503"},
	{name: "ORIGINAL_DST with kvgate sending one endpoint", file: "envoy-original-dst.yaml", kvgate: Kvgate{EnvoyRouting: "original_dst"}},
	{name: "EG ORIGINAL_DST with kvgate sending one endpoint", file: "envoy-gateway/extensionpolicy.yaml", kvgate: Kvgate{EnvoyRouting: "original_dst"}},
	{name: "override_host with kvgate's list", file: "envoy.yaml", kvgate: Kvgate{EnvoyRouting: "override_host", Fallbacks: 2}},
	{name: "override_host with kvgate sending one endpoint", file: "envoy.yaml", kvgate: Kvgate{EnvoyRouting: "original_dst"}},
	{name: "override_host fallbacks never walked", file: "envoy.yaml", noRetry: true, kvgate: Kvgate{EnvoyRouting: "override_host", Fallbacks: 2},
		wantPath: hcm + ".route_config.virtual_hosts[0].routes[0].route.retry_policy", wantMsg: "load_balancer.cc getEndpoint", warning: true},
	{name: "override_host without retries and kvgate sending one endpoint", file: "envoy.yaml", noRetry: true, kvgate: Kvgate{EnvoyRouting: "original_dst"}},
}

func TestKvgateConfigChecked(t *testing.T) {
	for _, m := range kvgateMutations {
		t.Run(m.name, func(t *testing.T) {
			data, err := os.ReadFile(m.file)
			if err != nil {
				t.Fatal(err)
			}
			if m.noRetry {
				data = []byte(removeRetryPolicy(t, string(data)))
			}
			_, err = ValidateWith(data, &m.kvgate)
			if m.wantPath == "" {
				if err != nil {
					t.Fatalf("rejected:\n%v", err)
				}
				return
			}
			assertProblem(t, err, m.wantPath, m.wantMsg)
			assertSeverity(t, err, m.wantPath, m.warning)
		})
	}
}

// removeRetryPolicy cuts the route's retry_policy block out of envoy.yaml.
func removeRetryPolicy(t *testing.T, s string) string {
	t.Helper()
	start := strings.Index(s, "                  retry_policy:\n")
	end := strings.Index(s, "          http_filters:\n")
	if start < 0 || end < start {
		t.Fatal("retry_policy block not found")
	}
	return s[:start] + s[end:]
}

// Fail-open with FULL_DUPLEX_STREAMED is a valid Envoy config since
// envoyproxy/envoy#41276 (fail-open then holds until the first body chunk,
// ext_proc.cc failureModeAllow); the validator must accept it, in a
// bootstrap and in an Istio fragment alike.
func TestFailOpenFullDuplexAccepted(t *testing.T) {
	for _, file := range []string{"envoy.yaml", "istio/envoyfilter.yaml"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.Replace(string(data), "failure_mode_allow: false", "failure_mode_allow: true", 1)
		if _, err := Validate([]byte(s)); err != nil {
			t.Errorf("%s with failure_mode_allow true rejected:\n%v", file, err)
		}
	}
}

func TestBrokenConfigsRejected(t *testing.T) {
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			orig, err := os.ReadFile(m.file)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(orig), m.old); n != 1 {
				t.Fatalf("%q occurs %d times in %s; the mutation needs exactly one", m.old, n, m.file)
			}
			broken := strings.Replace(string(orig), m.old, m.new, 1)
			_, err = Validate([]byte(broken))
			assertProblem(t, err, m.wantPath, m.wantMsg)
			assertSeverity(t, err, m.wantPath, m.warning)
		})
	}
}

// assertProblem checks that err is an *Error with a problem at wantPath
// whose message contains wantMsg.
func assertProblem(t *testing.T, err error, wantPath, wantMsg string) {
	t.Helper()
	var verr *Error
	if !errors.As(err, &verr) {
		t.Fatalf("got error %v (%T), want *Error with %s: %s", err, err, wantPath, wantMsg)
	}
	for _, p := range verr.Problems {
		if p.Path == wantPath && strings.Contains(p.Message, wantMsg) {
			return
		}
	}
	t.Fatalf("no problem at %q containing %q; got:\n%v", wantPath, wantMsg, verr)
}

// assertSeverity checks the problem at wantPath is a warning or an error
// as wanted, and that a config whose only problem is a warning is not
// Fatal (validate-envoy exits 0 on it without --strict).
func assertSeverity(t *testing.T, err error, wantPath string, warning bool) {
	t.Helper()
	var verr *Error
	if !errors.As(err, &verr) {
		t.Fatalf("got %v, want *Error", err)
	}
	for _, p := range verr.Problems {
		if p.Path == wantPath && p.Warning != warning {
			t.Fatalf("problem at %s: warning %v, want %v", wantPath, p.Warning, warning)
		}
	}
	if verr.Fatal() == warning {
		t.Fatalf("Fatal() = %v for a config whose problem is a warning=%v:\n%v", verr.Fatal(), warning, verr)
	}
}
