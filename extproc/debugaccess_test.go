package extproc

import (
	"context"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

// debugHeaderFor sends one chat request asking for x-kvgate-debug through
// the harness (configured as Envoy would be) and returns the response
// header the client gets ("" for none).
func debugHeaderFor(t *testing.T, r *rig, req *envoyharness.Request) string {
	t.Helper()
	x, err := r.harness.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if x.Local != nil {
		t.Fatalf("local reply %d %s", x.Local.Status, x.Local.Body)
	}
	hs, err := x.RespondHeaders(200, []envoyharness.Header{{Name: "content-type", Value: "application/json"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := envoyharness.Get(hs, "x-kvgate-debug")
	return v
}

func askDebug(source string, md map[string]*structpb.Struct) *envoyharness.Request {
	req := post(chatBody("qwen3", "What is cached where?"), envoyharness.Header{Name: "x-kvgate-debug", Value: "1"})
	req.Source, req.DynamicMetadata = source, md
	return req
}

var debugMetadata = map[string]*structpb.Struct{"kvgate": {Fields: map[string]*structpb.Value{"debug_header": structpb.NewBoolValue(true)}}}

// grant sets extproc.debug_header on a running rig (loading a rig's
// tokenizer takes seconds; the policy is all that differs).
func grant(t *testing.T, r *rig, c extprocconfig.DebugHeader) {
	t.Helper()
	a, err := newDebugAccess(c)
	if err != nil {
		t.Fatal(err)
	}
	r.router.debugOK = a
}

// Issue 15 item 3: by default a client's x-kvgate-debug yields nothing,
// whatever it sends; each grant in extproc.debug_header opens it to its
// clients only.
func TestDebugHeaderGrants(t *testing.T) {
	envoy := envoyharness.DefaultConfig().AllowingClientDebug()
	envoy.RequestAttributes = []string{"source.address"}
	envoy.ForwardingNamespaces = []string{"kvgate"}
	r := newRig(t, nil, envoy)

	for _, req := range []*envoyharness.Request{askDebug("", nil), askDebug("127.0.0.1:4000", nil), askDebug("10.20.0.5:4000", debugMetadata)} {
		if h := debugHeaderFor(t, r, req); h != "" {
			t.Fatalf("default config gave source %q the debug header %q", req.Source, h)
		}
	}

	grant(t, r, extprocconfig.DebugHeader{TrustedSources: []string{"10.20.0.0/16", "2001:db8::/32"}})
	for src, want := range map[string]bool{
		"10.20.0.5:4000": true, "[2001:db8::7]:4000": true, "[::ffff:10.20.1.1]:80": true,
		// "": Envoy without request_attributes: source.address sends no
		// source, so no client is trusted.
		"10.21.0.5:4000": false, "127.0.0.1:4000": false, "": false, "not-an-address": false,
	} {
		if got := debugHeaderFor(t, r, askDebug(src, nil)) != ""; got != want {
			t.Errorf("trusted_sources: source %q got the header %v, want %v", src, got, want)
		}
	}

	grant(t, r, extprocconfig.DebugHeader{FromEnvoyMetadata: true})
	if h := debugHeaderFor(t, r, askDebug("198.51.100.1:1", debugMetadata)); h == "" {
		t.Fatal("from_envoy_metadata: a listener's kvgate.debug_header metadata did not grant the header")
	}
	if h := debugHeaderFor(t, r, askDebug("198.51.100.1:1", nil)); h != "" {
		t.Fatalf("from_envoy_metadata: granted without the metadata: %q", h)
	}

	grant(t, r, extprocconfig.DebugHeader{AllowAnyClient: true})
	if h := debugHeaderFor(t, r, askDebug("", nil)); h == "" {
		t.Fatal("allow_any_client: no header")
	}
	// Granted or not, a client that does not ask gets nothing.
	if h := debugHeaderFor(t, r, post(chatBody("qwen3", "no debug please"))); h != "" {
		t.Fatalf("header sent unasked: %q", h)
	}
}

// Metadata in a namespace Envoy does not forward never reaches kvgate.
func TestDebugMetadataNeedsForwarding(t *testing.T) {
	r := newRig(t, func(c *config.Config) { c.Extproc.DebugHeader.FromEnvoyMetadata = true }, envoyharness.DefaultConfig().AllowingClientDebug())
	if h := debugHeaderFor(t, r, askDebug("", debugMetadata)); h != "" {
		t.Fatalf("metadata not forwarded, yet granted: %q", h)
	}
}
