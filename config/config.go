// Package config is kvgate's configuration file: one YAML document shared
// by every kvgate process (each reads the sections it needs). It sits at the
// top level because the indexer, extproc and later the planner all read it.
//
// Decoding is strict (unknown keys are errors) and every value is validated,
// so that a typo fails at start with the path of the offending key instead
// of silently running on a default.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/extproc/enginemetrics"
	"github.com/kvgate/kvgate/extproc/envoyaddr"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/internal/kvfleet"
	"github.com/kvgate/kvgate/internal/yamlconf"
)

// MaxFileBytes bounds the configuration file.
const MaxFileBytes = 4 << 20

// Config is the whole file.
type Config struct {
	Index   Index    `yaml:"index"`
	Indexer Indexer  `yaml:"indexer"`
	Extproc Extproc  `yaml:"extproc"`
	Models  []Model  `yaml:"models"`
	Engines []Engine `yaml:"engines"`
	Kvagent Kvagent  `yaml:"kvagent"`
	Planner Planner  `yaml:"planner"`
	Log     Log      `yaml:"log"`
}

// Log configures every kvgate process's log lines (library lines
// included: go-redis, klog, the standard log package).
type Log struct {
	// Format is "json" (default) or "text"; a --log-format flag overrides it.
	Format string `yaml:"format"`
}

// Extproc configures the `kvgate extproc` process (the Envoy-facing picker).
type Extproc struct {
	// Listen is the gRPC address Envoy's ext_proc filter connects to.
	Listen string `yaml:"listen"`
	// Admin serves /metrics, /healthz, /readyz and /debug/decisions; keep it
	// on loopback or a private interface.
	Admin        string `yaml:"admin"`
	MaxBodyBytes int    `yaml:"max_body_bytes"`
	// Policy is the picker's cost function: "dynamo" (Dynamo's default) or
	// "kvgate" (throughput-aware, decode-footprint and anti-herding terms).
	Policy      string  `yaml:"policy"`
	Temperature float64 `yaml:"temperature"`
	// Fallbacks is how many next-best endpoints follow the primary in the
	// routing metadata. Unset: 2 with envoy_routing override_host, 0 with
	// original_dst; an explicit 0 stays 0.
	Fallbacks int `yaml:"fallbacks"`
	// EnvoyRouting names what reads kvgate's routing metadata in Envoy, so
	// that kvgate sends what it can parse: "override_host" (default; the
	// ordered list primary,fallback,… walked on retry, see
	// envoy/envoy.yaml) or "original_dst" (exactly one ip:port: an
	// ORIGINAL_DST cluster parses the value with
	// parseInternetAddressAndPortNoThrow, and a list fails to parse).
	EnvoyRouting string `yaml:"envoy_routing"`
	// fallbacksSet records that the file set fallbacks, so that an
	// explicit 0 is not replaced by the default.
	fallbacksSet bool
	TierWeights  TierWeights `yaml:"tier_weights"`
	// IndexTimeout bounds one index match; past it the request is routed
	// on load alone (counted), never failed.
	IndexTimeout yamlconf.Duration `yaml:"index_timeout"`
	// ApproximateTTL: for engines without KV events, kvgate remembers its
	// own routing decisions as cache hints for this long.
	ApproximateTTL yamlconf.Duration `yaml:"approximate_ttl"`
	// ExpectedOutputTokens predicts a request's decode footprint when it
	// sets no max_tokens.
	ExpectedOutputTokens int       `yaml:"expected_output_tokens"`
	Admission            Admission `yaml:"admission"`
	PD                   PD        `yaml:"pd"`
	// SyncTimeout bounds how long an extproc holding the index in memory
	// waits, at start, for its engines' event streams to catch up (replay)
	// before reporting ready; past it, it reports ready anyway.
	SyncTimeout yamlconf.Duration `yaml:"sync_timeout"`
	// DecisionsKept is how many recent decisions /debug/decisions shows.
	DecisionsKept int         `yaml:"decisions_kept"`
	HealthCheck   HealthCheck `yaml:"health_check"`
	// EngineMetrics is declared by the scraper (enginemetrics.Config).
	EngineMetrics enginemetrics.Config `yaml:"engine_metrics"`
	Discovery     Discovery            `yaml:"discovery"`
	// Outlier ejects workers whose responses fail (passive health).
	Outlier Outlier `yaml:"outlier"`
	// SharedLoad shares in-flight accounting between extproc replicas.
	SharedLoad SharedLoad `yaml:"shared_load"`
	// TLS secures the ext_proc gRPC listener (Envoy ↔ extproc). Listen on a
	// non-loopback address requires it unless AllowPlaintext.
	TLS ServerTLS `yaml:"tls"`
	// AllowPlaintext accepts a non-loopback Listen without TLS: for a
	// deployment where something else authenticates and encrypts the
	// gateway's connection (an Istio sidecar's mTLS) and a NetworkPolicy
	// admits only the gateway. Off, such a config stops at start.
	AllowPlaintext bool `yaml:"allow_plaintext"`
	// Preprocess bounds the CPU and size of one request's preprocessing.
	Preprocess preprocess.Config `yaml:"preprocess"`
	// DebugHeader says who may get the x-kvgate-debug response header
	// (nobody by default).
	DebugHeader DebugHeader `yaml:"debug_header"`
	// AdminAuth protects the admin endpoints when they are not on loopback.
	AdminAuth AdminAuth `yaml:"admin_auth"`
	// Streams bounds what ext_proc streams may hold, each and together
	// (extproc_streams.go).
	Streams StreamLimits `yaml:"streams"`
	// GRPC bounds the ext_proc gRPC server's connections.
	GRPC ExtprocGRPC `yaml:"grpc"`
	// UnobservedHold: when Envoy shows kvgate nothing of the response
	// (response processing SKIP, envoy/envoy-buffered-failopen.yaml) it
	// closes the stream at the response headers and kvgate never sees the
	// end; the request's decode load stays booked this long after that.
	UnobservedHold yamlconf.Duration `yaml:"unobserved_hold"`
	// DrainGrace is how long, after SIGTERM, the server keeps serving new
	// streams with readiness already failing, so that Envoy's health checks
	// move new streams to other replicas before the GOAWAY.
	DrainGrace yamlconf.Duration `yaml:"drain_grace"`
}

