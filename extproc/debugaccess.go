package extproc

import (
	"fmt"
	"net/netip"

	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/extproc/server"
)

// debugAccess decides who gets the x-kvgate-debug response header
// (extproc.debug_header). The header shows every candidate's endpoint,
// cost and cached depth, which tells a client whether someone else's
// prompt is cached; so a client's asking is honoured only when the
// configuration grants it, and nobody is granted by default.
type debugAccess struct {
	anyClient    bool
	fromMetadata bool
	sources      []netip.Prefix
}

func newDebugAccess(c extprocconfig.DebugHeader) (debugAccess, error) {
	src, err := c.Sources("extproc.debug_header")
	if err != nil {
		return debugAccess{}, fmt.Errorf("extproc: %w", err)
	}
	return debugAccess{anyClient: c.AllowAnyClient, fromMetadata: c.FromEnvoyMetadata, sources: src}, nil
}

// grants reports whether req, which asked for the header, may have it.
func (a debugAccess) grants(req *server.Request) bool {
	switch {
	case !req.Debug:
		return false
	case a.anyClient:
		return true
	case a.fromMetadata && req.EnvoyDebug:
		return true
	}
	return a.trusts(req.Source)
}

// trusts reports whether source (Envoy's source.address: "ip:port",
// "[ipv6]:port", or a bare address) is within a trusted prefix. An absent
// or unreadable source is never trusted.
func (a debugAccess) trusts(source string) bool {
	if source == "" || len(a.sources) == 0 {
		return false
	}
	var ip netip.Addr
	if ap, err := netip.ParseAddrPort(source); err == nil {
		ip = ap.Addr()
	} else if ip, err = netip.ParseAddr(source); err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range a.sources {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
