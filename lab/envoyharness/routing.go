package envoyharness

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"google.golang.org/protobuf/types/known/structpb"
)

// Routing names from the GIE endpoint-picker protocol.
const (
	lbNamespace          = "envoy.lb"
	subsetHintNamespace  = "envoy.lb.subset_hint"
	subsetHintKey        = "x-gateway-destination-endpoint-subset"
	defaultStatusOnError = 500
)

// errNoHost is the cluster finding no host: Envoy's router answers 503
// ("no healthy upstream").
var errNoHost = fmt.Errorf("no host")

// hostChoice is one request's sequence of host choices, as the cluster's
// load balancer makes them: one per attempt, retries included.
type hostChoice struct {
	cluster Cluster
	md      map[string]*structpb.Struct
	headers []Header
	rr      *atomic.Uint64 // the cluster's round robin, shared by requests

	listed  bool     // override_host: the list was read (first choice)
	list    []string // override_host: hosts still to try
	chosen  string   // the last host chosen
	choices int
}

// next chooses the host for the next attempt.
func (h *hostChoice) next() (string, error) {
	h.choices++
	var host string
	var err error
	switch {
	case h.cluster.OriginalDst != nil:
		host, err = h.originalDst()
	case h.cluster.OverrideHost != nil:
		host, err = h.overrideHost()
	default:
		host, err = h.fallback()
	}
	if err == nil {
		h.chosen = host
	}
	return host, err
}

// originalDst is OriginalDstCluster::LoadBalancer::chooseHost: the
// metadata key first (a list value yields its first element, then the
// value must be a string), then the header's first value, each parsed as
// ONE ip:port by parseInternetAddressAndPortNoThrow. Every attempt,
// retries included, reads the same inputs and gets the same host: the
// cluster never walks a list. Without either, Envoy falls back to the
// downstream connection's restored local address, which a gateway
// listener does not have: no host.
func (h *hostChoice) originalDst() (string, error) {
	o := h.cluster.OriginalDst
	if o.MetadataKey != nil {
		if v := metadataValue(h.md, o.MetadataKey); v != nil {
			if l := v.GetListValue(); l != nil && len(l.GetValues()) > 0 {
				v = l.GetValues()[0]
			}
			if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
				if host, ok := parseInternetAddressAndPort(s.StringValue); ok {
					return host, nil
				}
				// metadataOverrideHost returns null on a value that does not
				// parse: the header is tried next.
			}
		}
	}
	if o.Header != "" {
		if v, ok := Get(h.headers, o.Header); ok {
			if host, ok := parseInternetAddressAndPort(v); ok {
				return host, nil
			}
		}
	}
	return "", fmt.Errorf("%w: ORIGINAL_DST found no single ip:port in its metadata key or header", errNoHost)
}

// overrideHost is override_host's LoadBalancerImpl::chooseHost: on the
// first choice getSelectedHosts reads every source (a header's first
// value, or a metadata string; non-strings are ignored), splits each on
// ',' and strips whitespace; each choice then consumes hosts until one is
// in the cluster's host map, compared as exact strings (findHost); when
// none is left the fallback policy picks. The chosen host is what
// selected_host_key reports.
func (h *hostChoice) overrideHost() (string, error) {
	if !h.listed {
		h.listed = true
		for _, src := range h.cluster.OverrideHost.Sources {
			var raw string
			switch {
			case src.Header != "":
				v, ok := Get(h.headers, src.Header)
				if !ok {
					continue
				}
				raw = v
			case src.Metadata != nil:
				s, ok := metadataValue(h.md, src.Metadata).GetKind().(*structpb.Value_StringValue)
				if !ok {
					continue
				}
				raw = s.StringValue
			}
			for _, part := range strings.Split(raw, ",") {
				if part = strings.TrimSpace(part); part != "" {
					h.list = append(h.list, part)
				}
			}
		}
	}
	for len(h.list) > 0 {
		host := h.list[0]
		h.list = h.list[1:]
		for _, known := range h.cluster.Hosts {
			if known == host {
				return host, nil
			}
		}
	}
	return h.fallback()
}

// fallback stands for the cluster's own load balancer (override_host's
// fallback_policy): round robin over its hosts.
func (h *hostChoice) fallback() (string, error) {
	if len(h.cluster.Hosts) == 0 {
		return "", fmt.Errorf("%w: cluster %s has no endpoints", errNoHost, h.cluster.Name)
	}
	i := h.rr.Add(1) - 1
	return h.cluster.Hosts[i%uint64(len(h.cluster.Hosts))], nil
}

func metadataValue(md map[string]*structpb.Struct, k *MetadataKey) *structpb.Value {
	s := md[k.Namespace]
	var v *structpb.Value
	for i, seg := range k.Path {
		if s == nil {
			return nil
		}
		v = s.GetFields()[seg]
		if i < len(k.Path)-1 {
			s = v.GetStructValue()
		}
	}
	return v
}

// parseInternetAddressAndPort follows Envoy's
// Network::Utility::parseInternetAddressAndPortNoThrow and returns the
// address as Envoy prints it (Address::Instance::asString): "[v6]:port"
// when the string starts with '[' (split at the last "]:"), else
// "v4:port" split at the last ':'. The address must be a literal
// (inet_pton); a host name or a list does not parse. Envoy's port parse
// (absl::SimpleAtoi) also takes surrounding spaces and a '+'; the harness
// takes digits only, which only makes it stricter.
func parseInternetAddressAndPort(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	var ip, port string
	if s[0] == '[' {
		i := strings.LastIndex(s, "]:")
		if i < 0 {
			return "", false
		}
		ip, port = s[1:i], s[i+2:]
	} else {
		i := strings.LastIndexByte(s, ':')
		if i < 0 {
			return "", false
		}
		ip, port = s[:i], s[i+1:]
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || port == "" || port[0] == '+' {
		return "", false
	}
	addr, ok := parseIPLiteral(ip, s[0] == '[')
	if !ok {
		return "", false
	}
	return formatAddrPort(addr, uint16(p)), true
}