// Discovery finds workers at run time instead of (or besides) engines:.
type Discovery struct {
	// Kubernetes watches pods (by label selector) or a Service's
	// EndpointSlices; declared by discovery (kubeselect.Config) and
	// validated when extproc starts it.
	Kubernetes *kubeselect.Config `yaml:"kubernetes"`
}

// HealthCheck probes each engine's HTTP health endpoint; a worker failing
// UnhealthyAfter probes in a row gets no requests until one succeeds.
type HealthCheck struct {
	Disabled bool `yaml:"disabled"`
	// Interval between probes of each engine.
	Interval       yamlconf.Duration `yaml:"interval"`
	Timeout        yamlconf.Duration `yaml:"timeout"`
	UnhealthyAfter int               `yaml:"unhealthy_after"`
	Path           string            `yaml:"path"`
}

// TierWeights credit cached blocks by where they live.
type TierWeights struct {
	Device   float64 `yaml:"device"`
	Host     float64 `yaml:"host"`
	Disk     float64 `yaml:"disk"`
	External float64 `yaml:"external"`
}

// Admission bounds per pool (served model); over a bound a request gets 429.
type Admission struct {
	MaxInflight            int   `yaml:"max_inflight"`              // 0 = unbounded
	MaxQueuedPrefillTokens int64 `yaml:"max_queued_prefill_tokens"` // 0 = unbounded
}

