package envoyharness

import (
	"strings"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// PathNormalization is the HTTP connection manager's path handling, done
// before any HTTP filter (ext_proc included) or the router sees :path
// (api/envoy/extensions/filters/network/http_connection_manager/v3/
// http_connection_manager.proto normalize_path, merge_slashes,
// path_with_escaped_slashes_action; source/common/http/
// conn_manager_utility.cc ConnectionManagerUtility::maybeNormalizePath).
// The zero value is Envoy's default: nothing is changed.
type PathNormalization struct {
	Normalize      bool
	MergeSlashes   bool
	EscapedSlashes hcmv3.HttpConnectionManager_PathWithEscapedSlashesAction
}

// pathAction is maybeNormalizePath's NormalizePathAction.
type pathAction int

const (
	pathContinue pathAction = iota
	pathReject              // 400 (downstream_rq_failed_path_normalization)
	pathRedirect            // 307 to the normalised path
)

// apply runs maybeNormalizePath's steps in its order: escaped slashes
// (before normalisation), RFC 3986 normalisation, then slash merging.
func (n PathNormalization) apply(path string) (string, pathAction) {
	action := pathContinue
	switch n.EscapedSlashes {
	case hcmv3.HttpConnectionManager_IMPLEMENTATION_SPECIFIC_DEFAULT, hcmv3.HttpConnectionManager_KEEP_UNCHANGED:
	default:
		if p, found := unescapeSlashes(path); found {
			switch n.EscapedSlashes {
			case hcmv3.HttpConnectionManager_REJECT_REQUEST:
				return path, pathReject
			case hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT:
				action = pathRedirect
			}
			path = p
		}
	}
	if n.Normalize {
		p, ok := canonicalPath(path)
		if !ok {
			return path, pathReject
		}
		path = p
	}
	if n.MergeSlashes {
		path = mergeSlashes(path)
	}
	return path, action
}

// splitQuery cuts path at its first '?': Envoy's path transforms touch
// only what comes before it.
func splitQuery(path string) (string, string) {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		return path[:i], path[i:]
	}
	return path, ""
}

