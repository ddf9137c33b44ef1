package envoy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// egPatchTypes are the xDS resources an EnvoyPatchPolicy JSONPatch may
// target (Envoy Gateway api/v1alpha1 envoypatchpolicy_types.go).
var egPatchTypes = map[string]func() proto.Message{
	"type.googleapis.com/envoy.config.listener.v3.Listener":                func() proto.Message { return &listenerv3.Listener{} },
	"type.googleapis.com/envoy.config.route.v3.RouteConfiguration":         func() proto.Message { return &routev3.RouteConfiguration{} },
	"type.googleapis.com/envoy.config.cluster.v3.Cluster":                  func() proto.Message { return &clusterv3.Cluster{} },
	"type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment":   func() proto.Message { return &endpointv3.ClusterLoadAssignment{} },
	"type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret": func() proto.Message { return &tlsv3.Secret{} },
}

// egGeneratedCluster reports cluster names Envoy Gateway generates from
// routes (httproute/<namespace>/<name>/rule/<n>, ...), which all hold '/'.
func egGeneratedCluster(name string) bool { return strings.Contains(name, "/") }

// gwDuration is the Gateway API duration format (GEP-2257).
var gwDuration = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)

func validateExtensionPolicy(ps *problems, f *facts, path string, v any) {
	spec := checkKeys(ps, path, v, "targetRef", "targetRefs", "targetSelectors", "extProc", "wasm", "lua")
	if spec == nil {
		ps.add(path, "required")
		return
	}
	if spec["targetRef"] == nil && spec["targetRefs"] == nil && spec["targetSelectors"] == nil {
		ps.add(path, "needs targetRef, targetRefs or targetSelectors")
	}
	checkTargets(ps, path, spec)
	procs := checkList(ps, field(path, "extProc"), spec["extProc"])
	for i, e := range procs {
		validateEGExtProc(ps, f, index(field(path, "extProc"), i), e)
	}
}

func checkTargets(ps *problems, path string, spec map[string]any) {
	refKeys := []string{"group", "kind", "name", "namespace", "sectionName"}
	if ref := checkKeys(ps, field(path, "targetRef"), spec["targetRef"], refKeys...); ref != nil {
		checkString(ps, field(field(path, "targetRef"), "name"), ref["name"], true)
	}
	for i, r := range checkList(ps, field(path, "targetRefs"), spec["targetRefs"]) {
		p := index(field(path, "targetRefs"), i)
		if ref := checkKeys(ps, p, r, refKeys...); ref != nil {
			checkString(ps, field(p, "name"), ref["name"], true)
		}
	}
}

