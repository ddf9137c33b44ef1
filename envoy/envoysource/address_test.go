// Package envoysource_test is an independent check of kvgate against rules
// written directly from Envoy's source, not from kvgate's harness (which
// it must not import) nor from kvgate's own helpers: its address parser
// and printer, the override_host and ORIGINAL_DST host choices and the
// start-up rules below are transcribed from the cited functions, and
// kvgate's outputs (config canonicalization, the ext_proc server's routing
// metadata, the validator's verdicts) must agree with them.
package envoysource_test

import (
	"fmt"
	"strconv"
	"strings"
)

// envoyAddr is an IP address and port as Envoy holds it: 4 or 16 bytes.
type envoyAddr struct {
	ip   []byte
	port uint16
}

// parseInternetAddressAndPortNoThrow transcribes
// source/common/network/utility.cc: an address starting with '[' is IPv6,
// split at the last "]:"; otherwise IPv4, split at the last ':'. The port
// goes through absl::SimpleAtoi into a uint64 and must be <= 65535; the
// address through inet_pton (parseV4Address / parseV6Address; a '%' zone
// takes getaddrinfo, which worker endpoints never need: refused here).
func parseInternetAddressAndPortNoThrow(s string) (envoyAddr, bool) {
	if s == "" {
		return envoyAddr{}, false
	}
	var ipStr, portStr string
	v6 := s[0] == '['
	if v6 {
		pos := strings.LastIndex(s, "]:")
		if pos < 0 {
			return envoyAddr{}, false
		}
		ipStr, portStr = s[1:pos], s[pos+2:]
	} else {
		pos := strings.LastIndexByte(s, ':')
		if pos < 0 {
			return envoyAddr{}, false
		}
		ipStr, portStr = s[:pos], s[pos+1:]
	}
	port, ok := simpleAtoiUint64(portStr)
	if portStr == "" || !ok || port > 65535 {
		return envoyAddr{}, false
	}
	var ip []byte
	if v6 {
		ip, ok = inetPton6(ipStr)
	} else {
		ip, ok = inetPton4(ipStr)
	}
	if !ok {
		return envoyAddr{}, false
	}
	return envoyAddr{ip: ip, port: uint16(port)}, true
}

// simpleAtoiUint64 is absl::SimpleAtoi for an unsigned type: ASCII
// whitespace around the number is skipped, one '+' allowed, then decimal
// digits only, no overflow.
func simpleAtoiUint64(s string) (uint64, bool) {
	s = strings.Trim(s, " \t\n\v\f\r")
	s = strings.TrimPrefix(s, "+")
	if s == "" {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}

// inetPton4 is glibc inet_pton(AF_INET): exactly four decimal parts, each
// 0-255, no leading zero on a part of more than one digit.
func inetPton4(s string) ([]byte, bool) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return nil, false
	}
	out := make([]byte, 4)
	for i, p := range parts {
		if p == "" || len(p) > 3 || (len(p) > 1 && p[0] == '0') {
			return nil, false
		}
		n := 0
		for _, c := range p {
			if c < '0' || c > '9' {
				return nil, false
			}
			n = n*10 + int(c-'0')
		}
		if n > 255 {
			return nil, false
		}
		out[i] = byte(n)
	}
	return out, true
}

