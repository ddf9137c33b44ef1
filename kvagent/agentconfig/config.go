// Package agentconfig is the kvagent section of kvgate's YAML (kvagent:):
// its keys, defaults and validation, owned by the kvagent and composed by
// config (config.Config is this Config). It is a package of its own, not
// part of package kvagent, so that config can compose it without linking
// the daemon, and the daemon's tests can parse whole files with config.
package agentconfig

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/internal/yamlconf"
)

// Config configures the `kvgate kvagent` node-local KV tier daemon: a
// host-memory arena in a shared-memory file and a disk tier, an engine
// connector on a Unix socket, residency KV events, and peer transfers.
//
//	kvagent:
//	  name: node-a                       # agent name among peers
//	  socket: /run/kvgate/kvagent.sock   # engine connector (gRPC over a Unix socket)
//	  shm_path: /dev/shm/kvgate-kvagent  # host arena, created at start
//	  block_bytes: 0                     # bytes per block, or derive it from model:
//	  model: {layers: 36, kv_heads: 8, head_dim: 128, dtype_bytes: 2, tokens_per_block: 16}
//	  host_blocks: 4096                  # host arena capacity (0 = no host tier)
//	  disk: {dir: /var/lib/kvgate/kvagent, blocks: 65536, direct_io: auto, admit_after: 2, queue: 256}
//	  events: tcp://127.0.0.1:5600       # residency KV events (ZMQ PUB), credited by the indexer
//	  replay: tcp://127.0.0.1:5601       # their replay endpoint (ZMQ ROUTER)
//	  admin: 127.0.0.1:9500              # /metrics /healthz /readyz
//	  admin_auth: {token_file: /var/run/secrets/kvgate/admin-token}  # needed beyond loopback
//	  quotas:                            # slots a client may hold pinned, and for how long (0: derived)
//	    engine: {per_connection: 0, per_process: 0, hold_timeout: 60s}
//	    peer: {per_connection: 0, per_peer: 0, total: 0, hold_timeout: 30s}
//	  peer: {listen: 10.0.0.11:5700, transfer_listen: 10.0.0.11:5701, streams: 4, fetch_timeout: 1s,
//	         advertise_host: 10.0.0.11,
//	         tls: {cert_file: /etc/kvgate/peer/tls.crt, key_file: /etc/kvgate/peer/tls.key, ca_file: /etc/kvgate/peer/ca.crt},
//	         namespaces: [{peer: node-b.gpu.internal, allow: [qwen3, "qwen3/*"]}]}
//	  peers: [{name: node-b, addr: 10.0.0.12:5700}]
type Config struct {
	Name string `yaml:"name"`
	// Socket is the Unix socket path of the engine connector.
	Socket string `yaml:"socket"`
	// ShmPath is the host arena file; it must be on a memory filesystem
	// (/dev/shm) for the engine to share it without page-cache copies.
	ShmPath    string `yaml:"shm_path"`
	BlockBytes int    `yaml:"block_bytes"`
	Model      Model  `yaml:"model"`
	HostBlocks int    `yaml:"host_blocks"`
	Disk       Disk   `yaml:"disk"`
	Events     string `yaml:"events"`
	Replay     string `yaml:"replay"`
	// Admin serves /metrics, /healthz, /readyz. Beyond loopback it needs
	// admin_auth (a bearer token on /metrics; the probes stay open) or
	// admin_auth.allow_unauthenticated.
	Admin     string                `yaml:"admin"`
	AdminAuth secretfiles.AdminAuth `yaml:"admin_auth"`
	// MaxChain bounds the blocks of one connector request.
	MaxChain int `yaml:"max_chain"`
	// DrainTimeout bounds the graceful stop on SIGTERM.
	DrainTimeout yamlconf.Duration `yaml:"drain_timeout"`
	// Quotas bound the arena slots clients hold pinned (reserved plus
	// acquired) and for how long, so that no engine, and no peer, can
	// pin the arena and starve the others' offloads.
	Quotas Quotas `yaml:"quotas"`
	Peer   Peer   `yaml:"peer"`
	Peers  []Peer `yaml:"peers"`
}

