package envoyharness

import (
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Header is one header entry; names are lower-case, as Envoy holds them.
type Header struct {
	Name, Value string
}

// Envoy's HTTP connection manager defaults (max_request_headers_kb 60,
// max_headers_count 100); a mutation whose result exceeds them fails.
const (
	envoyMaxHeadersCount = 100
	envoyMaxHeadersBytes = 60 << 10
)

// mutationError is a header mutation Envoy rejects as a whole; the filter
// then answers with status_on_error.
type mutationError struct{ msg string }

func (e *mutationError) Error() string { return "header mutation rejected: " + e.msg }

// mutationIgnored reports whether Envoy's default HeaderMutationRules skip
// a change to name: routing headers and x-envoy-* may not be touched
// (mutation_rules.proto, allow_all_routing and allow_envoy unset).
func mutationIgnored(name string) bool {
	switch name {
	case ":method", ":authority", ":scheme", "host":
		return true
	}
	return strings.HasPrefix(name, "x-envoy-")
}

// applyHeaderMutation applies m to hs the way Envoy's ext_proc filter does
// (source/extensions/filters/http/ext_proc/mutation_utils.cc
// applyHeaderMutations): removals first, then sets; raw_value is the value
// (send_header_raw_value); setting both value and raw_value fails the whole
// mutation; invalid names or values fail it; disallowed names are skipped.
// It returns the new list and how many changes were skipped.
func applyHeaderMutation(hs []Header, m *extprocv3.HeaderMutation) ([]Header, int, error) {
	if m == nil {
		return hs, 0, nil
	}
	if len(m.GetRemoveHeaders()) > envoyMaxHeadersCount || len(m.GetSetHeaders()) > envoyMaxHeadersCount {
		return hs, 0, &mutationError{fmt.Sprintf("%d removals or %d sets exceed the header count limit %d", len(m.GetRemoveHeaders()), len(m.GetSetHeaders()), envoyMaxHeadersCount)}
	}
	out := append([]Header(nil), hs...)
	skipped := 0
	for _, raw := range m.GetRemoveHeaders() {
		if !validName(raw) {
			return hs, 0, &mutationError{fmt.Sprintf("invalid character in remove_headers entry %q", raw)}
		}
		name := strings.ToLower(raw)
		// System headers and host may never be removed, whatever the rules.
		if strings.HasPrefix(name, ":") || mutationIgnored(name) {
			skipped++
			continue
		}
		out = removeAll(out, name)
	}
	for _, sh := range m.GetSetHeaders() {
		h := sh.GetHeader()
		if h == nil {
			continue
		}
		if h.GetValue() != "" && len(h.GetRawValue()) != 0 {
			return hs, 0, &mutationError{fmt.Sprintf("header %q sets both value and raw_value", h.GetKey())}
		}
		value := string(h.GetRawValue())
		if !validName(h.GetKey()) || strings.ContainsAny(value, "\r\n\x00") {
			return hs, 0, &mutationError{fmt.Sprintf("invalid character in set_headers entry %q", h.GetKey())}
		}
		name := strings.ToLower(h.GetKey())
		if mutationIgnored(name) {
			skipped++
			continue
		}
		appendMode := false
		switch sh.GetAppendAction() {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			// The zero value: Envoy then reads the deprecated append field,
			// whose default is false (overwrite).
			//lint:ignore SA1019 Envoy still honours the deprecated field when append_action is unset; the harness must too.
			appendMode = sh.GetAppend().GetValue()
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			if has(out, name) {
				continue
			}
			appendMode = true
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			if !has(out, name) {
				continue
			}
		default:
			return hs, 0, &mutationError{fmt.Sprintf("invalid append_action %d for %q", sh.GetAppendAction(), name)}
		}
		if appendMode {
			out = append(out, Header{name, value})
		} else {
			out = setOne(out, name, value)
		}
	}
	size := 0
	for _, h := range out {
		size += len(h.Name) + len(h.Value)
	}
	if len(out) > envoyMaxHeadersCount || size > envoyMaxHeadersBytes {
		return hs, 0, &mutationError{fmt.Sprintf("result has %d headers / %d bytes, over Envoy's limits", len(out), size)}
	}
	return out, skipped, nil
}

// validName follows Envoy's HeaderUtility::headerNameIsValid: RFC 9110
// token characters, with a leading ':' allowed for pseudo-headers.
func validName(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == ':' {
		s = s[1:]
		if s == "" {
			return false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func removeAll(hs []Header, name string) []Header {
	out := hs[:0]
	for _, h := range hs {
		if h.Name != name {
			out = append(out, h)
		}
	}
	return out
}

func has(hs []Header, name string) bool {
	for _, h := range hs {
		if h.Name == name {
			return true
		}
	}
	return false
}

// setOne replaces the first entry named name and drops the rest, as
// Envoy's HeaderMap::setCopy does; a missing header is appended.
func setOne(hs []Header, name, value string) []Header {
	out := hs[:0]
	done := false
	for _, h := range hs {
		if h.Name != name {
			out = append(out, h)
			continue
		}
		if !done {
			out = append(out, Header{name, value})
			done = true
		}
	}
	if !done {
		out = append(out, Header{name, value})
	}
	return out
}

// Get returns the first value of name in hs and whether it was present.
func Get(hs []Header, name string) (string, bool) {
	for _, h := range hs {
		if h.Name == name {
			return h.Value, true
		}
	}
	return "", false
}

// Values returns every value of name in hs, in order.
func Values(hs []Header, name string) []string {
	var vs []string
	for _, h := range hs {
		if h.Name == name {
			vs = append(vs, h.Value)
		}
	}
	return vs
}

func toHeaderMap(hs []Header) *corev3.HeaderMap {
	m := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, 0, len(hs))}
	for _, h := range hs {
		// Envoy sends values in raw_value only (send_header_raw_value).
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: h.Name, RawValue: []byte(h.Value)})
	}
	return m
}

// stripHeaders removes the headers a filter before ext_proc removes
// (header_mutation's request_mutations, Envoy Gateway's
// earlyRequestHeaders).
func stripHeaders(hs []Header, ms []HeaderMatcher) []Header {
	if len(ms) == 0 {
		return hs
	}
	out := hs[:0:0]
	for _, h := range hs {
		drop := false
		for _, m := range ms {
			if m.matches(h.Name) {
				drop = true
				break
			}
		}
		if !drop {
			out = append(out, h)
		}
	}
	return out
}

// withoutContentLength drops content-length from a mutation's sets.
func withoutContentLength(m *extprocv3.HeaderMutation) *extprocv3.HeaderMutation {
	if m == nil {
		return nil
	}
	out := &extprocv3.HeaderMutation{RemoveHeaders: m.GetRemoveHeaders()}
	for _, sh := range m.GetSetHeaders() {
		if !strings.EqualFold(sh.GetHeader().GetKey(), "content-length") {
			out.SetHeaders = append(out.SetHeaders, sh)
		}
	}
	return out
}