// validateEGExtProc checks one extProc entry (api/v1alpha1/ext_proc_types.go)
// including the CEL rule that FullDuplexStreamed cannot fail open.
func validateEGExtProc(ps *problems, f *facts, path string, v any) {
	ep := checkKeys(ps, path, v, "backendRef", "backendRefs", "backendSettings", "stage", "messageTimeout", "failOpen", "processingMode", "metadata")
	if ep == nil {
		return
	}
	if ep["backendRef"] != nil {
		ps.add(field(path, "backendRef"), "not supported for extProc; use backendRefs")
	}
	refs := checkList(ps, field(path, "backendRefs"), ep["backendRefs"])
	if len(refs) == 0 {
		ps.add(field(path, "backendRefs"), "needs one backend: the kvgate ext_proc Service")
	}
	for i, r := range refs {
		p := index(field(path, "backendRefs"), i)
		ref := checkKeys(ps, p, r, "group", "kind", "name", "namespace", "port", "weight", "fallback")
		if ref == nil {
			continue
		}
		checkString(ps, field(p, "name"), ref["name"], true)
		checkEnum(ps, field(p, "kind"), ref["kind"], "Service", "Backend")
		checkEnum(ps, field(p, "group"), ref["group"], "", "gateway.envoyproxy.io")
		if ref["port"] != nil {
			if n, ok := integral(ref["port"]); !ok || n < 1 || n > 65535 {
				ps.add(field(p, "port"), "%v is not a port number", ref["port"])
			}
		}
	}
	checkEGHealthCheck(ps, field(field(path, "backendSettings"), "healthCheck"), checkKeys(ps, field(path, "backendSettings"), ep["backendSettings"],
		"loadBalancer", "proxyProtocol", "tcpKeepalive", "timeout", "connection", "dns", "http2", "healthCheck", "circuitBreaker", "retry")["healthCheck"])
	checkEnum(ps, field(path, "stage"), ep["stage"], "Route", "Backend", "All")
	if d := checkString(ps, field(path, "messageTimeout"), ep["messageTimeout"], false); d != "" && !gwDuration.MatchString(d) {
		ps.add(field(path, "messageTimeout"), "%q is not a Gateway API duration (e.g. 500ms, 1s)", d)
	}
	failOpen := checkBool(ps, field(path, "failOpen"), ep["failOpen"])
	pmPath := field(path, "processingMode")
	pm := checkKeys(ps, pmPath, ep["processingMode"], "request", "response", "allowModeOverride")
	checkBool(ps, field(pmPath, "allowModeOverride"), pm["allowModeOverride"])
	duplex := false
	for _, dir := range []string{"request", "response"} {
		p := field(pmPath, dir)
		opts := checkKeys(ps, p, pm[dir], "body", "attributes")
		body := checkEnum(ps, field(p, "body"), opts["body"], "Streamed", "Buffered", "BufferedPartial", "FullDuplexStreamed")
		duplex = duplex || body == "FullDuplexStreamed"
		checkStrings(ps, field(p, "attributes"), opts["attributes"])
	}
	if duplex && failOpen {
		ps.add(field(path, "failOpen"), "must be false with FullDuplexStreamed body processing: Envoy Gateway's CRD (CEL rule on ExtProc) refuses fail-open full-duplex processing")
	}
	mdPath := field(path, "metadata")
	md := checkKeys(ps, mdPath, ep["metadata"], "accessibleNamespaces", "writableNamespaces")
	checkStrings(ps, field(mdPath, "accessibleNamespaces"), md["accessibleNamespaces"])
	writable := checkStrings(ps, field(mdPath, "writableNamespaces"), md["writableNamespaces"])
	for i, ns := range writable {
		if strings.HasPrefix(ns, "envoy.filters.http") {
			ps.add(index(field(mdPath, "writableNamespaces"), i), "cannot be a well-known Envoy HTTP filter namespace (%q)", ns)
		}
	}
	if len(writable) > 8 {
		ps.add(field(mdPath, "writableNamespaces"), "at most 8 namespaces, got %d", len(writable))
	}
	accessible := checkStrings(ps, field(mdPath, "accessibleNamespaces"), md["accessibleNamespaces"])
	// Envoy Gateway turns writableNamespaces into the filter's
	// metadata_options.receiving_namespaces, accessibleNamespaces into its
	// forwarding_namespaces, and sends the response headers when
	// processingMode.response is present (internal/xds/translator/extproc.go
	// extProcConfig, buildProcessingMode).
	f.extProcs = append(f.extProcs, extProcFact{path: field(mdPath, "writableNamespaces"), receiving: writable,
		forwardingPath: field(mdPath, "accessibleNamespaces"), forwarding: accessible, seesResponse: pm["response"] != nil})
}

// checkEGHealthCheck checks an Envoy Gateway HealthCheck
// (api/v1alpha1/healthcheck_types.go), including its CEL rules.
func checkEGHealthCheck(ps *problems, path string, v any) {
	hc := checkKeys(ps, path, v, "active", "passive")
	ap := field(path, "active")
	a := checkKeys(ps, ap, hc["active"], "timeout", "interval", "unhealthyThreshold", "healthyThreshold", "type", "http", "tcp", "grpc")
	if a == nil {
		return
	}
	typ := checkEnum(ps, field(ap, "type"), a["type"], "HTTP", "TCP", "GRPC")
	if a["type"] == nil {
		ps.add(field(ap, "type"), "required (HTTP, TCP or GRPC)")
	}
	for _, k := range []string{"timeout", "interval"} {
		if d := checkString(ps, field(ap, k), a[k], false); d != "" {
			if _, err := time.ParseDuration(d); err != nil {
				ps.add(field(ap, k), "%q is not a duration (e.g. 1s)", d)
			}
		}
	}
	for _, k := range []string{"unhealthyThreshold", "healthyThreshold"} {
		if a[k] != nil {
			if n, ok := integral(a[k]); !ok || n < 1 {
				ps.add(field(ap, k), "%v: must be a whole number >= 1", a[k])
			}
		}
	}
	if (typ == "HTTP") != (a["http"] != nil) {
		ps.add(field(ap, "http"), "must be set exactly when type is HTTP")
	}
	if (typ == "TCP") != (a["tcp"] != nil) {
		ps.add(field(ap, "tcp"), "must be set exactly when type is TCP")
	}
	if a["grpc"] != nil && typ != "GRPC" {
		ps.add(field(ap, "grpc"), "can only be set with type GRPC")
	}
	g := checkKeys(ps, field(ap, "grpc"), a["grpc"], "service")
	checkString(ps, field(field(ap, "grpc"), "service"), g["service"], false)
}

