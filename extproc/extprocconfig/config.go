// Package extprocconfig is the `extproc:` section of kvgate's
// configuration file: the keys the `kvgate extproc` process reads, their
// defaults (declared once, here) and their validation. It composes the
// sections other components declare (preprocess.Config,
// enginemetrics.Config, kubeselect.Config, the internal/secretfiles TLS
// and admin-auth types).
//
// It is a package of its own, not part of extproc, because config
// composes it and every kvgate process parses the file: declared in
// extproc, the section would link the whole request path into each of
// them. extproc takes it (RouterConfig), not the file (issue 18).
package extprocconfig

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/extproc/enginemetrics"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/internal/yamlconf"
)

// Config configures the `kvgate extproc` process (the Envoy-facing picker).
type Config struct {
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
	// explicit 0 is not replaced by the default (KeepExplicitFallbacks).
	fallbacksSet bool
	TierWeights  TierWeights `yaml:"tier_weights"`
	// Picker switches and weighs the cost's listed terms (picker.go).
	Picker Picker `yaml:"picker"`
	// IndexTimeout bounds one index match; past it the request is routed
	// on load alone (counted), never failed.
	IndexTimeout yamlconf.Duration `yaml:"index_timeout"`
	// ApproximateTTL: for engines without KV events, kvgate remembers its
	// own routing decisions as cache hints for this long (default 120 s,
	// the TTL of Dynamo's approximate KV indexer).
	ApproximateTTL yamlconf.Duration `yaml:"approximate_ttl"`
	// ExpectedOutputTokens predicts a request's decode footprint when it
	// sets no max_tokens.
	ExpectedOutputTokens int       `yaml:"expected_output_tokens"`
	Admission            Admission `yaml:"admission"`
	// FlowControl holds requests past saturation (flowcontrol.go).
	FlowControl FlowControl `yaml:"flow_control"`
	PD          PD          `yaml:"pd"`
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
	// HealthyPanic: below this share of healthy workers in a pool, route
	// to all of them (Envoy's healthy_panic_threshold; healthypanic.go).
	HealthyPanic HealthyPanic `yaml:"healthy_panic"`
	// SharedLoad shares in-flight accounting between extproc replicas.
	SharedLoad SharedLoad `yaml:"shared_load"`
	// TLS secures the ext_proc gRPC listener (Envoy ↔ extproc). Listen on a
	// non-loopback address requires it unless AllowPlaintext.
	TLS secretfiles.ServerTLS `yaml:"tls"`
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
	AdminAuth secretfiles.AdminAuth `yaml:"admin_auth"`
	// Streams bounds what ext_proc streams may hold, each and together
	// (streams.go).
	Streams StreamLimits `yaml:"streams"`
	// GRPC bounds the ext_proc gRPC server's connections.
	GRPC GRPC `yaml:"grpc"`
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
	// InferencePool makes kvgate the endpoint picker of one Gateway API
	// Inference Extension InferencePool (kubeselect.InferencePool);
	// exclusive with Kubernetes, validated when extproc starts it.
	InferencePool *kubeselect.InferencePool `yaml:"inference_pool"`
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
//
// A request's priority (its InferenceObjective's, extproc/priority.go)
// decides who is shed first: GIE and llm-d call a request sheddable when
// its priority is below 0 and drop only those when the pool is saturated
// (GIE v1.5.0 pkg/epp/requestcontrol/admission.go, IsSheddable). kvgate's
// bounds are its saturation: a sheddable request is shed once the pool
// reaches SheddableFraction of a bound, the others at the bound itself.
type Admission struct {
	MaxInflight            int   `yaml:"max_inflight"`              // 0 = unbounded
	MaxQueuedPrefillTokens int64 `yaml:"max_queued_prefill_tokens"` // 0 = unbounded
	// SheddableFraction of each bound is where sheddable requests
	// (priority < 0) are shed; default 0.8, 1 = at the bound like the rest.
	SheddableFraction float64 `yaml:"sheddable_fraction"`
	// PriorityHeader names a request header whose integer value is taken as
	// the request's priority, overriding its objective's. Empty (default) =
	// none: a client must not pick its own priority, so set it only where
	// the gateway writes (or strips) that header on every request.
	PriorityHeader string `yaml:"priority_header"`
}

// PD configures conditional prefill/decode disaggregation.
type PD struct {
	Enabled           bool    `yaml:"enabled"`
	MinUncachedTokens int     `yaml:"min_uncached_tokens"`
	KVBytesPerToken   int64   `yaml:"kv_bytes_per_token"`
	TransferGBps      float64 `yaml:"transfer_gbps"`
}

// Defaults for Config (the streams' and grpc's are in streams.go, the
// outlier's and shared load's in their files).
const (
	DefaultListen               = "127.0.0.1:9002"
	DefaultSheddableFraction    = 0.8
	DefaultAdmin                = "127.0.0.1:9003"
	DefaultMaxBodyBytes         = 8 << 20
	DefaultPolicy               = "kvgate"
	DefaultFallbacks            = 2 // with RoutingOverrideHost only
	DefaultDrainGrace           = 5 * time.Second
	DefaultUnobservedHold       = 10 * time.Second
	DefaultIndexTimeout         = 50 * time.Millisecond
	DefaultApproximateTTL       = 120 * time.Second
	DefaultExpectedOutputTokens = 256
	DefaultPDMinUncachedTokens  = 1024
	DefaultPDKVBytesPerToken    = 131072
	DefaultPDTransferGBps       = 10
	DefaultSyncTimeout          = 10 * time.Second
	DefaultDecisionsKept        = 256
	DefaultHealthInterval       = time.Second
	DefaultHealthTimeout        = time.Second
	DefaultHealthUnhealthyAfter = 2
	DefaultHealthPath           = "/health"
)

// DefaultTierWeights credit a host-tier block three quarters and a
// disk-tier block a quarter of a GPU-resident one.
var DefaultTierWeights = TierWeights{Device: 1, Host: 0.75, Disk: 0.25}

// KeepExplicitFallbacks records that the file set fallbacks, so that an
// explicit 0 survives ApplyDefaults.
func (x *Config) KeepExplicitFallbacks() { x.fallbacksSet = true }

// FallbacksSet reports whether a document sets extproc.fallbacks (the
// caller then calls KeepExplicitFallbacks). The document has already been
// decoded strictly; this second look only asks whether the key is there.
func FallbacksSet(data []byte) bool {
	var doc struct {
		Extproc struct {
			Fallbacks *int `yaml:"fallbacks"`
		} `yaml:"extproc"`
	}
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return false
	}
	return doc.Extproc.Fallbacks != nil
}

