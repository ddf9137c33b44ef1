package conformance

import (
	"fmt"
	"net/netip"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// applyHeaderMutation applies a picker's header mutation to the request
// headers as Envoy's ext_proc filter does (envoy
// source/extensions/filters/http/ext_proc/mutation_utils.cc
// MutationUtils::applyHeaderMutations): removals first, then sets; the
// value is raw_value (a value only in the deprecated value field reaches
// the request empty); setting both fails the mutation; append_action's
// zero value defers to the deprecated append flag, whose default is
// overwrite. Envoy's default mutation rules ignore changes to :method,
// :authority, :scheme, host and x-envoy-* (mutation_rules.proto).
func applyHeaderMutation(in [][2]string, m *extprocv3.HeaderMutation) ([][2]string, error) {
	out := append([][2]string(nil), in...)
	if m == nil {
		return out, nil
	}
	ignored := func(n string) bool {
		return n == ":method" || n == ":authority" || n == ":scheme" || n == "host" || strings.HasPrefix(n, "x-envoy-")
	}
	for _, raw := range m.GetRemoveHeaders() {
		n := strings.ToLower(raw)
		if strings.HasPrefix(n, ":") || ignored(n) {
			continue
		}
		out = removeHeader(out, n)
	}
	for _, sh := range m.GetSetHeaders() {
		h := sh.GetHeader()
		if h.GetValue() != "" && len(h.GetRawValue()) != 0 {
			return in, fmt.Errorf("header %q sets both value and raw_value", h.GetKey())
		}
		n, v := strings.ToLower(h.GetKey()), string(h.GetRawValue())
		if n == "" || strings.ContainsAny(v, "\r\n\x00") {
			return in, fmt.Errorf("set_headers entry %q has an invalid name or value", h.GetKey())
		}
		if ignored(n) {
			continue
		}
		appendIt := false
		switch sh.GetAppendAction() {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			//lint:ignore SA1019 Envoy honours the deprecated flag when append_action is unset; so must its model.
			appendIt = sh.GetAppend().GetValue()
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			if hasHeader(out, n) {
				continue
			}
			appendIt = true
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			if !hasHeader(out, n) {
				continue
			}
		}
		if !appendIt {
			out = removeHeader(out, n)
		}
		out = append(out, [2]string{n, v})
	}
	return out, nil
}

func removeHeader(hs [][2]string, name string) [][2]string {
	out := hs[:0:0]
	for _, h := range hs {
		if h[0] != name {
			out = append(out, h)
		}
	}
	return out
}

func hasHeader(hs [][2]string, name string) bool {
	for _, h := range hs {
		if h[0] == name {
			return true
		}
	}
	return false
}

// parseDestination splits a destination value into its endpoints. Each
// must be an IP literal and port: Envoy's ORIGINAL_DST cluster parses the
// value with parseInternetAddressAndPortNoThrow, and override_host splits
// it on ',' and looks each host up by address
// (source/extensions/load_balancing_policies/override_host/load_balancer.cc
// getSelectedHosts).
func parseDestination(v string) ([]string, error) {
	if v == "" {
		return nil, fmt.Errorf("empty destination")
	}
	var eps []string
	for _, part := range strings.Split(v, ",") {
		p := strings.TrimSpace(part)
		ap, err := netip.ParseAddrPort(p)
		if err != nil || ap.Port() == 0 {
			return nil, fmt.Errorf("entry %q is not an ip:port", part)
		}
		eps = append(eps, p)
	}
	return eps, nil
}