// Quotas are kvagent.quotas: one quota for the engine socket, one
// for the peer listener. A field left 0 takes its default, derived from
// host_blocks.
type Quotas struct {
	Engine Quota `yaml:"engine"`
	Peer   Quota `yaml:"peer"`
}

// Quota bounds what clients of one listener hold.
type Quota struct {
	// PerConnection: slots one connection holds. Default host_blocks/2
	// (engine), host_blocks/4 (peer).
	PerConnection int `yaml:"per_connection"`
	// PerProcess (engine only): slots one engine process holds over its
	// connections, by the pid the kernel reports for the socket
	// (SO_PEERCRED). Default host_blocks/2.
	PerProcess int `yaml:"per_process"`
	// PerPeer (peer only): slots one peer holds over its connections, by
	// the names in its certificate (by IP without TLS). Default
	// host_blocks/4.
	PerPeer int `yaml:"per_peer"`
	// Total (peer only): slots all peers together hold, what remote
	// agents may take from the local engines. Default host_blocks/2.
	Total int `yaml:"total"`
	// HoldTimeout gives back a Reserve or Acquire not committed,
	// aborted or released within it (the connection stays open). Default
	// 60s (engine), 30s (peer): an offload or onboard takes milliseconds.
	HoldTimeout yamlconf.Duration `yaml:"hold_timeout"`
}

// Model derives the block size in bytes: layers × kv_heads ×
// head_dim × 2 (K and V) × dtype_bytes × tokens_per_block.
type Model struct {
	Layers         int `yaml:"layers"`
	KVHeads        int `yaml:"kv_heads"`
	HeadDim        int `yaml:"head_dim"`
	DtypeBytes     int `yaml:"dtype_bytes"`
	TokensPerBlock int `yaml:"tokens_per_block"`
}

// Disk configures the disk tier.
type Disk struct {
	Dir    string `yaml:"dir"`
	Blocks int    `yaml:"blocks"` // capacity; 0 = no disk tier
	// DirectIO is "auto" (O_DIRECT where the filesystem takes it), "on" or "off".
	DirectIO string `yaml:"direct_io"`
	// AdmitAfter: a block goes to disk only once seen this many times
	// (protects SSD endurance from one-off prefixes).
	AdmitAfter int `yaml:"admit_after"`
	// Queue bounds pending disk writes; beyond it offloads to disk are
	// dropped and counted (the engine is never blocked).
	Queue int `yaml:"queue"`
}

// Peer is this agent's peer endpoint (kvagent.peer) or one remote
// agent (kvagent.peers[i]).
type Peer struct {
	Name string `yaml:"name"` // peers[i] only
	// Listen (kvagent.peer) is where peers reach this agent's control
	// service; Addr (peers[i]) is a remote agent's.
	Listen string `yaml:"listen"`
	Addr   string `yaml:"addr"`
	// TransferListen is the TCP transfer engine's listen address.
	TransferListen string `yaml:"transfer_listen"`
	// AdvertiseHost (kvagent.peer only) is the host, an IP or DNS name
	// without a port, that peers dial for this agent's transfer engine (at
	// transfer_listen's port); it travels in the metadata PeerInfo
	// returns. Default: transfer_listen's host, which will not do when
	// that listens on every address (":5701", "0.0.0.0:5701", "[::]:5701"):
	// the agent then refuses to start without it. `kvgate kvagent
	// --advertise-host` overrides it (the Helm chart passes the pod IP).
	AdvertiseHost string `yaml:"advertise_host"`
	Streams       int    `yaml:"streams"`
	// FetchTimeout (kvagent.peer only) bounds one peer fill: when an
	// engine's Lookup or Acquire misses blocks here, the agent asks its
	// peers which of them holds the chain and fetches it within this
	// time, while the engine's request waits; past it the engine gets the
	// local prefix and recomputes the rest. Default 1s.
	FetchTimeout yamlconf.Duration `yaml:"fetch_timeout"`
	// TLS (kvagent.peer only) is mutual TLS on both peer channels, the
	// control gRPC service and the transfer engine: every agent presents
	// its certificate and accepts only peers signed by ca_file. Required
	// when listen or transfer_listen is not a loopback address; without
	// it both channels serve loopback clients only.
	TLS secretfiles.PeerTLS `yaml:"tls"`
	// Namespaces (kvagent.peer only), when set, says which peers may look
	// up and fetch which namespaces; a peer no rule names gets none.
	// Empty: every peer of the CA may fetch any namespace.
	Namespaces []PeerNamespaces `yaml:"namespaces"`
}