// ApplyDefaults fills every unset key, the composed sections' included.
func (x *Config) ApplyDefaults() {
	if x.Admission.SheddableFraction == 0 {
		x.Admission.SheddableFraction = DefaultSheddableFraction
	}
	if x.Listen == "" {
		x.Listen = DefaultListen
	}
	if x.Admin == "" {
		x.Admin = DefaultAdmin
	}
	if x.MaxBodyBytes == 0 {
		x.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if x.Policy == "" {
		x.Policy = DefaultPolicy
	}
	if x.EnvoyRouting == "" {
		x.EnvoyRouting = RoutingOverrideHost
	}
	if x.Fallbacks == 0 && !x.fallbacksSet && x.EnvoyRouting == RoutingOverrideHost {
		x.Fallbacks = DefaultFallbacks
	}
	x.Streams.applyDefaults()
	x.GRPC.applyDefaults()
	if x.DrainGrace == 0 {
		x.DrainGrace = yamlconf.Duration(DefaultDrainGrace)
	}
	if x.UnobservedHold == 0 {
		x.UnobservedHold = yamlconf.Duration(DefaultUnobservedHold)
	}
	if x.TierWeights == (TierWeights{}) {
		x.TierWeights = DefaultTierWeights
	}
	if x.IndexTimeout == 0 {
		x.IndexTimeout = yamlconf.Duration(DefaultIndexTimeout)
	}
	if x.ApproximateTTL == 0 {
		x.ApproximateTTL = yamlconf.Duration(DefaultApproximateTTL)
	}
	if x.ExpectedOutputTokens == 0 {
		x.ExpectedOutputTokens = DefaultExpectedOutputTokens
	}
	if x.PD.MinUncachedTokens == 0 {
		x.PD.MinUncachedTokens = DefaultPDMinUncachedTokens
	}
	if x.PD.KVBytesPerToken == 0 {
		x.PD.KVBytesPerToken = DefaultPDKVBytesPerToken
	}
	if x.PD.TransferGBps == 0 {
		x.PD.TransferGBps = DefaultPDTransferGBps
	}
	if x.SyncTimeout == 0 {
		x.SyncTimeout = yamlconf.Duration(DefaultSyncTimeout)
	}
	if x.DecisionsKept == 0 {
		x.DecisionsKept = DefaultDecisionsKept
	}
	x.Picker.applyDefaults()
	x.EngineMetrics.ApplyDefaults()
	x.Outlier.applyDefaults()
	x.FlowControl.applyDefaults()
	x.HealthyPanic.applyDefaults()
	x.SharedLoad.applyDefaults()
	x.Preprocess.ApplyDefaults()
	hc := &x.HealthCheck
	if hc.Interval == 0 {
		hc.Interval = yamlconf.Duration(DefaultHealthInterval)
	}
	if hc.Timeout == 0 {
		hc.Timeout = yamlconf.Duration(DefaultHealthTimeout)
	}
	if hc.UnhealthyAfter == 0 {
		hc.UnhealthyAfter = DefaultHealthUnhealthyAfter
	}
	if hc.Path == "" {
		hc.Path = DefaultHealthPath
	}
}

// Validate reports the first invalid value, naming its key path (path is
// the section's, "extproc" in the file). The discovery section is
// validated when extproc starts discovery.
func (x *Config) Validate(path string) error {
	if err := x.validateOwn(path); err != nil {
		return err
	}
	if err := x.Picker.validate(path + ".picker"); err != nil {
		return err
	}
	if err := x.FlowControl.validate(path + ".flow_control"); err != nil {
		return err
	}
	if err := x.Outlier.validate(path + ".outlier"); err != nil {
		return err
	}
	if err := x.HealthyPanic.validate(path + ".healthy_panic"); err != nil {
		return err
	}
	if err := x.SharedLoad.validate(path + ".shared_load"); err != nil {
		return err
	}
	if err := x.TLS.Validate(path + ".tls"); err != nil {
		return err
	}
	if err := x.checkListenExposure(path); err != nil {
		return err
	}
	if err := x.Preprocess.Validate(path + ".preprocess"); err != nil {
		return err
	}
	if err := x.DebugHeader.validate(path + ".debug_header"); err != nil {
		return err
	}
	if err := x.AdminAuth.Validate(path + ".admin_auth"); err != nil {
		return err
	}
	return x.AdminAuth.CheckExposure(path+".admin", x.Admin, path+".admin_auth")
}

// checkListenExposure refuses an ext_proc listener beyond loopback that
// serves plaintext: whoever reaches it can route requests anywhere in the
// fleet and read every decision's answer, so it must be TLS (mTLS for the
// gateway) unless the config says something else protects it.
func (x *Config) checkListenExposure(path string) error {
	if confaddr.IsLoopback(x.Listen) || x.TLS.Enabled() || x.AllowPlaintext {
		return nil
	}
	return fmt.Errorf("%[1]s.listen: %[2]q is not a loopback address and %[1]s.tls has no cert_file: serve TLS "+
		"(%[1]s.tls.cert_file, key_file, and client_ca_file with require_client_cert for the gateway), or set "+
		"%[1]s.allow_plaintext: true where a mesh sidecar's mTLS and a NetworkPolicy protect the port", path, x.Listen)
}

// validHeaderName: an RFC 9110 token in lower case (ext_proc hands kvgate
// the request headers lower-cased, server.Request.Headers), no pseudo-header.
func validHeaderName(h string) bool {
	if h == "" || len(h) > 256 {
		return false
	}
	for _, c := range h {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', strings.ContainsRune("!#$%&'*+-.^_`|~", c):
		default:
			return false
		}
	}
	return true
}

// validateOwn checks the section's own keys, the streams and grpc bounds.
func (x *Config) validateOwn(path string) error {
	if err := confaddr.CheckHostPort(x.Listen); err != nil {
		return fmt.Errorf("%s.listen: %w", path, err)
	}
	if err := confaddr.CheckHostPort(x.Admin); err != nil {
		return fmt.Errorf("%s.admin: %w", path, err)
	}
	switch {
	case x.MaxBodyBytes < 1024 || x.MaxBodyBytes > 1<<30:
		return fmt.Errorf("%s.max_body_bytes: must be in 1024..%d", path, 1<<30)
	case x.Policy != "dynamo" && x.Policy != "kvgate":
		return fmt.Errorf("%s.policy: %q is not one of dynamo, kvgate", path, x.Policy)
	case x.Temperature < 0 || x.Temperature > 100:
		return errors.New(path + ".temperature: must be in 0..100")
	case x.Fallbacks < 0 || x.Fallbacks > 16:
		return errors.New(path + ".fallbacks: must be in 0..16")
	case x.EnvoyRouting != RoutingOverrideHost && x.EnvoyRouting != RoutingOriginalDst:
		return fmt.Errorf("%s.envoy_routing: %q is not one of %s, %s", path, x.EnvoyRouting, RoutingOverrideHost, RoutingOriginalDst)
	case x.EnvoyRouting == RoutingOriginalDst && x.Fallbacks != 0:
		return fmt.Errorf("%[1]s.fallbacks: must be 0 with %[1]s.envoy_routing %[2]s, got %[3]d: an ORIGINAL_DST cluster parses the destination as one ip:port (original_dst_cluster.cc metadataOverrideHost), so a list would fail every request with 503", path, RoutingOriginalDst, x.Fallbacks)
	case x.TierWeights.Device < 0 || x.TierWeights.Host < 0 || x.TierWeights.Disk < 0 || x.TierWeights.External < 0:
		return errors.New(path + ".tier_weights: weights must be >= 0")
	case x.IndexTimeout.D() < time.Millisecond:
		return errors.New(path + ".index_timeout: must be at least 1ms")
	case x.ExpectedOutputTokens < 0:
		return errors.New(path + ".expected_output_tokens: must be >= 0")
	case x.Admission.MaxInflight < 0 || x.Admission.MaxQueuedPrefillTokens < 0:
		return errors.New(path + ".admission: bounds must be >= 0 (0 = unbounded)")
	case x.Admission.SheddableFraction <= 0 || x.Admission.SheddableFraction > 1:
		return fmt.Errorf("%s.admission.sheddable_fraction: %g outside (0, 1]", path, x.Admission.SheddableFraction)
	case x.Admission.PriorityHeader != "" && !validHeaderName(x.Admission.PriorityHeader):
		return fmt.Errorf("%s.admission.priority_header: %q is not a lower-case HTTP header name", path, x.Admission.PriorityHeader)
	case x.PD.MinUncachedTokens < 0 || x.PD.KVBytesPerToken < 0 || x.PD.TransferGBps <= 0:
		return errors.New(path + ".pd: min_uncached_tokens and kv_bytes_per_token must be >= 0, transfer_gbps > 0")
	case x.DecisionsKept < 0 || x.DecisionsKept > 100000:
		return errors.New(path + ".decisions_kept: must be in 0..100000")
	case !x.HealthCheck.Disabled && (x.HealthCheck.Timeout.D() <= 0 || x.HealthCheck.UnhealthyAfter < 1 || !strings.HasPrefix(x.HealthCheck.Path, "/")):
		return errors.New(path + ".health_check: timeout > 0, unhealthy_after >= 1 and an absolute path are required")
	case x.DrainGrace.D() > 10*time.Minute:
		return errors.New(path + ".drain_grace: must be at most 10m")
	case x.UnobservedHold.D() > 10*time.Minute:
		return errors.New(path + ".unobserved_hold: must be at most 10m")
	}
	if err := x.Streams.validate(path+".streams", path+".max_body_bytes", x.MaxBodyBytes); err != nil {
		return err
	}
	return x.GRPC.validate(path + ".grpc")
}
