package envoy

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoregistry"
)

// Every listed extension type resolves the way an Any's @type is looked up,
// so the list cannot name a type the binary does not link.
func TestExtensionTypesResolve(t *testing.T) {
	urls := ExtensionTypes()
	if len(urls) != len(extensionTypes) {
		t.Fatalf("ExtensionTypes returned %d URLs for %d types", len(urls), len(extensionTypes))
	}
	for _, url := range urls {
		if _, err := protoregistry.GlobalTypes.FindMessageByURL(url); err != nil {
			t.Errorf("%s: %v", url, err)
		}
	}
}

// A misspelt listed type gets the listed one suggested; an Envoy type
// outside the list is pointed at the list; anything else gets neither.
func TestSuggestExtension(t *testing.T) {
	cases := []struct{ url, want string }{
		{typeURLPrefix + "envoy.extensions.filters.http.router.v3.Routr", "did you mean " + typeURLPrefix + "envoy.extensions.filters.http.router.v3.Router?"},
		{typeURLPrefix + "envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication", "kvgate validate-envoy --types"},
		{typeURLPrefix + "xds.type.v3.Unheard", "kvgate validate-envoy --types"},
	}
	for _, c := range cases {
		if got := suggestExtension(c.url); !strings.Contains(got, c.want) {
			t.Errorf("suggestExtension(%q) = %q, want it to contain %q", c.url, got, c.want)
		}
	}
	if got := suggestExtension("type.googleapis.com/acme.Filter"); got != "" {
		t.Errorf("a non-Envoy type got %q, want no suggestion", got)
	}
}