// PeerNamespaces lets the peer whose certificate names Peer (its
// CN or a DNS, IP or URI SAN) fetch the namespaces in Allow: exact names,
// "name/*" for name's sub-namespaces (LoRA, cache salt), or "*".
type PeerNamespaces struct {
	Peer  string   `yaml:"peer"`
	Allow []string `yaml:"allow"`
}

// Config bounds.
const (
	MaxBlockBytes  = 1 << 30
	MaxChainBlocks = 1 << 16
)

// ApplyDefaults fills in what the file left out (config.Parse calls it
// before Validate).
func (x *Config) ApplyDefaults() {
	if x.Name == "" {
		x.Name = "kvagent"
	}
	if x.Admin == "" {
		x.Admin = "127.0.0.1:9500"
	}
	if x.Disk.DirectIO == "" {
		x.Disk.DirectIO = "auto"
	}
	if x.Disk.AdmitAfter == 0 {
		x.Disk.AdmitAfter = 2
	}
	if x.Disk.Queue == 0 {
		x.Disk.Queue = 256
	}
	if x.MaxChain == 0 {
		x.MaxChain = 4096
	}
	if x.DrainTimeout == 0 {
		x.DrainTimeout = yamlconf.Duration(10e9)
	}
	if x.Peer.Streams == 0 {
		x.Peer.Streams = 4
	}
	if x.Peer.FetchTimeout == 0 {
		x.Peer.FetchTimeout = yamlconf.Duration(1e9)
	}
	h := x.HostBlocks
	e, p := &x.Quotas.Engine, &x.Quotas.Peer
	for _, d := range []struct {
		v   *int
		def int
	}{{&e.PerConnection, h / 2}, {&e.PerProcess, h / 2}, {&p.PerConnection, h / 4}, {&p.PerPeer, h / 4}, {&p.Total, h / 2}} {
		if *d.v == 0 {
			*d.v = max(d.def, 1)
		}
	}
	if e.HoldTimeout == 0 {
		e.HoldTimeout = yamlconf.Duration(60e9)
	}
	if p.HoldTimeout == 0 {
		p.HoldTimeout = yamlconf.Duration(30e9)
	}
}

// Enabled reports whether the section was filled in (the kvagent command
// needs it; other processes ignore it).
func (x *Config) Enabled() bool { return x.Socket != "" }

// BlockSize is the configured or derived block size in bytes.
func (x *Config) BlockSize() int {
	if x.BlockBytes > 0 {
		return x.BlockBytes
	}
	m := x.Model
	n := int64(m.Layers) * int64(m.KVHeads) * int64(m.HeadDim) * 2 * int64(m.DtypeBytes) * int64(m.TokensPerBlock)
	if n <= 0 || n > MaxBlockBytes {
		return 0
	}
	return int(n)
}