// PD configures conditional prefill/decode disaggregation.
type PD struct {
	Enabled           bool    `yaml:"enabled"`
	MinUncachedTokens int     `yaml:"min_uncached_tokens"`
	KVBytesPerToken   int64   `yaml:"kv_bytes_per_token"`
	TransferGBps      float64 `yaml:"transfer_gbps"`
}

// Index selects and tunes the fleet KV index backend.
type Index struct {
	// Backend is "memory" (default, embedded) or "redis".
	Backend string      `yaml:"backend"`
	Memory  MemoryIndex `yaml:"memory"`
	Redis   RedisIndex  `yaml:"redis"`
}

// MemoryIndex tunes the embedded index.
type MemoryIndex struct {
	// MaxEntries bounds (block, worker, tier) entries; least recently used
	// blocks are evicted beyond it.
	MaxEntries int64 `yaml:"max_entries"`
	Shards     int   `yaml:"shards"`
}

// RedisIndex points at a standalone Redis or a Redis Cluster.
type RedisIndex struct {
	// Addrs: one address = standalone unless Cluster is set; several = Cluster seeds.
	Addrs   []string `yaml:"addrs"`
	Cluster bool     `yaml:"cluster"`
	// PasswordEnv names the environment variable holding the password, so
	// that secrets stay out of the file.
	PasswordEnv string `yaml:"password_env"`
	// PasswordFile is a file holding the password (a mounted Secret),
	// re-read for every new connection so a rotated password applies
	// without a restart. At most one of password_env, password_file.
	PasswordFile string `yaml:"password_file"`
	// Username is the Redis 6+ ACL user (AUTH username password); empty
	// authenticates as the default user.
	Username string `yaml:"username"`
	// TLS encrypts the connections to Redis (and Cluster nodes).
	TLS       ClientTLS         `yaml:"tls"`
	DB        int               `yaml:"db"`
	Prefix    string            `yaml:"prefix"`
	BlockTTL  yamlconf.Duration `yaml:"block_ttl"`
	WorkerTTL yamlconf.Duration `yaml:"worker_ttl"`
}

// Indexer configures the `kvgate indexer` process.
type Indexer struct {
	// Listen is the HTTP address for /metrics, /healthz and /readyz.
	Listen        string            `yaml:"listen"`
	ReplayTimeout yamlconf.Duration `yaml:"replay_timeout"`
	// EngineDeadAfter: an engine whose event socket stays unreachable this
	// long has its entries dropped from the index (rebuilt when it returns).
	EngineDeadAfter yamlconf.Duration `yaml:"engine_dead_after"`
	// AdminAuth protects the listener when it is not on loopback.
	AdminAuth AdminAuth `yaml:"admin_auth"`
	// EventsBind turns on bind mode: the indexer binds this ZMQ endpoint
	// (tcp://host:port; rank r binds port+r) and engines whose events is
	// "bind" connect their PUB sockets to it, as vLLM does with an endpoint
	// without a wildcard and llm-d deploys its indexer. Each such engine is
	// told apart by its topic.
	EventsBind string `yaml:"events_bind"`
	// EventsBindAllow lists the networks (CIDR or single IP) whose engines
	// may connect to EventsBind besides loopback; required when EventsBind
	// is not a loopback address.
	EventsBindAllow []string `yaml:"events_bind_allow"`
}

// EventsBindMode is the engines[].events value of an engine that connects
// to indexer.events_bind instead of being dialed.
const EventsBindMode = kvfleet.EventsBindMode

