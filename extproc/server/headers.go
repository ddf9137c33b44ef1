package server

import (
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Names from the GIE endpoint-picker protocol
// (gateway-api-inference-extension pkg/lwepp/metadata/consts.go) and the
// llm-d P/D sidecar.
const (
	HeaderDestination = "x-gateway-destination-endpoint"
	HeaderPrefiller   = "x-prefiller-host-port"
	HeaderDebug       = "x-kvgate-debug"
	// DebugNamespace / DebugKey: the dynamic metadata Envoy's configuration
	// sets where debug output is allowed (extproc.debug_header.from_envoy_metadata).
	DebugNamespace = "kvgate"
	DebugKey       = "debug_header"
	// attributeSource is the request attribute holding the downstream peer
	// (Envoy's CEL attribute source.address, sent in
	// ProcessingRequest.attributes when listed in request_attributes).
	attributeSource     = "source.address"
	maxSourceBytes      = 256
	MetadataNamespace   = "envoy.lb"
	MetadataDestination = "x-gateway-destination-endpoint"
	MetadataServed      = "x-gateway-destination-endpoint-served"
	SubsetHintNamespace = "envoy.lb.subset_hint"
	SubsetHintKey       = "x-gateway-destination-endpoint-subset"
	headerRequestID     = "x-request-id"
	headerContentLength = "content-length"
	headerContentType   = "content-type"
	// headerUpstreamServiceTime is set by Envoy's router on responses that
	// came from the upstream, never on its local replies.
	headerUpstreamServiceTime = "x-envoy-upstream-service-time"
	maxSubsetHintEntries      = 1 << 16
	maxServedValueBytes       = 1024
)

// isRoutingHeader reports whether a client-supplied header could steer
// routing: Envoy's ORIGINAL_DST cluster with use_http_header takes the host
// from the named header as the client sent it, with no check of its own
// (envoyproxy/envoy source/extensions/clusters/original_dst/
// original_dst_cluster.cc, OriginalDstCluster::LoadBalancer::chooseHost),
// so the client's copy must never survive.
func isRoutingHeader(name string) bool {
	return strings.HasPrefix(name, HeaderDestination) || name == HeaderPrefiller
}

// headerLimitError is a request whose headers exceed the configured bounds.
type headerLimitError struct{ msg string }

func (e *headerLimitError) Error() string { return e.msg }

// decodeRequestHeaders turns Envoy's header map into the decider's view and
// lists the client's routing headers to strip. Envoy sends values in
// raw_value since envoy.reloadable_features.send_header_raw_value; value is
// read only when raw_value is empty (older Envoy).
//
// size is the bytes of names and values kept, for the buffer budget.
func decodeRequestHeaders(hm *corev3.HeaderMap, maxCount, maxBytes int) (req Request, spoofed []string, size int, err error) {
	req.Headers = make(map[string]string)
	if hm == nil {
		return req, nil, 0, nil
	}
	if n := len(hm.GetHeaders()); n > maxCount {
		return req, nil, 0, &headerLimitError{fmt.Sprintf("request has %d headers, more than the limit of %d", n, maxCount)}
	}
	total := 0
	for _, h := range hm.GetHeaders() {
		name := strings.ToLower(h.GetKey())
		value := string(h.GetRawValue())
		if len(h.GetRawValue()) == 0 {
			value = h.GetValue()
		}
		total += len(name) + len(value)
		if total > maxBytes {
			return req, nil, 0, &headerLimitError{fmt.Sprintf("request headers exceed the limit of %d bytes", maxBytes)}
		}
		if isRoutingHeader(name) {
			if !contains(spoofed, name) {
				spoofed = append(spoofed, name)
			}
			continue
		}
		if prev, ok := req.Headers[name]; ok {
			value = prev + ", " + value
		}
		req.Headers[name] = value
	}
	req.Method = req.Headers[":method"]
	req.Path = req.Headers[":path"]
	req.RequestID = req.Headers[headerRequestID]
	req.Debug = req.Headers[HeaderDebug] == "1"
	return req, spoofed, total, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// subsetHint reads the proxy's endpoint subset from filter metadata. GIE's
// lightweight EPP (pkg/lwepp/handlers/request.go) accepts both a
// comma-separated string (header-to-metadata filters) and a list of strings
// (control planes); so does this.
func subsetHint(md *corev3.Metadata) ([]string, error) {
	ns, ok := md.GetFilterMetadata()[SubsetHintNamespace]
	if !ok {
		return nil, nil
	}
	v, ok := ns.GetFields()[SubsetHintKey]
	if !ok {
		return nil, nil
	}
	hint := []string{}
	add := func(s string) error {
		for _, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				if len(hint) >= maxSubsetHintEntries {
					return fmt.Errorf("metadata %s/%s lists more than %d endpoints", SubsetHintNamespace, SubsetHintKey, maxSubsetHintEntries)
				}
				hint = append(hint, part)
			}
		}
		return nil
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		if err := add(k.StringValue); err != nil {
			return nil, err
		}
	case *structpb.Value_ListValue:
		for i, item := range k.ListValue.GetValues() {
			s, ok := item.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return nil, fmt.Errorf("metadata %s/%s[%d] is not a string", SubsetHintNamespace, SubsetHintKey, i)
			}
			if err := add(s.StringValue); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("metadata %s/%s is neither a string nor a list of strings", SubsetHintNamespace, SubsetHintKey)
	}
	return hint, nil
}

