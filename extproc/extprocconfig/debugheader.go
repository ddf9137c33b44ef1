package extprocconfig

import (
	"errors"
	"fmt"
	"net/netip"
)

// DebugHeader says who may ask for the x-kvgate-debug response header.
// The header lists every candidate worker's ip:port, cost and cached
// depth: sent a variant of someone else's prompt, it tells whether that
// prompt is cached, 16 tokens at a time. So nobody gets it by default, and
// a client's "x-kvgate-debug: 1" is honoured only when one of these grants
// it:
//
//	debug_header:
//	  trusted_sources: ["10.20.0.0/16"]  # client address as Envoy saw it (ext_proc request_attributes: [source.address])
//	  from_envoy_metadata: true          # Envoy's metadata_context kvgate.debug_header: true (set per listener or route)
//	  allow_any_client: false            # every client: demos and tests on one machine only
type DebugHeader struct {
	// TrustedSources are CIDRs (or single addresses) matched against the
	// request attribute source.address, the downstream peer of Envoy's
	// connection. Envoy sends it only when the ext_proc filter lists it in
	// request_attributes; without it no source is trusted.
	TrustedSources []string `yaml:"trusted_sources"`
	// FromEnvoyMetadata honours the header on requests whose ext_proc
	// metadata_context carries namespace "kvgate" with debug_header: true.
	// Only Envoy's own configuration writes dynamic metadata (a
	// set_metadata filter on an operators' listener, forwarded with
	// metadata_options.forwarding_namespaces.untyped: [kvgate]); a client
	// cannot.
	FromEnvoyMetadata bool `yaml:"from_envoy_metadata"`
	// AllowAnyClient honours every client's header.
	AllowAnyClient bool `yaml:"allow_any_client"`
}

// maxTrustedSources bounds the list scanned per debug request.
const maxTrustedSources = 1024

// Enabled reports whether any client may get the header.
func (x *DebugHeader) Enabled() bool {
	return x.AllowAnyClient || x.FromEnvoyMetadata || len(x.TrustedSources) > 0
}

// Sources parses TrustedSources into prefixes (IPv4-mapped IPv6 unmapped,
// so 10.0.0.0/8 also matches ::ffff:10.1.2.3). Errors name the entry.
func (x *DebugHeader) Sources(path string) ([]netip.Prefix, error) {
	if len(x.TrustedSources) > maxTrustedSources {
		return nil, fmt.Errorf("%s.trusted_sources: more than %d entries", path, maxTrustedSources)
	}
	out := make([]netip.Prefix, 0, len(x.TrustedSources))
	for i, s := range x.TrustedSources {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%s.trusted_sources[%d]: %q is neither a CIDR (10.0.0.0/8) nor an IP address", path, i, s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		bits := p.Bits()
		if p.Addr().Is4In6() {
			bits = max(bits-96, 0)
		}
		if bits == 0 {
			return nil, fmt.Errorf("%s.trusted_sources[%d]: %q trusts every address: set allow_any_client if that is meant", path, i, s)
		}
		out = append(out, netip.PrefixFrom(p.Addr().Unmap(), bits).Masked())
	}
	return out, nil
}

// validate reports the first invalid value; path is the section's key path.
func (x *DebugHeader) validate(path string) error {
	if x.AllowAnyClient && (x.FromEnvoyMetadata || len(x.TrustedSources) > 0) {
		return errors.New(path + ".allow_any_client: true makes trusted_sources and from_envoy_metadata pointless: set one or the other")
	}
	_, err := x.Sources(path)
	return err
}
