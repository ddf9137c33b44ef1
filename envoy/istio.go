package envoy

import (
	"sort"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
)

// istioPatchTarget is the Envoy message an EnvoyFilter patch value is, by
// applyTo (istio.io/api networking/v1alpha3/envoy_filter.proto).
var istioPatchTarget = map[string]func() proto.Message{
	"LISTENER":            func() proto.Message { return &listenerv3.Listener{} },
	"FILTER_CHAIN":        func() proto.Message { return &listenerv3.FilterChain{} },
	"NETWORK_FILTER":      func() proto.Message { return &listenerv3.Filter{} },
	"HTTP_FILTER":         func() proto.Message { return &hcmv3.HttpFilter{} },
	"ROUTE_CONFIGURATION": func() proto.Message { return &routev3.RouteConfiguration{} },
	"VIRTUAL_HOST":        func() proto.Message { return &routev3.VirtualHost{} },
	"HTTP_ROUTE":          func() proto.Message { return &routev3.Route{} },
	"CLUSTER":             func() proto.Message { return &clusterv3.Cluster{} },
	"EXTENSION_CONFIG":    func() proto.Message { return &corev3.TypedExtensionConfig{} },
	"BOOTSTRAP":           func() proto.Message { return &bootstrapv3.Bootstrap{} },
	"LISTENER_FILTER":     func() proto.Message { return &listenerv3.ListenerFilter{} },
}

// istioGeneratedCluster reports cluster names Istio creates for Services
// (outbound|port|subset|host, inbound|...) and its built-in clusters.
func istioGeneratedCluster(name string) bool {
	return strings.HasPrefix(name, "outbound|") || strings.HasPrefix(name, "inbound|") ||
		name == "BlackHoleCluster" || name == "PassthroughCluster" || name == "InboundPassthroughCluster"
}

func validateEnvoyFilter(ps *problems, f *facts, path string, v any) {
	f.generatedCluster = istioGeneratedCluster
	spec := checkKeys(ps, path, v, "workloadSelector", "targetRefs", "configPatches", "priority")
	if spec == nil {
		ps.add(path, "required")
		return
	}
	patches := checkList(ps, field(path, "configPatches"), spec["configPatches"])
	if len(patches) == 0 {
		ps.add(field(path, "configPatches"), "an EnvoyFilter without configPatches does nothing")
	}
	for i, cp := range patches {
		validateConfigPatch(ps, f, index(field(path, "configPatches"), i), cp)
	}
}

func validateConfigPatch(ps *problems, f *facts, path string, v any) {
	cp := checkKeys(ps, path, v, "applyTo", "match", "patch")
	if cp == nil {
		return
	}
	applyTo := checkEnum(ps, field(path, "applyTo"), cp["applyTo"], sortedTargets()...)
	if cp["applyTo"] == nil {
		ps.add(field(path, "applyTo"), "required")
	}
	subFilter := validatePatchMatch(ps, field(path, "match"), cp["match"])
	patch := checkKeys(ps, field(path, "patch"), cp["patch"], "operation", "value", "filterClass")
	if patch == nil {
		ps.add(field(path, "patch"), "required")
		return
	}
	opPath := field(field(path, "patch"), "operation")
	op := checkEnum(ps, opPath, patch["operation"], "MERGE", "ADD", "REMOVE", "INSERT_BEFORE", "INSERT_AFTER", "INSERT_FIRST", "REPLACE")
	checkEnum(ps, field(field(path, "patch"), "filterClass"), patch["filterClass"], "UNSPECIFIED", "AUTHN", "AUTHZ", "STATS")
	if applyTo == "HTTP_FILTER" {
		// Envoy requires the router last: appending after it, or inserting
		// right after it, yields a chain Envoy rejects.
		switch {
		case op == "ADD":
			ps.add(opPath, "ADD appends the HTTP filter after the router, which must stay last; use INSERT_BEFORE with subFilter envoy.filters.http.router")
		case op == "INSERT_AFTER" && subFilter == "envoy.filters.http.router":
			ps.add(opPath, "INSERT_AFTER the router puts a filter after it, which Envoy rejects; use INSERT_BEFORE")
		}
	}
	value := patch["value"]
	newMsg, ok := istioPatchTarget[applyTo]
	if !ok || op == "REMOVE" {
		return
	}
	if value == nil {
		ps.add(field(field(path, "patch"), "value"), "required for %s", op)
		return
	}
	msg := newMsg()
	// A MERGE value is merged into an existing object: it may leave out
	// fields that object already has, so required-field rules do not apply.
	if decodeMessage(ps, field(field(path, "patch"), "value"), value, msg, op == "MERGE") {
		inspect(ps, f, field(field(path, "patch"), "value"), msg)
	}
}