// sourceAddress reads source.address from the request attributes. Envoy
// evaluates each listed attribute and sends it, printed as a string, in a
// Struct keyed by the attribute's name under the filter's name
// (source/extensions/filters/http/ext_proc/matching_utils.cc,
// ExpressionManager::evaluateAttributes); the outer key is read from any
// entry, as it names the filter instance.
func sourceAddress(attrs map[string]*structpb.Struct) string {
	for _, st := range attrs {
		if v := st.GetFields()[attributeSource].GetStringValue(); v != "" && len(v) <= maxSourceBytes {
			return v
		}
	}
	return ""
}

// envoyDebug reports whether Envoy's metadata_context carries
// kvgate/debug_header: true (dynamic metadata the ext_proc filter forwards
// when metadata_options.forwarding_namespaces.untyped lists "kvgate":
// source/extensions/filters/http/ext_proc/ext_proc.cc, Filter::addDynamicMetadata).
func envoyDebug(md *corev3.Metadata) bool {
	return md.GetFilterMetadata()[DebugNamespace].GetFields()[DebugKey].GetBoolValue()
}

// servedEndpoint reads the endpoint the proxy actually used, if it reported
// one (GIE endpoint-picker protocol).
func servedEndpoint(md *corev3.Metadata) string {
	ns, ok := md.GetFilterMetadata()[MetadataNamespace]
	if !ok {
		return ""
	}
	s := ns.GetFields()[MetadataServed].GetStringValue()
	if len(s) > maxServedValueBytes {
		return ""
	}
	return s
}

// responseStatus reads :status from response headers; 0 when absent or
// malformed.
func responseStatus(hm *corev3.HeaderMap) int {
	for _, h := range hm.GetHeaders() {
		if h.GetKey() != ":status" {
			continue
		}
		v := h.GetRawValue()
		if len(v) == 0 {
			v = []byte(h.GetValue())
		}
		if len(v) != 3 {
			return 0
		}
		n := 0
		for _, c := range v {
			if c < '0' || c > '9' {
				return 0
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	return 0
}

// hasHeader reports whether hm carries name (lower-case, as Envoy sends).
func hasHeader(hm *corev3.HeaderMap, name string) bool {
	for _, h := range hm.GetHeaders() {
		if h.GetKey() == name {
			return true
		}
	}
	return false
}
