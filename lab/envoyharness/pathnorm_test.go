package envoyharness

import (
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// Envoy's own vectors (test/common/http/path_utility_test.cc:
// NormalizeValidPaths, NormalizeCasePath, InvalidPaths, MergeSlashes),
// and the spellings issue 31 sent.
func TestCanonicalPathMatchesEnvoy(t *testing.T) {
	for in, want := range map[string]string{
		"/xyz": "/xyz", "/x/y/z": "/x/y/z",
		"/a/b/../c": "/a/c", "/a/b/./c": "/a/b/c", "a/b/../c": "/a/c", "/a/b/../../../../c": "/c",
		`/a/..\c`: "/c", "/%c0%af": "/%c0%af", "/%5c%25": "/%5c%25", "/a/b/%2E%2E/c": "/a/c",
		"/a/b/%2E./c": "/a/c", "/a/b/%2E/c": "/a/b/c", "..": "/", "/../a/b": "/a/b", "/./a/b": "/a/b",
		"/A/B/C": "/A/B/C", "/a/b/%2e%2e/c": "/a/c", "/a/%2F%2f/c": "/a/%2F%2f/c",
		// issue 31
		"/v1/chat/%63ompletions": "/v1/chat/completions", "/v1/%63hat/completions?x=%63": "/v1/chat/completions?x=%63",
		"/v1/./chat/completions": "/v1/chat/completions", "/v1/x/../chat/completions": "/v1/chat/completions",
		"/v1/chat/completions%20": "/v1/chat/completions%20", "/v1/chat completions": "/v1/chat%20completions",
		"/%%300": "/%2500",
	} {
		got, ok := canonicalPath(in)
		if !ok || got != want {
			t.Errorf("canonicalPath(%q) = %q %v, want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"/xyz/.%00../abc", "/xyz/%00.%00./abc", "/xyz/AAAAA%%0000/abc"} {
		if got, ok := canonicalPath(in); ok {
			t.Errorf("canonicalPath(%q) = %q, Envoy refuses it", in, got)
		}
	}
	for in, want := range map[string]string{
		"": "", "a//b/c": "a/b/c", "/a//b/c/": "/a/b/c/", "a//b/c/": "a/b/c/", "/a": "/a", "//a/b/c": "/a/b/c",
		"/a/b/c//": "/a/b/c/", "/a///b/c": "/a/b/c", "/a//b?a=///c": "/a/b?a=///c", "/a//b?": "/a/b?", "//a/?b": "/a/?b",
	} {
		if got := mergeSlashes(in); got != want {
			t.Errorf("mergeSlashes(%q) = %q, want %q", in, got, want)
		}
	}
}

// The three settings in maybeNormalizePath's order, and nothing when the
// config sets none of them (Envoy's defaults).
func TestPathNormalizationFollowsTheConfig(t *testing.T) {
	shipped := PathNormalization{Normalize: true, MergeSlashes: true, EscapedSlashes: hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT}
	for _, c := range []struct {
		n      PathNormalization
		in     string
		want   string
		action pathAction
	}{
		{PathNormalization{}, "/v1/chat/%63ompletions", "/v1/chat/%63ompletions", pathContinue},
		{PathNormalization{}, "//v1/chat/completions", "//v1/chat/completions", pathContinue},
		{shipped, "/v1/chat/%63ompletions", "/v1/chat/completions", pathContinue},
		{shipped, "//v1//chat/./completions", "/v1/chat/completions", pathContinue},
		{shipped, "/v1/chat%2Fcompletions", "/v1/chat/completions", pathRedirect},
		{shipped, `/v1/chat%5Ccompletions?q=%2F`, "/v1/chat/completions?q=%2F", pathRedirect},
		{shipped, "/v1/chat/completions%00", "", pathReject},
		{PathNormalization{EscapedSlashes: hcmv3.HttpConnectionManager_REJECT_REQUEST}, "/v1%2fchat", "", pathReject},
		{PathNormalization{EscapedSlashes: hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD}, "/v1%2fchat", "/v1/chat", pathContinue},
		{PathNormalization{EscapedSlashes: hcmv3.HttpConnectionManager_KEEP_UNCHANGED, MergeSlashes: true}, "/v1%2f%2fchat//x", "/v1%2f%2fchat/x", pathContinue},
	} {
		got, action := c.n.apply(c.in)
		if action != c.action || (action != pathReject && got != c.want) {
			t.Errorf("%+v apply(%q) = %q %d, want %q %d", c.n, c.in, got, action, c.want, c.action)
		}
	}
}

// The standalone shipped files set the three settings, and the harness
// reads them from the connection manager; a config that sets none gets
// Envoy's defaults (no change to the path).
func TestShippedBootstrapsNormalisePaths(t *testing.T) {
	want := PathNormalization{Normalize: true, MergeSlashes: true, EscapedSlashes: hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT}
	for _, f := range []string{"envoy.yaml", "envoy-buffered-failopen.yaml", "envoy-header-routing.yaml", "envoy-mtls.yaml", "envoy-original-dst.yaml"} {
		if got := MustShipped(f).Path; got != want {
			t.Errorf("%s: path handling %+v, want %+v", f, got, want)
		}
	}
	if got := MustShipped("istio/envoyfilter.yaml").Path; got != (PathNormalization{}) {
		t.Errorf("istio/envoyfilter.yaml sets no connection-manager path handling, harness plays %+v", got)
	}
}