// Validate reports the first invalid value; path is the section's key path.
// An empty section (no socket) is valid: only `kvgate kvagent` needs it.
// The groups are checked in the file's order: the local socket, arena and
// block geometry, the disk tier, the events and admin endpoints, the peer
// listener, the quotas, the peers.
func (x *Config) Validate(path string) error {
	if !x.Enabled() {
		return nil
	}
	for _, check := range []func(string) error{
		x.validateLocal, x.validateDisk, x.validateEndpoints, x.validatePeer,
		func(path string) error { return x.Quotas.validate(path+".quotas", x.HostBlocks) },
		x.validatePeers,
	} {
		if err := check(path); err != nil {
			return err
		}
	}
	return nil
}

// validateLocal checks the connector's socket, the agent's name, the host
// arena and the block geometry.
func (x *Config) validateLocal(path string) error {
	if !filepath.IsAbs(x.Socket) {
		return fmt.Errorf("%s.socket: %q: want an absolute path", path, x.Socket)
	}
	if len(x.Socket) > 107 {
		return fmt.Errorf("%s.socket: %q: longer than a Unix socket path may be (107 bytes)", path, x.Socket)
	}
	if x.Name == "" || len(x.Name) > 128 || strings.ContainsAny(x.Name, "/ \t\n") {
		return fmt.Errorf("%s.name: %q: want 1..128 characters without '/' or spaces", path, x.Name)
	}
	if x.HostBlocks > 0 && !filepath.IsAbs(x.ShmPath) {
		return fmt.Errorf("%s.shm_path: %q: want an absolute path (e.g. /dev/shm/kvgate-kvagent)", path, x.ShmPath)
	}
	m := x.Model
	switch {
	case x.BlockBytes < 0 || x.BlockBytes > MaxBlockBytes:
		return fmt.Errorf("%s.block_bytes: %d: want 0 (derive from model) or 1..%d", path, x.BlockBytes, MaxBlockBytes)
	case x.BlockBytes > 0 && m != (Model{}):
		return fmt.Errorf("%s.model: set together with block_bytes; give one", path)
	case x.BlockBytes == 0 && (m.Layers <= 0 || m.KVHeads <= 0 || m.HeadDim <= 0 || m.DtypeBytes <= 0 || m.TokensPerBlock <= 0):
		return fmt.Errorf("%s.model: layers, kv_heads, head_dim, dtype_bytes and tokens_per_block must all be > 0 (or set block_bytes)", path)
	case x.BlockSize() == 0:
		return fmt.Errorf("%s.model: derived block size is beyond %d bytes", path, MaxBlockBytes)
	case x.HostBlocks < 0 || x.HostBlocks > 1<<24:
		return fmt.Errorf("%s.host_blocks: %d: want 0..%d", path, x.HostBlocks, 1<<24)
	case x.HostBlocks == 0:
		// The connector's data path is the host arena.
		return fmt.Errorf("%s.host_blocks: must be > 0: the engine connector reads and writes the host arena", path)
	case int64(x.HostBlocks)*int64(x.BlockSize()) > 1<<40:
		return fmt.Errorf("%s.host_blocks: %d blocks of %d bytes is more than 1 TiB", path, x.HostBlocks, x.BlockSize())
	case x.MaxChain < 1 || x.MaxChain > MaxChainBlocks:
		return fmt.Errorf("%s.max_chain: %d: want 1..%d", path, x.MaxChain, MaxChainBlocks)
	}
	return nil
}

// validateDisk checks kvagent.disk.
func (x *Config) validateDisk(path string) error {
	d := x.Disk
	switch {
	case d.Blocks < 0 || d.Blocks > 1<<28:
		return fmt.Errorf("%s.disk.blocks: %d: want 0..%d", path, d.Blocks, 1<<28)
	case d.Blocks > 0 && !filepath.IsAbs(d.Dir):
		return fmt.Errorf("%s.disk.dir: %q: want an absolute path", path, d.Dir)
	case d.DirectIO != "auto" && d.DirectIO != "on" && d.DirectIO != "off":
		return fmt.Errorf("%s.disk.direct_io: %q is not one of auto, on, off", path, d.DirectIO)
	case d.AdmitAfter < 1 || d.AdmitAfter > 255:
		return fmt.Errorf("%s.disk.admit_after: %d: want 1..255", path, d.AdmitAfter)
	case d.Queue < 1 || d.Queue > 1<<20:
		return fmt.Errorf("%s.disk.queue: %d: want 1..%d", path, d.Queue, 1<<20)
	}
	return nil
}

