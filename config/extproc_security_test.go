package config

import (
	"strings"
	"testing"

	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/internal/secretfiles"
)

// ext_proc on a non-loopback address without TLS stops the start, naming
// the key and both ways out; loopback, TLS or the explicit opt-in pass.
func TestExtprocPlaintextListenRefused(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9002", ":9002", "[::]:9002", "10.1.2.3:9002", "kvgate.internal:9002"} {
		c := Default()
		c.Extproc.Listen = addr
		err := c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "extproc.listen: ") || !strings.Contains(err.Error(), "extproc.tls.cert_file") || !strings.Contains(err.Error(), "extproc.allow_plaintext: true") {
			t.Fatalf("%s without TLS: %v", addr, err)
		}
		c.Extproc.AllowPlaintext = true
		if err := c.Validate(); err != nil {
			t.Fatalf("%s with allow_plaintext: %v", addr, err)
		}
	}
	_, server, _ := writePKI(t, t.TempDir())
	c := Default()
	c.Extproc.Listen = "0.0.0.0:9002"
	c.Extproc.TLS = secretfiles.ServerTLS{CertFile: server.Cert, KeyFile: server.Key}
	if err := c.Validate(); err != nil {
		t.Fatalf("with TLS: %v", err)
	}
	for _, addr := range []string{"127.0.0.1:9002", "[::1]:9002", "localhost:9002"} {
		c := Default()
		c.Extproc.Listen = addr
		if err := c.Validate(); err != nil {
			t.Fatalf("loopback %s: %v", addr, err)
		}
	}
	if _, err := Parse(strings.NewReader("extproc:\n  listen: 0.0.0.0:9002\n")); err == nil || !strings.Contains(err.Error(), "extproc.listen") {
		t.Fatalf("from YAML: %v", err)
	}
}

func TestPreprocessDefaultsAndBounds(t *testing.T) {
	c := Default()
	p := c.Extproc.Preprocess
	if p.MaxPromptTokens != 1<<20 || p.MaxWordBytes != 256<<10 || p.Timeout.D().String() != "1s" || p.MaxOutputTokens != 1<<26 || p.TrustRequestChatTemplate {
		t.Fatalf("defaults: %+v", p)
	}
	for body, want := range map[string]string{
		"max_prompt_tokens: -1":       "extproc.preprocess.max_prompt_tokens: must be in 1..67108864, got -1",
		"max_prompt_tokens: 67108865": "extproc.preprocess.max_prompt_tokens: must be in 1..67108864, got 67108865",
		"max_word_bytes: 100":         "extproc.preprocess.max_word_bytes: must be at least 1024, got 100",
		"timeout: 1ms":                "extproc.preprocess.timeout: must be in 10ms..1m0s, got 1ms",
		"timeout: 2m":                 "extproc.preprocess.timeout: must be in 10ms..1m0s, got 2m0s",
		"max_output_tokens: -5":       "extproc.preprocess.max_output_tokens: must be in 1..67108864, got -5",
	} {
		_, err := Parse(strings.NewReader("extproc:\n  preprocess:\n    " + body + "\n"))
		if err == nil || err.Error() != want {
			t.Errorf("%s: got %v\nwant %s", body, err, want)
		}
	}
	got, err := Parse(strings.NewReader("extproc:\n  preprocess: {max_prompt_tokens: 32768, timeout: 250ms, trust_request_chat_template: true}\n"))
	if err != nil || got.Extproc.Preprocess.MaxPromptTokens != 32768 || got.Extproc.Preprocess.Timeout.D().Milliseconds() != 250 || !got.Extproc.Preprocess.TrustRequestChatTemplate {
		t.Fatalf("set: %+v, %v", got.Extproc.Preprocess, err)
	}
}

func TestDebugHeaderConfig(t *testing.T) {
	c := Default()
	if c.Extproc.DebugHeader.Enabled() {
		t.Fatal("debug header enabled by default")
	}
	for body, want := range map[string]string{
		`{trusted_sources: ["10.0.0.0/33"]}`:                  `extproc.debug_header.trusted_sources[0]: "10.0.0.0/33" is neither a CIDR (10.0.0.0/8) nor an IP address`,
		`{trusted_sources: ["office"]}`:                       `extproc.debug_header.trusted_sources[0]: "office" is neither a CIDR (10.0.0.0/8) nor an IP address`,
		`{trusted_sources: ["10.0.0.1", "0.0.0.0/0"]}`:        `extproc.debug_header.trusted_sources[1]: "0.0.0.0/0" trusts every address: set allow_any_client if that is meant`,
		`{trusted_sources: ["::ffff:0.0.0.0/96"]}`:            `extproc.debug_header.trusted_sources[0]: "::ffff:0.0.0.0/96" trusts every address: set allow_any_client if that is meant`,
		`{allow_any_client: true, from_envoy_metadata: true}`: "extproc.debug_header.allow_any_client: true makes trusted_sources and from_envoy_metadata pointless: set one or the other",
	} {
		_, err := Parse(strings.NewReader("extproc:\n  debug_header: " + body + "\n"))
		if err == nil || err.Error() != want {
			t.Errorf("%s: got %v\nwant %s", body, err, want)
		}
	}
	d := extprocconfig.DebugHeader{TrustedSources: []string{"10.20.0.0/16", "192.0.2.7", "2001:db8::/32", "::ffff:198.51.100.0/120"}}
	src, err := d.Sources("x")
	if err != nil || len(src) != 4 || !d.Enabled() {
		t.Fatalf("sources: %v, %v", src, err)
	}
	if src[3].String() != "198.51.100.0/24" {
		t.Fatalf("IPv4-mapped prefix kept mapped: %s", src[3])
	}
}
