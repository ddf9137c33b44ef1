package agentconfig_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/kvagent/agentconfig"

	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/lab/testkit/tlstest"
)

// The kvagent section as config parses it from a whole file (decode
// errors keep their key paths), defaults and validation included.
const kvagentBase = `kvagent:
  socket: /run/kvgate/kvagent.sock
  shm_path: /dev/shm/kvgate-kvagent
  model: {layers: 36, kv_heads: 8, head_dim: 128, dtype_bytes: 2, tokens_per_block: 16}
  host_blocks: 1024
  disk: {dir: /var/lib/kvgate/kvagent, blocks: 4096}
  events: tcp://127.0.0.1:5600
  replay: tcp://127.0.0.1:5601
  peer: {listen: 127.0.0.1:5700, transfer_listen: 127.0.0.1:5701}
  peers: [{name: node-b, addr: 10.0.0.12:5700}]
`

func TestKvagentSectionDefaultsAndDerivedBlockSize(t *testing.T) {
	c, err := config.Parse(strings.NewReader(kvagentBase))
	if err != nil {
		t.Fatal(err)
	}
	k := c.Kvagent
	// 36 layers × 8 heads × 128 dims × 2 (K, V) × 2 bytes × 16 tokens.
	if got, want := k.BlockSize(), 36*8*128*2*2*16; got != want {
		t.Errorf("block size %d, want %d", got, want)
	}
	if k.Disk.DirectIO != "auto" || k.Disk.AdmitAfter != 2 || k.Admin != "127.0.0.1:9500" || k.MaxChain != 4096 || k.Peer.Streams != 4 || k.Peer.FetchTimeout.D() != 1e9 {
		t.Errorf("defaults: %+v", k)
	}
	// Quotas default to shares of the 1024 host slots.
	if q := k.Quotas; q.Engine != (agentconfig.Quota{PerConnection: 512, PerProcess: 512, HoldTimeout: yamlconf.Duration(60e9)}) ||
		q.Peer != (agentconfig.Quota{PerConnection: 256, PerPeer: 256, Total: 512, HoldTimeout: yamlconf.Duration(30e9)}) {
		t.Errorf("quota defaults: %+v", q)
	}
	// Without a socket the section is off, and valid empty.
	if c, err := config.Parse(strings.NewReader("")); err != nil || c.Kvagent.Enabled() {
		t.Errorf("empty file: %v, enabled %v", err, c.Kvagent.Enabled())
	}
}