// validateEndpoints checks the residency events and replay endpoints, the
// admin listener with its token, and the drain bound.
func (x *Config) validateEndpoints(path string) error {
	if x.Events != "" {
		if _, _, err := confaddr.ZMQEndpoint(x.Events, 0); err != nil {
			return fmt.Errorf("%s.events: %w", path, err)
		}
	} else if x.Replay != "" {
		return fmt.Errorf("%s.replay: set without events", path)
	}
	if x.Replay != "" {
		if _, _, err := confaddr.ZMQEndpoint(x.Replay, 0); err != nil {
			return fmt.Errorf("%s.replay: %w", path, err)
		}
	}
	if err := confaddr.CheckHostPort(x.Admin); err != nil {
		return fmt.Errorf("%s.admin: %w", path, err)
	}
	if err := x.AdminAuth.Validate(path + ".admin_auth"); err != nil {
		return err
	}
	if err := x.AdminAuth.CheckExposure(path+".admin", x.Admin, path+".admin_auth"); err != nil {
		return err
	}
	if x.DrainTimeout.D() <= 0 {
		return fmt.Errorf("%s.drain_timeout: must be > 0", path)
	}
	return nil
}

// validatePeer checks kvagent.peer: its listeners, the mutual TLS they
// need off loopback, and the namespace rules.
func (x *Config) validatePeer(path string) error {
	p := x.Peer
	if (p.Listen == "") != (p.TransferListen == "") {
		return fmt.Errorf("%s.peer: listen and transfer_listen go together", path)
	}
	if p.AdvertiseHost != "" {
		if p.Listen == "" {
			return fmt.Errorf("%s.peer.advertise_host: set without %s.peer.listen", path, path)
		}
		if err := CheckAdvertiseHost(p.AdvertiseHost); err != nil {
			return fmt.Errorf("%s.peer.advertise_host: %w", path, err)
		}
	}
	if p.Listen != "" {
		if err := confaddr.CheckHostPort(p.Listen); err != nil {
			return fmt.Errorf("%s.peer.listen: %w", path, err)
		}
		if err := confaddr.CheckHostPort(p.TransferListen); err != nil {
			return fmt.Errorf("%s.peer.transfer_listen: %w", path, err)
		}
	}
	if p.Streams < 1 || p.Streams > 64 {
		return fmt.Errorf("%s.peer.streams: %d: want 1..64", path, p.Streams)
	}
	if d := p.FetchTimeout.D(); d < 10e6 || d > 60e9 {
		return fmt.Errorf("%s.peer.fetch_timeout: %s: want 10ms..1m", path, d)
	}
	if err := p.TLS.Validate(path + ".peer.tls"); err != nil {
		return err
	}
	if p.TLS.Enabled() && p.Listen == "" {
		return fmt.Errorf("%s.peer.tls: set without %s.peer.listen", path, path)
	}
	// The peer channels hand out KV bytes and token ids: off loopback,
	// only to peers that prove who they are.
	for _, l := range [][2]string{{"listen", p.Listen}, {"transfer_listen", p.TransferListen}} {
		if l[1] != "" && !p.TLS.Enabled() && !confaddr.IsLoopback(l[1]) {
			return fmt.Errorf("%s.peer.tls: required: %s.peer.%s %q is not a loopback address, and peers off loopback must authenticate with mutual TLS (set cert_file, key_file and ca_file)", path, path, l[0], l[1])
		}
	}
	if len(p.Namespaces) > 0 && !p.TLS.Enabled() {
		return fmt.Errorf("%s.peer.namespaces: needs %s.peer.tls (the rules match names in the peers' certificates)", path, path)
	}
	for i, r := range p.Namespaces {
		rp := fmt.Sprintf("%s.peer.namespaces[%d]", path, i)
		if r.Peer == "" {
			return fmt.Errorf("%s.peer: empty (want a name the peer's certificate carries: CN, DNS, IP or URI SAN)", rp)
		}
		if len(r.Allow) == 0 {
			return fmt.Errorf("%s.allow: empty (want namespaces, \"name/*\" or \"*\")", rp)
		}
		for j, ns := range r.Allow {
			if ns == "" || (strings.Contains(ns, "*") && ns != "*" && (!strings.HasSuffix(ns, "/*") || strings.Count(ns, "*") > 1)) {
				return fmt.Errorf("%s.allow[%d]: %q: want a namespace, \"name/*\" or \"*\"", rp, j, ns)
			}
		}
	}
	return nil
}