// EventsBindAllowPrefixes parses indexer.events_bind_allow (validated).
func (x Indexer) EventsBindAllowPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range x.EventsBindAllow {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("indexer.events_bind_allow[%d]: %q is neither a CIDR nor an IP address", i, s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func (x Indexer) validateEventsBind() error {
	if x.EventsBind == "" {
		if len(x.EventsBindAllow) > 0 {
			return errors.New("indexer.events_bind_allow: set without indexer.events_bind")
		}
		return nil
	}
	u, err := url.Parse(x.EventsBind)
	if err != nil || u.Scheme != "tcp" || u.Host == "" || u.Path != "" {
		return fmt.Errorf("indexer.events_bind: %q: want tcp://host:port", x.EventsBind)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return fmt.Errorf("indexer.events_bind: %q: %v", x.EventsBind, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("indexer.events_bind: %q: bad port", x.EventsBind)
	}
	if _, err := x.EventsBindAllowPrefixes(); err != nil {
		return err
	}
	loopback := host == "localhost"
	if a, err := netip.ParseAddr(host); err == nil {
		loopback = a.IsLoopback()
	}
	if !loopback && len(x.EventsBindAllow) == 0 {
		return fmt.Errorf("indexer.events_bind: %q listens beyond loopback; list the engines' networks in indexer.events_bind_allow (anyone reaching the port could otherwise write routing state)", x.EventsBind)
	}
	return nil
}

// Model is one served model (models[]); the one declaration lives in the
// leaf kvfleet so that the preprocessor and the indexer take it without
// importing config.
type Model = kvfleet.Model

// Engine is one inference engine (vLLM/SGLang) publishing KV events.
type Engine struct {
	// Endpoint is the engine's HTTP ip:port: what requests are routed to,
	// and (with the DP rank) the worker's identity in the index.
	Endpoint string `yaml:"endpoint"`
	Model    string `yaml:"model"`
	// Events is the ZMQ PUB endpoint (tcp://host:port) of DP rank 0; rank r
	// publishes on port+r, as vLLM does.
	Events string `yaml:"events"`
	// Replay is the ZMQ ROUTER replay endpoint of rank 0 (optional; port+r likewise).
	Replay  string `yaml:"replay"`
	DPRanks int    `yaml:"dp_ranks"`
	Topic   string `yaml:"topic"`
	// Role is "both" (default, also when empty), "prefill" or "decode".
	Role string `yaml:"role"`
	// Draining workers get no new requests.
	Draining bool `yaml:"draining"`
	// TierEvents is the ZMQ PUB endpoint (tcp://host:port) of the node's
	// kvagent that serves this engine (rank r: port+r): its host- and
	// disk-tier residency, credited to this worker as a second event source.
	// Its gaps and restarts clear only those tiers, never the GPU blocks.
	TierEvents string `yaml:"tier_events"`
	// TierReplay is the kvagent's replay endpoint (optional; port+r likewise).
	TierReplay string `yaml:"tier_replay"`
}

// Default is the embedded configuration `make run` uses: in-memory index,
// no engines (the demo brings its own).
func Default() Config {
	c := Config{}
	c.applyDefaults()
	return c
}

// Load reads and validates a configuration file.
func Load(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	c, err := Parse(f)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes and validates a configuration document.
func Parse(r io.Reader) (Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return Config{}, err
	}
	if len(data) > MaxFileBytes {
		return Config{}, fmt.Errorf("larger than %d bytes", MaxFileBytes)
	}
	if err := checkDocument(data); err != nil {
		return Config{}, err
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, err
	}
	c.Extproc.fallbacksSet = fallbacksSet(data)
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func (c *Config) applyDefaults() {
	if c.Index.Backend == "" {
		c.Index.Backend = "memory"
	}
	if c.Index.Memory.MaxEntries == 0 {
		c.Index.Memory.MaxEntries = 1 << 24
	}
	if c.Index.Redis.Prefix == "" {
		c.Index.Redis.Prefix = "kvgate:"
	}
	if c.Index.Redis.BlockTTL == 0 {
		c.Index.Redis.BlockTTL = yamlconf.Duration(time.Hour)
	}
	if c.Index.Redis.WorkerTTL == 0 {
		c.Index.Redis.WorkerTTL = yamlconf.Duration(30 * time.Second)
	}
	if c.Indexer.Listen == "" {
		c.Indexer.Listen = "127.0.0.1:9400"
	}
	if c.Indexer.ReplayTimeout == 0 {
		c.Indexer.ReplayTimeout = yamlconf.Duration(2 * time.Second)
	}
	if c.Indexer.EngineDeadAfter == 0 {
		c.Indexer.EngineDeadAfter = yamlconf.Duration(10 * time.Second)
	}
	for i := range c.Engines {
		if c.Engines[i].DPRanks == 0 {
			c.Engines[i].DPRanks = 1
		}
		if c.Engines[i].Role == "" {
			c.Engines[i].Role = "both"
		}
	}
	x := &c.Extproc
	if x.Listen == "" {
		x.Listen = "127.0.0.1:9002"
	}
	if x.Admin == "" {
		x.Admin = "127.0.0.1:9003"
	}
	if x.MaxBodyBytes == 0 {
		x.MaxBodyBytes = 8 << 20
	}
	if x.Policy == "" {
		x.Policy = "kvgate"
	}
	if x.EnvoyRouting == "" {
		x.EnvoyRouting = RoutingOverrideHost
	}
	if x.Fallbacks == 0 && !x.fallbacksSet && x.EnvoyRouting == RoutingOverrideHost {
		x.Fallbacks = 2
	}
	x.Streams.applyDefaults()
	x.GRPC.applyDefaults()
	if x.DrainGrace == 0 {
		x.DrainGrace = yamlconf.Duration(5 * time.Second)
	}
	if x.UnobservedHold == 0 {
		x.UnobservedHold = yamlconf.Duration(10 * time.Second)
	}
	if x.TierWeights == (TierWeights{}) {
		x.TierWeights = TierWeights{Device: 1, Host: 0.75, Disk: 0.25}
	}
	if x.IndexTimeout == 0 {
		x.IndexTimeout = yamlconf.Duration(50 * time.Millisecond)
	}
	if x.ApproximateTTL == 0 {
		x.ApproximateTTL = yamlconf.Duration(120 * time.Second)
	}
	if x.ExpectedOutputTokens == 0 {
		x.ExpectedOutputTokens = 256
	}
	if x.PD.MinUncachedTokens == 0 {
		x.PD.MinUncachedTokens = 1024
	}
	if x.PD.KVBytesPerToken == 0 {
		x.PD.KVBytesPerToken = 131072
	}
	if x.PD.TransferGBps == 0 {
		x.PD.TransferGBps = 10
	}
	if x.SyncTimeout == 0 {
		x.SyncTimeout = yamlconf.Duration(10 * time.Second)
	}
	if x.DecisionsKept == 0 {
		x.DecisionsKept = 256
	}
	x.EngineMetrics.ApplyDefaults()
	x.Outlier.applyDefaults()
	x.SharedLoad.applyDefaults()
	x.Preprocess.ApplyDefaults()
	c.Kvagent.ApplyDefaults()
	c.Planner.ApplyDefaults()
	hc := &x.HealthCheck
	if hc.Interval == 0 {
		hc.Interval = yamlconf.Duration(time.Second)
	}
	if hc.Timeout == 0 {
		hc.Timeout = yamlconf.Duration(time.Second)
	}
	if hc.UnhealthyAfter == 0 {
		hc.UnhealthyAfter = 2
	}
	if hc.Path == "" {
		hc.Path = "/health"
	}
}

// Validate reports the first invalid value, naming its path in the file.
// It rewrites engine endpoints to Envoy's canonical ip:port
// (extproc/envoyaddr).
func (c *Config) Validate() error {
	if f := c.Log.Format; f != "" && f != "json" && f != "text" {
		return fmt.Errorf("log.format: %q is not one of json, text", f)
	}
	switch c.Index.Backend {
	case "memory":
		if c.Index.Memory.MaxEntries < 0 {
			return errors.New("index.memory.max_entries: must be positive")
		}
		if c.Index.Memory.Shards < 0 || c.Index.Memory.Shards > 4096 {
			return errors.New("index.memory.shards: must be in 0..4096 (0 = default)")
		}
	case "redis":
		r := c.Index.Redis
		if len(r.Addrs) == 0 {
			return errors.New("index.redis.addrs: at least one host:port is required with backend redis")
		}
		for i, a := range r.Addrs {
			if err := checkHostPort(a); err != nil {
				return fmt.Errorf("index.redis.addrs[%d]: %w", i, err)
			}
		}
		if r.WorkerTTL.D() < time.Second {
			return errors.New("index.redis.worker_ttl: must be at least 1s")
		}
		if r.PasswordEnv != "" {
			if _, ok := os.LookupEnv(r.PasswordEnv); !ok {
				return fmt.Errorf("index.redis.password_env: environment variable %s is not set", r.PasswordEnv)
			}
		}
		if err := r.validateAuth("index.redis"); err != nil {
			return err
		}
	default:
		return fmt.Errorf("index.backend: %q is not one of memory, redis", c.Index.Backend)
	}
	if err := checkHostPort(c.Indexer.Listen); err != nil {
		return fmt.Errorf("indexer.listen: %w", err)
	}
	if err := c.Indexer.AdminAuth.Validate("indexer.admin_auth"); err != nil {
		return err
	}
	if err := c.Indexer.AdminAuth.CheckExposure("indexer.listen", c.Indexer.Listen, "indexer.admin_auth"); err != nil {
		return err
	}
	if err := c.Indexer.validateEventsBind(); err != nil {
		return err
	}
	if err := c.Extproc.validate(); err != nil {
		return err
	}
	if err := c.Extproc.Outlier.validate("extproc.outlier"); err != nil {
		return err
	}
	if err := c.Extproc.SharedLoad.validate("extproc.shared_load"); err != nil {
		return err
	}
	if err := c.Extproc.TLS.Validate("extproc.tls"); err != nil {
		return err
	}
	if err := c.Extproc.checkListenExposure(); err != nil {
		return err
	}
	if err := c.Extproc.Preprocess.Validate("extproc.preprocess"); err != nil {
		return err
	}
	if err := c.Extproc.DebugHeader.validate("extproc.debug_header"); err != nil {
		return err
	}
	if err := c.Extproc.AdminAuth.Validate("extproc.admin_auth"); err != nil {
		return err
	}
	if err := c.Extproc.AdminAuth.CheckExposure("extproc.admin", c.Extproc.Admin, "extproc.admin_auth"); err != nil {
		return err
	}
	if err := c.Kvagent.Validate("kvagent"); err != nil {
		return err
	}
	if err := c.Planner.validate("planner"); err != nil {
		return err
	}
	models := map[string]bool{}
	for i, m := range c.Models {
		p := fmt.Sprintf("models[%d]", i)
		if m.Name == "" {
			return fmt.Errorf("%s.name: required", p)
		}
		if models[m.Name] {
			return fmt.Errorf("%s.name: duplicate model %q", p, m.Name)
		}
		models[m.Name] = true
		if m.BlockSize <= 0 || m.BlockSize > 1<<16 {
			return fmt.Errorf("%s.block_size: must be in 1..65536, got %d", p, m.BlockSize)
		}
		for j, l := range m.LoRAs {
			if l == "" || models[l] {
				return fmt.Errorf("%s.loras[%d]: empty or duplicate name %q", p, j, l)
			}
			models[l] = true
		}
	}
	seen := map[string]bool{}
	bindTopics := map[string]int{}
	for i, e := range c.Engines {
		p := fmt.Sprintf("engines[%d]", i)
		ep, err := envoyaddr.Canonical(e.Endpoint)
		if err != nil {
			return fmt.Errorf("%s.endpoint: %w", p, err)
		}
		// Envoy's host map and ORIGINAL_DST know one spelling of each
		// address; every later use (routing metadata, the index's worker
		// identity) takes this one.
		c.Engines[i].Endpoint, e.Endpoint = ep, ep
		if seen[e.Endpoint] {
			return fmt.Errorf("%s.endpoint: duplicate engine %s", p, e.Endpoint)
		}
		seen[e.Endpoint] = true
		if !models[e.Model] || c.Model(e.Model) == nil {
			return fmt.Errorf("%s.model: %q is not a base model listed under models", p, e.Model)
		}
		if e.DPRanks < 1 || e.DPRanks > 1024 {
			return fmt.Errorf("%s.dp_ranks: must be in 1..1024", p)
		}
		if e.Events == EventsBindMode {
			if c.Indexer.EventsBind == "" {
				return fmt.Errorf("%s.events: %q needs indexer.events_bind", p, EventsBindMode)
			}
			if e.Topic == "" {
				return fmt.Errorf("%s.topic: required with events %q (it tells this engine's batches from the others' on the bound socket)", p, EventsBindMode)
			}
			if j, dup := bindTopics[e.Topic]; dup {
				return fmt.Errorf("%s.topic: %q is also engines[%d]'s", p, e.Topic, j)
			}
			bindTopics[e.Topic] = i
			if _, _, err := ZMQEndpoint(c.Indexer.EventsBind, e.DPRanks-1); err != nil {
				return fmt.Errorf("%s.dp_ranks: indexer.events_bind plus rank %d: %w", p, e.DPRanks-1, err)
			}
		} else if e.Events != "" {
			if _, _, err := ZMQEndpoint(e.Events, 0); err != nil {
				return fmt.Errorf("%s.events: %w", p, err)
			}
		} else if e.Replay != "" {
			return fmt.Errorf("%s.replay: set without events", p)
		}
		if _, err := kvfleet.ParseRole(e.Role); err != nil {
			return fmt.Errorf("%s.role: %w", p, err)
		}
		if e.Replay != "" {
			if _, _, err := ZMQEndpoint(e.Replay, 0); err != nil {
				return fmt.Errorf("%s.replay: %w", p, err)
			}
		}
		if e.TierEvents != "" {
			if _, _, err := ZMQEndpoint(e.TierEvents, e.DPRanks-1); err != nil {
				return fmt.Errorf("%s.tier_events: %w", p, err)
			}
			if e.TierEvents == e.Events {
				return fmt.Errorf("%s.tier_events: same endpoint as events", p)
			}
		} else if e.TierReplay != "" {
			return fmt.Errorf("%s.tier_replay: set without tier_events", p)
		}
		if e.TierReplay != "" {
			if _, _, err := ZMQEndpoint(e.TierReplay, e.DPRanks-1); err != nil {
				return fmt.Errorf("%s.tier_replay: %w", p, err)
			}
		}
	}
	return nil
}

// Model returns the base model named name, or nil.
func (c *Config) Model(name string) *Model {
	for i := range c.Models {
		if c.Models[i].Name == name {
			return &c.Models[i]
		}
	}
	return nil
}

// ZMQEndpoint is confaddr.ZMQEndpoint (where components' configs find it).
func ZMQEndpoint(ep string, rank int) (string, int, error) { return confaddr.ZMQEndpoint(ep, rank) }

func checkHostPort(s string) error { return confaddr.CheckHostPort(s) }

// checkListenExposure refuses an ext_proc listener beyond loopback that
// serves plaintext: whoever reaches it can route requests anywhere in the
// fleet and read every decision's answer, so it must be TLS (mTLS for the
// gateway) unless the config says something else protects it.
func (x *Extproc) checkListenExposure() error {
	if IsLoopback(x.Listen) || x.TLS.Enabled() || x.AllowPlaintext {
		return nil
	}
	return fmt.Errorf("extproc.listen: %q is not a loopback address and extproc.tls has no cert_file: serve TLS "+
		"(extproc.tls.cert_file, key_file, and client_ca_file with require_client_cert for the gateway), or set "+
		"extproc.allow_plaintext: true where a mesh sidecar's mTLS and a NetworkPolicy protect the port", x.Listen)
}

func (x *Extproc) validate() error {
	if err := checkHostPort(x.Listen); err != nil {
		return fmt.Errorf("extproc.listen: %w", err)
	}
	if err := checkHostPort(x.Admin); err != nil {
		return fmt.Errorf("extproc.admin: %w", err)
	}
	switch {
	case x.MaxBodyBytes < 1024 || x.MaxBodyBytes > 1<<30:
		return fmt.Errorf("extproc.max_body_bytes: must be in 1024..%d", 1<<30)
	case x.Policy != "dynamo" && x.Policy != "kvgate":
		return fmt.Errorf("extproc.policy: %q is not one of dynamo, kvgate", x.Policy)
	case x.Temperature < 0 || x.Temperature > 100:
		return errors.New("extproc.temperature: must be in 0..100")
	case x.Fallbacks < 0 || x.Fallbacks > 16:
		return errors.New("extproc.fallbacks: must be in 0..16")
	case x.EnvoyRouting != RoutingOverrideHost && x.EnvoyRouting != RoutingOriginalDst:
		return fmt.Errorf("extproc.envoy_routing: %q is not one of %s, %s", x.EnvoyRouting, RoutingOverrideHost, RoutingOriginalDst)
	case x.EnvoyRouting == RoutingOriginalDst && x.Fallbacks != 0:
		return fmt.Errorf("extproc.fallbacks: must be 0 with extproc.envoy_routing %s, got %d: an ORIGINAL_DST cluster parses the destination as one ip:port (original_dst_cluster.cc metadataOverrideHost), so a list would fail every request with 503", RoutingOriginalDst, x.Fallbacks)
	case x.TierWeights.Device < 0 || x.TierWeights.Host < 0 || x.TierWeights.Disk < 0 || x.TierWeights.External < 0:
		return errors.New("extproc.tier_weights: weights must be >= 0")
	case x.IndexTimeout.D() < time.Millisecond:
		return errors.New("extproc.index_timeout: must be at least 1ms")
	case x.ExpectedOutputTokens < 0:
		return errors.New("extproc.expected_output_tokens: must be >= 0")
	case x.Admission.MaxInflight < 0 || x.Admission.MaxQueuedPrefillTokens < 0:
		return errors.New("extproc.admission: bounds must be >= 0 (0 = unbounded)")
	case x.PD.MinUncachedTokens < 0 || x.PD.KVBytesPerToken < 0 || x.PD.TransferGBps <= 0:
		return errors.New("extproc.pd: min_uncached_tokens and kv_bytes_per_token must be >= 0, transfer_gbps > 0")
	case x.DecisionsKept < 0 || x.DecisionsKept > 100000:
		return errors.New("extproc.decisions_kept: must be in 0..100000")
	case !x.HealthCheck.Disabled && (x.HealthCheck.Timeout.D() <= 0 || x.HealthCheck.UnhealthyAfter < 1 || !strings.HasPrefix(x.HealthCheck.Path, "/")):
		return errors.New("extproc.health_check: timeout > 0, unhealthy_after >= 1 and an absolute path are required")
	case x.DrainGrace.D() > 10*time.Minute:
		return errors.New("extproc.drain_grace: must be at most 10m")
	case x.UnobservedHold.D() > 10*time.Minute:
		return errors.New("extproc.unobserved_hold: must be at most 10m")
	}
	if err := x.Streams.validate("extproc.streams", x.MaxBodyBytes); err != nil {
		return err
	}
	return x.GRPC.validate("extproc.grpc")
}
