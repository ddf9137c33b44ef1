package envoyharness

import (
	"fmt"
	"net/netip"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
)

// Routing names from the GIE endpoint-picker protocol.
const (
	destinationHeader    = "x-gateway-destination-endpoint"
	lbNamespace          = "envoy.lb"
	destinationKey       = "x-gateway-destination-endpoint"
	servedKey            = "x-gateway-destination-endpoint-served"
	subsetHintNamespace  = "envoy.lb.subset_hint"
	subsetHintKey        = "x-gateway-destination-endpoint-subset"
	defaultStatusOnError = 500
)

// pickUpstream chooses the upstream as an ORIGINAL_DST cluster
// (lb_policy CLUSTER_PROVIDED) configured with metadata_key
// envoy.lb/x-gateway-destination-endpoint would, or, with onHeader, with
// use_http_header on x-gateway-destination-endpoint (wire-formats §5). The
// metadata value may list fallbacks after the primary, which the harness
// walks on connect failure as override_host does. The header variant takes
// only the first header value, and it must be a single ip:port.
func pickUpstream(onHeader bool, md map[string]*structpb.Struct, hs []Header) (primary string, fallbacks []string, err error) {
	if onHeader {
		v, ok := Get(hs, destinationHeader)
		if !ok {
			return "", nil, fmt.Errorf("no %s header", destinationHeader)
		}
		if _, err := netip.ParseAddrPort(v); err != nil {
			return "", nil, fmt.Errorf("header %s %q is not ip:port", destinationHeader, v)
		}
		return v, nil, nil
	}
	ns, ok := md[lbNamespace]
	if !ok {
		return "", nil, fmt.Errorf("no %s dynamic metadata", lbNamespace)
	}
	v, ok := ns.GetFields()[destinationKey]
	if !ok {
		return "", nil, fmt.Errorf("no %s/%s dynamic metadata", lbNamespace, destinationKey)
	}
	s, ok := v.GetKind().(*structpb.Value_StringValue)
	if !ok {
		return "", nil, fmt.Errorf("%s/%s is not a string", lbNamespace, destinationKey)
	}
	parts := strings.Split(s.StringValue, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if _, err := netip.ParseAddrPort(p); err != nil {
			return "", nil, fmt.Errorf("%s/%s entry %d %q is not ip:port", lbNamespace, destinationKey, i, p)
		}
		parts[i] = p
	}
	return parts[0], parts[1:], nil
}