// validatePeers checks kvagent.peers: the agents this one fetches from.
func (x *Config) validatePeers(path string) error {
	p := x.Peer
	names := map[string]bool{x.Name: true}
	for i, q := range x.Peers {
		pp := fmt.Sprintf("%s.peers[%d]", path, i)
		if q.Name == "" || names[q.Name] {
			return fmt.Errorf("%s.name: empty, duplicate or this agent's own name %q", pp, q.Name)
		}
		names[q.Name] = true
		if q.TLS != (secretfiles.PeerTLS{}) || q.Listen != "" || q.TransferListen != "" || q.FetchTimeout != 0 {
			return fmt.Errorf("%s: only name and addr belong here (tls, listen, transfer_listen and fetch_timeout are kvagent.peer's)", pp)
		}
		if err := confaddr.CheckHostPort(q.Addr); err != nil {
			return fmt.Errorf("%s.addr: %w", pp, err)
		}
	}
	if len(x.Peers) > 0 && p.Listen == "" {
		return fmt.Errorf("%s.peer.listen: required with peers (fetching needs a transfer endpoint)", path)
	}
	return nil
}

func (q *Quotas) validate(path string, hostBlocks int) error {
	if q.Engine.PerPeer != 0 || q.Engine.Total != 0 {
		return fmt.Errorf("%s.engine: per_peer and total belong to %s.peer", path, path)
	}
	if q.Peer.PerProcess != 0 {
		return fmt.Errorf("%s.peer.per_process: belongs to %s.engine", path, path)
	}
	for _, b := range []struct {
		key string
		v   int
	}{
		{"engine.per_connection", q.Engine.PerConnection}, {"engine.per_process", q.Engine.PerProcess},
		{"peer.per_connection", q.Peer.PerConnection}, {"peer.per_peer", q.Peer.PerPeer}, {"peer.total", q.Peer.Total},
	} {
		if b.v < 1 || b.v > hostBlocks {
			return fmt.Errorf("%s.%s: %d: want 1..%d (host_blocks), or 0 for the default", path, b.key, b.v, hostBlocks)
		}
	}
	for _, b := range []struct {
		key string
		d   yamlconf.Duration
	}{{"engine.hold_timeout", q.Engine.HoldTimeout}, {"peer.hold_timeout", q.Peer.HoldTimeout}} {
		if b.d.D() < 100e6 || b.d.D() > 3600e9 {
			return fmt.Errorf("%s.%s: %s: want 100ms..1h", path, b.key, b.d.D())
		}
	}
	return nil
}

// CheckAdvertiseHost accepts an IP address or a DNS name, without a port.
func CheckAdvertiseHost(h string) error {
	if net.ParseIP(h) != nil {
		return nil
	}
	if _, _, err := net.SplitHostPort(h); err == nil {
		return fmt.Errorf("%q: want a host without a port (the port is transfer_listen's)", h)
	}
	bad := len(h) == 0 || len(h) > 253 || h[0] == '.' || h[0] == '-'
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-') {
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("%q: want an IP address or a DNS name", h)
	}
	return nil
}