// unescapeSlashes is PathUtil::unescapeSlashes (path_utility.cc): %2F and
// %2f become '/', %5C and %5c '\', in the path part only.
func unescapeSlashes(path string) (string, bool) {
	p, q := splitQuery(path)
	if !strings.Contains(p, "%") {
		return path, false
	}
	u := strings.NewReplacer("%2F", "/", "%2f", "/", "%5C", `\`, "%5c", `\`).Replace(p)
	if len(u) == len(p) {
		return path, false
	}
	return u + q, true
}

// mergeSlashes is PathUtil::mergeSlashes: runs of '/' in the path part
// become one, a leading and a trailing slash are kept.
func mergeSlashes(path string) string {
	p, q := splitQuery(path)
	if !strings.Contains(p, "//") {
		return path
	}
	var segs []string
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			segs = append(segs, s)
		}
	}
	prefix, suffix := "", ""
	if strings.HasPrefix(p, "/") {
		prefix = "/"
	}
	if strings.HasSuffix(p, "/") {
		suffix = "/"
	}
	return prefix + strings.Join(segs, "/") + suffix + q
}

// Character classes of Chromium's path canonicalizer, which Envoy's
// normalize_path runs (source/common/chromium_url/url_canon_path.cc
// kPathCharLookup; PathTransformer::rfcNormalize cuts the query off
// first).
const (
	pcPass     = 0
	pcSpecial  = 1
	pcEscape   = 2 | pcSpecial
	pcUnescape = 4
	pcInvalid  = 8 | pcSpecial
)

var pathCharClass = func() (t [256]byte) {
	t[0] = pcInvalid
	for c := 1; c < 0x20; c++ {
		t[c] = pcEscape
	}
	for c := 0x7f; c < 0x100; c++ {
		t[c] = pcEscape
	}
	for _, c := range ` "#%<>?\^` + "`{|}" {
		t[c] = pcEscape
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = pcUnescape
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = pcUnescape
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = pcUnescape
	}
	for _, c := range "-_~" {
		t[c] = pcUnescape
	}
	t['.'] = pcSpecial
	return t
}()

// canonicalPath is PathUtil::canonicalPath: the path part canonicalised
// as Chromium's DoPath does (dot segments resolved, "%2E" counting as a
// dot; backslashes made slashes; escapes of unreserved characters
// decoded, others kept as written; characters that must be escaped
// escaped), the query appended unchanged. false: Envoy refuses the path
// (a NUL, raw or escaped).
func canonicalPath(path string) (string, bool) {
	p, q := splitQuery(path)
	out := make([]byte, 0, len(p)+1)
	if p == "" || (p[0] != '/' && p[0] != '\\') {
		out = append(out, '/')
	}
	ok := true
	lastInvalidPercent := -1 << 30
	end := len(p)
	for i := 0; i < end; i++ {
		c := p[i]
		flags := pathCharClass[c]
		if flags&pcSpecial == 0 {
			out = append(out, c)
			continue
		}
		if dot := dotLen(p, i); dot > 0 {
			if len(out) > 0 && out[len(out)-1] == '/' {
				kind, consumed := classifyAfterDot(p, i+dot)
				switch kind {
				case dotNotDirectory:
					out = append(out, '.')
					i += dot - 1
				case dotCurrent:
					i += dot + consumed - 1
				case dotUp:
					out = backUpToPreviousSlash(out)
					i += dot + consumed - 1
				}
			} else {
				out = append(out, '.')
				i += dot - 1
			}
			continue
		}
		switch {
		case c == '\\':
			out = append(out, '/')
		case c == '%':
			if v, decoded := decodeEscaped(p, i); decoded {
				i += 2
				if pathCharClass[v]&pcUnescape != 0 {
					out = append(out, v)
					if lastInvalidPercent >= len(out)-3 {
						out = checkNestedEscapes(p, i+1, lastInvalidPercent, out)
					}
				} else {
					out = append(out, '%', p[i-1], p[i])
					if pathCharClass[v]&pcInvalid == pcInvalid {
						ok = false
					}
				}
			} else {
				lastInvalidPercent = len(out)
				out = append(out, '%')
			}
		case flags&pcInvalid == pcInvalid:
			out = appendEscaped(out, c)
			ok = false
		case flags&pcEscape == pcEscape:
			out = appendEscaped(out, c)
		}
	}
	return string(out) + q, ok
}

const (
	dotNotDirectory = iota
	dotCurrent
	dotUp
)

// dotLen is IsDot: 1 for '.', 3 for "%2e"/"%2E", else 0.
func dotLen(s string, i int) int {
	if s[i] == '.' {
		return 1
	}
	if s[i] == '%' && i+2 < len(s) && s[i+1] == '2' && (s[i+2] == 'e' || s[i+2] == 'E') {
		return 3
	}
	return 0
}

func isURLSlash(c byte) bool { return c == '/' || c == '\\' }

// classifyAfterDot is ClassifyAfterDot: what the dot ending at afterDot
// is, and how much more input that reading consumes.
func classifyAfterDot(s string, afterDot int) (int, int) {
	end := len(s)
	if afterDot == end {
		return dotCurrent, 0
	}
	if isURLSlash(s[afterDot]) {
		return dotCurrent, 1
	}
	if second := dotLen(s, afterDot); second > 0 {
		after := afterDot + second
		if after == end {
			return dotUp, second
		}
		if isURLSlash(s[after]) {
			return dotUp, second + 1
		}
	}
	return dotNotDirectory, 0
}

// backUpToPreviousSlash is BackUpToPreviousSlash: out ends with '/'; drop
// the last segment, never past the first slash.
func backUpToPreviousSlash(out []byte) []byte {
	i := len(out) - 1
	if i == 0 {
		return out
	}
	i--
	for out[i] != '/' && i > 0 {
		i--
	}
	return out[:i+1]
}

func unhexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// decodeEscaped is DecodeEscaped: the byte a "%XX" at i stands for.
func decodeEscaped(s string, i int) (byte, bool) {
	if i+3 > len(s) {
		return 0, false
	}
	h, ok1 := unhexDigit(s[i+1])
	l, ok2 := unhexDigit(s[i+2])
	if !ok1 || !ok2 {
		return 0, false
	}
	return h<<4 | l, true
}

func appendEscaped(out []byte, c byte) []byte {
	const hex = "0123456789ABCDEF"
	return append(out, '%', hex[c>>4], hex[c&15])
}

// checkNestedEscapes is CheckForNestedEscapes: when decoding an escape
// just after an invalid '%' would let the output read as a new escape
// ("%%30" → "%0"), that '%' is written "%25".
func checkNestedEscapes(s string, next, lastInvalid int, out []byte) []byte {
	length := len(out)
	last := out[length-1]
	appendNext := lastInvalid == length-2
	if appendNext {
		if next == len(s) || s[next] >= 0x80 {
			return out
		}
		out = append(out, s[next])
	}
	if _, ok := decodeEscaped(string(out), lastInvalid); ok {
		if !appendNext {
			out = append(out, out[lastInvalid+1])
		}
		out[lastInvalid+1], out[lastInvalid+2] = '2', '5'
		return append(out, last)
	}
	if appendNext {
		out = out[:length]
	}
	return out
}