// validateClientTrafficPolicy checks the parts of an Envoy Gateway
// ClientTrafficPolicy (api/v1alpha1/clienttrafficpolicy_types.go) the
// shipped files use: its targets and the early request header filter,
// which runs before every HTTP filter.
func validateClientTrafficPolicy(ps *problems, path string, v any) {
	spec := checkKeys(ps, path, v, "targetRef", "targetRefs", "targetSelectors", "tcpKeepalive", "enableProxyProtocol", "proxyProtocol",
		"clientIPDetection", "tls", "path", "headers", "timeout", "connection", "http1", "http2", "http3", "healthCheck")
	if spec == nil {
		ps.add(path, "required")
		return
	}
	if spec["targetRef"] == nil && spec["targetRefs"] == nil && spec["targetSelectors"] == nil {
		ps.add(path, "needs targetRef, targetRefs or targetSelectors (the Gateway)")
	}
	checkTargets(ps, path, spec)
	hp := field(path, "headers")
	h := checkKeys(ps, hp, spec["headers"], "xForwardedClientCert", "enableEnvoyHeaders", "disableRateLimitHeaders", "withUnderscoresAction",
		"preserveXRequestID", "requestID", "earlyRequestHeaders", "lateResponseHeaders")
	// gwapiv1.HTTPHeaderFilter: set/add (name, value) and remove (names),
	// at most 16 each.
	ep := field(hp, "earlyRequestHeaders")
	e := checkKeys(ps, ep, h["earlyRequestHeaders"], "set", "add", "remove")
	names := checkStrings(ps, field(ep, "remove"), e["remove"])
	if len(names) > 16 {
		ps.add(field(ep, "remove"), "at most 16 names, got %d", len(names))
	}
	for i, n := range names {
		if !headerName.MatchString(n) {
			ps.add(index(field(ep, "remove"), i), "%q is not an HTTP header name", n)
		}
	}
}

