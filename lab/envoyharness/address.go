package envoyharness

import (
	"net/netip"
	"strings"

	"github.com/kvgate/kvgate/extproc/envoyaddr"
)

// parseIPLiteral parses what inet_pton(AF_INET) or, in brackets,
// inet_pton(AF_INET6) accepts (parseV4Address / parseV6Address in Envoy's
// source/common/network/utility.cc). A zone ("%eth0") is left out: worker
// endpoints have none.
func parseIPLiteral(s string, v6 bool) (netip.Addr, bool) {
	if strings.ContainsRune(s, '%') {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	if v6 != a.Is6() {
		return netip.Addr{}, false
	}
	return a, true
}

func formatAddrPort(a netip.Addr, port uint16) string {
	return envoyaddr.Format(netip.AddrPortFrom(a, port))
}