func sortedTargets() []string {
	out := make([]string, 0, len(istioPatchTarget))
	for k := range istioPatchTarget {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// validatePatchMatch checks an EnvoyFilter match and returns the HTTP
// sub-filter it anchors to, if any.
func validatePatchMatch(ps *problems, path string, v any) string {
	m := checkKeys(ps, path, v, "context", "proxy", "listener", "routeConfiguration", "cluster")
	if m == nil {
		return ""
	}
	checkEnum(ps, field(path, "context"), m["context"], "ANY", "SIDECAR_INBOUND", "SIDECAR_OUTBOUND", "GATEWAY")
	checkKeys(ps, field(path, "proxy"), m["proxy"], "proxyVersion", "metadata")
	checkKeys(ps, field(path, "cluster"), m["cluster"], "portNumber", "service", "subset", "name")
	rc := checkKeys(ps, field(path, "routeConfiguration"), m["routeConfiguration"], "portNumber", "portName", "gateway", "vhost", "name")
	vh := checkKeys(ps, field(field(path, "routeConfiguration"), "vhost"), rc["vhost"], "name", "route", "domainName")
	checkKeys(ps, field(field(field(path, "routeConfiguration"), "vhost"), "route"), vh["route"], "name", "action")
	lp := field(path, "listener")
	l := checkKeys(ps, lp, m["listener"], "portNumber", "portName", "filterChain", "listenerFilter", "name")
	fc := checkKeys(ps, field(lp, "filterChain"), l["filterChain"], "name", "sni", "transportProtocol", "applicationProtocols", "filter", "destinationPort")
	fp := field(field(lp, "filterChain"), "filter")
	flt := checkKeys(ps, fp, fc["filter"], "name", "subFilter")
	sub := checkKeys(ps, field(fp, "subFilter"), flt["subFilter"], "name")
	name, _ := sub["name"].(string)
	return name
}

func validateDestinationRule(ps *problems, path string, v any) {
	spec := checkKeys(ps, path, v, "host", "trafficPolicy", "subsets", "exportTo", "workloadSelector")
	if spec == nil {
		ps.add(path, "required")
		return
	}
	checkString(ps, field(path, "host"), spec["host"], true)
	tp := field(path, "trafficPolicy")
	policy := checkKeys(ps, tp, spec["trafficPolicy"], "loadBalancer", "connectionPool", "outlierDetection", "tls", "portLevelSettings", "tunnel", "proxyProtocol", "retryBudget")
	tlsPath := field(tp, "tls")
	tls := checkKeys(ps, tlsPath, policy["tls"], "mode", "clientCertificate", "privateKey", "caCertificates", "credentialName", "subjectAltNames", "sni", "insecureSkipVerify", "caCrl")
	checkEnum(ps, field(tlsPath, "mode"), tls["mode"], "DISABLE", "SIMPLE", "MUTUAL", "ISTIO_MUTUAL")
	checkBool(ps, field(tlsPath, "insecureSkipVerify"), tls["insecureSkipVerify"])
	checkStrings(ps, field(tlsPath, "subjectAltNames"), tls["subjectAltNames"])
	for _, k := range []string{"clientCertificate", "privateKey", "caCertificates", "credentialName", "sni", "caCrl"} {
		checkString(ps, field(tlsPath, k), tls[k], false)
	}
}