// headerName is Gateway API's HTTPHeaderName pattern.
var headerName = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+\-.^_\x60|~]+$`)

func validatePatchPolicy(ps *problems, f *facts, path string, v any) {
	f.generatedCluster = egGeneratedCluster
	spec := checkKeys(ps, path, v, "targetRef", "targetRefs", "type", "jsonPatches", "priority")
	if spec == nil {
		ps.add(path, "required")
		return
	}
	if spec["targetRef"] == nil && spec["targetRefs"] == nil {
		ps.add(path, "needs targetRef (the Gateway or GatewayClass to patch)")
	}
	checkTargets(ps, path, spec)
	if checkEnum(ps, field(path, "type"), spec["type"], "JSONPatch") == "" && spec["type"] == nil {
		ps.add(field(path, "type"), "required (JSONPatch)")
	}
	patches := checkList(ps, field(path, "jsonPatches"), spec["jsonPatches"])
	if len(patches) == 0 {
		ps.add(field(path, "jsonPatches"), "an EnvoyPatchPolicy without jsonPatches does nothing")
	}
	for i, p := range patches {
		validateJSONPatch(ps, f, index(field(path, "jsonPatches"), i), p)
	}
}

func validateJSONPatch(ps *problems, f *facts, path string, v any) {
	jp := checkKeys(ps, path, v, "type", "name", "operation")
	if jp == nil {
		return
	}
	typeURL := checkString(ps, field(path, "type"), jp["type"], true)
	newMsg, knownType := egPatchTypes[typeURL]
	if typeURL != "" && !knownType {
		ps.add(field(path, "type"), "%q is not a resource EnvoyPatchPolicy can patch (Listener, RouteConfiguration, Cluster, ClusterLoadAssignment, Secret)", typeURL)
	}
	checkString(ps, field(path, "name"), jp["name"], true)
	opPath := field(path, "operation")
	op := checkKeys(ps, opPath, jp["operation"], "op", "path", "jsonPath", "from", "value")
	if op == nil {
		ps.add(opPath, "required")
		return
	}
	verb := checkEnum(ps, field(opPath, "op"), op["op"], "add", "remove", "replace", "move", "copy", "test")
	ptr := checkString(ps, field(opPath, "path"), op["path"], false)
	jsonPath := checkString(ps, field(opPath, "jsonPath"), op["jsonPath"], false)
	if (verb == "add" || verb == "replace" || verb == "test") && op["value"] == nil {
		ps.add(field(opPath, "value"), "required for %s", verb)
	}
	if !knownType || op["value"] == nil || jsonPath != "" || (verb != "add" && verb != "replace" && verb != "test") {
		// A JSONPath selects nodes only known once applied; nothing to type.
		return
	}
	if ptr == "" {
		msg := newMsg()
		if decodeMessage(ps, field(opPath, "value"), op["value"], msg, false) {
			inspect(ps, f, field(opPath, "value"), msg)
		}
		return
	}
	md, wrapped, err := wrapAtPointer(newMsg().ProtoReflect().Descriptor(), ptr, op["value"])
	if err != nil {
		ps.add(field(opPath, "path"), "%v", err)
		return
	}
	if md == nil {
		return // the pointer goes inside an Any: its type is not known here
	}
	at := fmt.Sprintf("%s@%s", field(opPath, "value"), parentPointer(ptr))
	msg := newMsgFor(md)
	if msg == nil {
		return
	}
	if decodeMessage(ps, at, wrapped, msg, true) {
		inspect(ps, f, at, msg)
	}
}

// wrapAtPointer resolves a JSON pointer into a message type and wraps value
// into the JSON of the message that directly holds the pointed-at field, so
// that the value can be checked as (part of) that message. It returns a nil
// descriptor when the pointer continues inside an Any.
func wrapAtPointer(root protoreflect.MessageDescriptor, ptr string, value any) (protoreflect.MessageDescriptor, any, error) {
	if !strings.HasPrefix(ptr, "/") {
		return nil, nil, fmt.Errorf("JSON pointer %q must start with /", ptr)
	}
	segs := strings.Split(ptr[1:], "/")
	for i := range segs {
		segs[i] = strings.ReplaceAll(strings.ReplaceAll(segs[i], "~1", "/"), "~0", "~")
	}
	md := root
	for i := 0; i < len(segs); i++ {
		if md.FullName() == anyFullName {
			return nil, nil, nil
		}
		fd := lookupField(md, segs[i])
		if fd == nil {
			return nil, nil, fmt.Errorf("%q: no field %q in %s", ptr, segs[i], md.FullName())
		}
		name := string(fd.Name())
		if i == len(segs)-1 {
			return md, map[string]any{name: value}, nil
		}
		next := segs[i+1]
		switch {
		case fd.IsList():
			if next != "-" {
				if _, err := strconv.Atoi(next); err != nil {
					return nil, nil, fmt.Errorf("%q: %q indexes list %s and must be a number or -", ptr, next, name)
				}
			}
			if i+1 == len(segs)-1 {
				return md, map[string]any{name: []any{value}}, nil
			}
			if fd.Kind() != protoreflect.MessageKind {
				return nil, nil, fmt.Errorf("%q: %s holds scalars; the pointer goes past one", ptr, name)
			}
			md, i = fd.Message(), i+1
		case fd.IsMap():
			if i+1 == len(segs)-1 {
				return md, map[string]any{name: map[string]any{next: value}}, nil
			}
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				return nil, nil, fmt.Errorf("%q: %s holds scalars; the pointer goes past one", ptr, name)
			}
			md, i = fd.MapValue().Message(), i+1
		case fd.Kind() == protoreflect.MessageKind:
			md = fd.Message()
		default:
			return nil, nil, fmt.Errorf("%q: %s is a scalar; the pointer goes past it", ptr, name)
		}
	}
	return md, value, nil
}

// parentPointer is ptr without its last segment: where the wrapped message is.
func parentPointer(ptr string) string {
	if i := strings.LastIndex(ptr, "/"); i > 0 {
		return ptr[:i]
	}
	return "/"
}