// inetPton6 is inet_pton(AF_INET6) (RFC 4291 §2.2): up to eight groups of
// 1-4 hex digits, at most one "::", an optional dotted IPv4 tail in the
// last 32 bits.
func inetPton6(s string) ([]byte, bool) {
	if strings.ContainsRune(s, '%') || s == "" {
		return nil, false
	}
	var head, tail []string
	if i := strings.Index(s, "::"); i >= 0 {
		if strings.Contains(s[i+2:], "::") {
			return nil, false
		}
		if s[:i] != "" {
			head = strings.Split(s[:i], ":")
		}
		if s[i+2:] != "" {
			tail = strings.Split(s[i+2:], ":")
		}
	} else {
		head = strings.Split(s, ":")
	}
	words := func(groups []string, allowV4 bool) ([]uint16, bool) {
		var out []uint16
		for j, g := range groups {
			if allowV4 && j == len(groups)-1 && strings.Contains(g, ".") {
				b, ok := inetPton4(g)
				if !ok {
					return nil, false
				}
				out = append(out, uint16(b[0])<<8|uint16(b[1]), uint16(b[2])<<8|uint16(b[3]))
				continue
			}
			if g == "" || len(g) > 4 {
				return nil, false
			}
			v, err := strconv.ParseUint(g, 16, 16)
			if err != nil {
				return nil, false
			}
			out = append(out, uint16(v))
		}
		return out, true
	}
	compressed := strings.Contains(s, "::")
	hw, ok := words(head, !compressed)
	if !ok {
		return nil, false
	}
	tw, ok := words(tail, true)
	if !ok {
		return nil, false
	}
	n := len(hw) + len(tw)
	if (!compressed && n != 8) || (compressed && n > 7) {
		return nil, false
	}
	all := append(append(hw, make([]uint16, 8-n)...), tw...)
	out := make([]byte, 16)
	for i, w := range all {
		out[2*i], out[2*i+1] = byte(w>>8), byte(w)
	}
	return out, true
}

// asString is Address::Instance::asString (address_impl.cc): Ipv4Instance
// prints "a.b.c.d:port", Ipv6Instance "[" + inet_ntop + "]:port".
func (a envoyAddr) asString() string {
	if len(a.ip) == 4 {
		return fmt.Sprintf("%d.%d.%d.%d:%d", a.ip[0], a.ip[1], a.ip[2], a.ip[3], a.port)
	}
	return "[" + inetNtop6(a.ip) + "]:" + strconv.Itoa(int(a.port))
}

// inetNtop6 is glibc inet_ntop6: lower-case hex groups without leading
// zeros; the longest run of two or more zero groups (the first of equal
// runs) becomes "::"; when that run starts the address and is 6 groups
// long, or 5 followed by ffff, the last 32 bits print dotted.
func inetNtop6(b []byte) string {
	var w [8]int
	for i := range w {
		w[i] = int(b[2*i])<<8 | int(b[2*i+1])
	}
	bestBase, bestLen, curBase, curLen := -1, 0, -1, 0
	for i := range 8 {
		if w[i] == 0 {
			if curBase < 0 {
				curBase, curLen = i, 1
			} else {
				curLen++
			}
			continue
		}
		if curBase >= 0 {
			if bestBase < 0 || curLen > bestLen {
				bestBase, bestLen = curBase, curLen
			}
			curBase = -1
		}
	}
	if curBase >= 0 && (bestBase < 0 || curLen > bestLen) {
		bestBase, bestLen = curBase, curLen
	}
	if bestBase >= 0 && bestLen < 2 {
		bestBase = -1
	}
	var sb strings.Builder
	for i := 0; i < 8; i++ {
		if bestBase >= 0 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				sb.WriteString(":")
			}
			continue
		}
		if i != 0 {
			sb.WriteString(":")
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || (bestLen == 5 && w[5] == 0xffff)) {
			fmt.Fprintf(&sb, "%d.%d.%d.%d", b[12], b[13], b[14], b[15])
			break
		}
		fmt.Fprintf(&sb, "%x", w[i])
	}
	if bestBase >= 0 && bestBase+bestLen == 8 {
		sb.WriteString(":")
	}
	return sb.String()
}

// overrideHostSelected transcribes override_host's
// LoadBalancerImpl::getSelectedHosts for one string source:
// absl::StrSplit(value, ',', absl::SkipWhitespace()), each piece
// absl::StripAsciiWhitespace'd.
func overrideHostSelected(value string) []string {
	var out []string
	for _, p := range strings.Split(value, ",") {
		if strings.TrimSpace(p) == "" {
			continue
		}
		out = append(out, strings.Trim(p, " \t\n\v\f\r"))
	}
	return out
}
