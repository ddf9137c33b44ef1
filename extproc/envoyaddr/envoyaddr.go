// Package envoyaddr renders worker endpoints the way Envoy names hosts.
//
// Envoy keys every cluster's hosts by Address::Instance::asString():
// "a.b.c.d:port" for IPv4 and "[v6]:port" for IPv6, the address printed by
// inet_ntop (source/common/network/address_impl.cc, Ipv4Instance and
// Ipv6Instance). The override_host load balancer looks the picker's
// strings up in that map exactly (load_balancer.cc findHost), so an
// endpoint spelt any other way ("[0:0:0:0:0:0:0:1]:8000", "010.0.0.1:80")
// silently misses. ORIGINAL_DST parses one ip:port with
// Network::Utility::parseInternetAddressAndPortNoThrow, which takes no
// host names. kvgate therefore parses every endpoint once, at the edge, and
// only ever sends the canonical form.
package envoyaddr

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Canonical parses a literal ip:port (IPv6 in brackets) and returns it as
// Envoy prints it. Host names, zones, port 0 and anything but a literal
// address are refused with a reason.
func Canonical(s string) (string, error) {
	ap, err := Parse(s)
	if err != nil {
		return "", err
	}
	return Format(ap), nil
}

// Parse parses a literal ip:port (IPv6 in brackets, no zone, port 1-65535).
func Parse(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		if host, _, splitErr := splitHostPort(s); splitErr == nil && host != "" {
			if _, ipErr := netip.ParseAddr(host); ipErr != nil {
				return netip.AddrPort{}, fmt.Errorf("%q: want a literal ip:port; %q is not an IP address (Envoy routes to addresses, not host names)", s, host)
			}
		}
		return netip.AddrPort{}, fmt.Errorf("%q: want ip:port or [ipv6]:port: %v", s, err)
	}
	if ap.Addr().Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("%q: IPv6 zones are not allowed in a worker endpoint", s)
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("%q: port 0 is not a worker port", s)
	}
	return ap, nil
}

func splitHostPort(s string) (host, port string, err error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", "", fmt.Errorf("no port")
	}
	host, port = s[:i], s[i+1:]
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return host, port, nil
}

// Format prints ap as Envoy's asString does. IPv4-mapped addresses keep
// the dotted tail (inet_ntop prints ::ffff:a.b.c.d) as netip does; the
// deprecated IPv4-compatible form ::a.b.c.d, where inet_ntop also prints
// a dotted tail but netip prints hex, is special-cased.
func Format(ap netip.AddrPort) string {
	a := ap.Addr()
	port := strconv.Itoa(int(ap.Port()))
	if a.Is4() {
		return a.String() + ":" + port
	}
	return "[" + formatV6(a) + "]:" + port
}

// formatV6 follows glibc's inet_ntop6: it prints the last 32 bits as a
// dotted quad when the longest run of zero groups starts at the first
// group and is exactly six groups long (IPv4-compatible), or five long
// followed by ffff (IPv4-mapped).
func formatV6(a netip.Addr) string {
	b := a.As16()
	zeroPrefix := true
	for _, x := range b[:12] {
		if x != 0 {
			zeroPrefix = false
			break
		}
	}
	if zeroPrefix && (b[12] != 0 || b[13] != 0) {
		return fmt.Sprintf("::%d.%d.%d.%d", b[12], b[13], b[14], b[15])
	}
	return a.String()
}