func TestKvagentErrorsNameTheKey(t *testing.T) {
	cases := []struct{ old, new, want string }{
		{"socket: /run/kvgate/kvagent.sock", "socket: kvagent.sock", "kvagent.socket:"},
		{"host_blocks: 1024", "host_blocks: 0", "kvagent.host_blocks: must be > 0"},
		{"kv_heads: 8", "kv_heads: 0", "kvagent.model:"},
		{"model: {layers: 36, kv_heads: 8, head_dim: 128, dtype_bytes: 2, tokens_per_block: 16}", "model: {layers: 36, kv_heads: 8, head_dim: 128, dtype_bytes: 2, tokens_per_block: 16}\n  block_bytes: 4096", "kvagent.model: set together with block_bytes"},
		{"blocks: 4096}", "blocks: 4096, direct_io: maybe}", `kvagent.disk.direct_io: "maybe" is not one of auto, on, off`},
		{"dir: /var/lib/kvgate/kvagent", "dir: relative", "kvagent.disk.dir:"},
		{"events: tcp://127.0.0.1:5600", "events: udp://x:1", "kvagent.events:"},
		{"peers: [{name: node-b, addr: 10.0.0.12:5700}]", "peers: [{name: node-b, addr: nope}]", "kvagent.peers[0].addr:"},
		{"peers: [{name: node-b, addr: 10.0.0.12:5700}]", "peers: [{name: kvagent, addr: 10.0.0.12:5700}]", "kvagent.peers[0].name:"},
		{"peer: {listen: 127.0.0.1:5700, transfer_listen: 127.0.0.1:5701}", "peer: {listen: 127.0.0.1:5700}", "kvagent.peer: listen and transfer_listen go together"},
		{"replay: tcp://127.0.0.1:5601", "replay: tcp://127.0.0.1:5601\n  admin: 0.0.0.0:9500", "kvagent.admin: \"0.0.0.0:9500\" is not a loopback address and kvagent.admin_auth has no token"},
		{"peers: [{name: node-b, addr: 10.0.0.12:5700}]", "peers: [{name: node-b, addr: 10.0.0.12:5700, tls: {cert_file: /x}}]", "kvagent.peers[0]: only name and addr belong here"},
		{"transfer_listen: 127.0.0.1:5701}", "transfer_listen: 127.0.0.1:5701, tls: {ca_file: /x}}", "kvagent.peer.tls.cert_file: required"},
		{"transfer_listen: 127.0.0.1:5701}", "transfer_listen: 127.0.0.1:5701, tls: {cert_file: /nonexistent/tls.crt, key_file: /nonexistent/tls.key}}", "kvagent.peer.tls.ca_file: required"},
		{"transfer_listen: 127.0.0.1:5701}", "transfer_listen: 127.0.0.1:5701, tls: {cert_file: /nonexistent/tls.crt, key_file: /nonexistent/tls.key, ca_file: /nonexistent/ca.crt}}", "kvagent.peer.tls.cert_file:"},
		// Off loopback the peer channels need mutual TLS.
		{"listen: 127.0.0.1:5700,", "listen: 10.0.0.11:5700,", `kvagent.peer.tls: required: kvagent.peer.listen "10.0.0.11:5700" is not a loopback address`},
		{"transfer_listen: 127.0.0.1:5701}", "transfer_listen: 0.0.0.0:5701}", `kvagent.peer.tls: required: kvagent.peer.transfer_listen "0.0.0.0:5701"`},
		{"transfer_listen: 127.0.0.1:5701}", "transfer_listen: \":5701\"}", `kvagent.peer.transfer_listen ":5701" is not a loopback address`},
		{"transfer_listen: 127.0.0.1:5701}", "transfer_listen: 127.0.0.1:5701, namespaces: [{peer: node-b, allow: [m]}]}", "kvagent.peer.namespaces: needs kvagent.peer.tls"},
		{"transfer_listen: 127.0.0.1:5701}", "transfer_listen: 127.0.0.1:5701, fetch_timeout: 1ms}", "kvagent.peer.fetch_timeout: 1ms: want 10ms..1m"},
		{"peers: [{name: node-b, addr: 10.0.0.12:5700}]", "peers: [{name: node-b, addr: 10.0.0.12:5700, fetch_timeout: 2s}]", "kvagent.peers[0]: only name and addr belong here"},
		{"transfer_listen: 127.0.0.1:5701}", "transfer_listen: 127.0.0.1:5701, advertise_host: \"127.0.0.1:5701\"}", `kvagent.peer.advertise_host: "127.0.0.1:5701": want a host without a port`},
		{"transfer_listen: 127.0.0.1:5701}", "transfer_listen: 127.0.0.1:5701, advertise_host: \"$(POD_IP)\"}", `kvagent.peer.advertise_host: "$(POD_IP)": want an IP address or a DNS name`},
		{"peer: {listen: 127.0.0.1:5700, transfer_listen: 127.0.0.1:5701}", "peer: {advertise_host: 10.0.0.1}", "kvagent.peer.advertise_host: set without kvagent.peer.listen"},
		// Quotas.
		{"host_blocks: 1024", "host_blocks: 1024\n  quotas: {engine: {per_connection: 1025}}", "kvagent.quotas.engine.per_connection: 1025: want 1..1024"},
		{"host_blocks: 1024", "host_blocks: 1024\n  quotas: {peer: {total: -1}}", "kvagent.quotas.peer.total: -1"},
		{"host_blocks: 1024", "host_blocks: 1024\n  quotas: {engine: {total: 5}}", "kvagent.quotas.engine: per_peer and total belong to kvagent.quotas.peer"},
		{"host_blocks: 1024", "host_blocks: 1024\n  quotas: {peer: {per_process: 5}}", "kvagent.quotas.peer.per_process: belongs to kvagent.quotas.engine"},
		{"host_blocks: 1024", "host_blocks: 1024\n  quotas: {peer: {hold_timeout: 10ms}}", "kvagent.quotas.peer.hold_timeout: 10ms: want 100ms..1h"},
	}
	for _, tc := range cases {
		doc := strings.Replace(kvagentBase, tc.old, tc.new, 1)
		if doc == kvagentBase {
			t.Fatalf("case %q: nothing replaced", tc.want)
		}
		_, err := config.Parse(strings.NewReader(doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v", tc.want, err)
		}
	}
}

// A kvagent admin listener beyond loopback is accepted with a token (or an
// explicit allow_unauthenticated); kvagent.peer.tls loads real files and
// yields one mutual-TLS config.
func TestKvagentAdminAuthAndPeerTLS(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, err := tlstest.NewCA("peers")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.Write(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Peer("node-a", "10.0.0.11")
	if err != nil {
		t.Fatal(err)
	}
	f, err := leaf.Write(dir, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(kvagentBase, "replay: tcp://127.0.0.1:5601", "replay: tcp://127.0.0.1:5601\n  admin: 0.0.0.0:9500\n  admin_auth: {token_file: "+tokenFile+"}", 1)
	// Off loopback with mutual TLS, and namespace rules (which need it).
	doc = strings.Replace(doc, "peer: {listen: 127.0.0.1:5700, transfer_listen: 127.0.0.1:5701}", "peer: {listen: 10.0.0.11:5700, transfer_listen: 0.0.0.0:5701, tls: {cert_file: "+f.Cert+", key_file: "+f.Key+", ca_file: "+caFile+"}, namespaces: [{peer: node-b, allow: [qwen3, \"qwen3/*\"]}]}", 1)
	c, err := config.Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := c.Kvagent.AdminAuth.Token(); err != nil || tok != "0123456789abcdef0123" {
		t.Errorf("token %q, %v", tok, err)
	}
	if ns := c.Kvagent.Peer.Namespaces; len(ns) != 1 || ns[0].Peer != "node-b" || len(ns[0].Allow) != 2 {
		t.Errorf("peer namespaces %+v", ns)
	}
	for bad, want := range map[string]string{
		`[{peer: "", allow: [m]}]`:      "kvagent.peer.namespaces[0].peer: empty",
		`[{peer: node-b}]`:              "kvagent.peer.namespaces[0].allow: empty",
		`[{peer: node-b, allow: [m*]}]`: `kvagent.peer.namespaces[0].allow[0]: "m*"`,
	} {
		d := strings.Replace(doc, `namespaces: [{peer: node-b, allow: [qwen3, "qwen3/*"]}]`, "namespaces: "+bad, 1)
		if _, err := config.Parse(strings.NewReader(d)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("namespaces %s: %v, want %q", bad, err, want)
		}
	}
	tc, err := c.Kvagent.Peer.TLS.Load()
	if err != nil || tc == nil || tc.RootCAs == nil || tc.GetClientCertificate == nil || tc.GetCertificate == nil {
		t.Fatalf("peer TLS config %+v, %v: want server and client sides", tc, err)
	}
	open := strings.Replace(kvagentBase, "replay: tcp://127.0.0.1:5601", "replay: tcp://127.0.0.1:5601\n  admin: 0.0.0.0:9500\n  admin_auth: {allow_unauthenticated: true}", 1)
	if _, err := config.Parse(strings.NewReader(open)); err != nil {
		t.Errorf("allow_unauthenticated: %v", err)
	}
}
