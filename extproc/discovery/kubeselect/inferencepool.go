package kubeselect

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// InferencePoolGroup is the API group of the InferencePool kvgate follows
// (inference.networking.k8s.io/v1, GIE v1.x api/v1). GIE's own picker
// takes only this group too (v1.5.0 pkg/epp/server/options.go, flag
// --pool-group: "Only `inference.networking.k8s.io/v1` is currently
// supported").
const InferencePoolGroup = "inference.networking.k8s.io"

// Per-pod annotations that override InferencePool.EventsPort and
// ReplayPort for that pod: the KV-event PUB and replay ROUTER ports of the
// pod's first target port (target port i uses the value + i). "0" says the
// pod publishes no KV events (it is routed in approximate mode).
const (
	EventsPortAnnotation = "kvgate.io/events-port"
	ReplayPortAnnotation = "kvgate.io/replay-port"
)

// MaxTargetPorts is the most target ports an InferencePool carries (GIE
// v1.6.2 api/v1 InferencePoolSpec.TargetPorts: +kubebuilder:validation:MaxItems=8).
const MaxTargetPorts = 8

// InferencePool is the declaration of extproc.discovery.inference_pool:
// kvgate as the endpoint picker of one Gateway API Inference Extension
// InferencePool. The workers are the pool's ready pods (its selector, in
// its namespace) times its target ports: pod IP:port i is one worker. The
// pool's selector and ports are read from the pool at run time, so editing
// the pool re-selects without restarting kvgate.
//
// Where each worker's KV events come from. The InferencePool says nothing
// about them, so kvgate uses a port convention with a per-pod override:
// the worker on target port i (in the pool's order) publishes on
// EventsPort + i and answers replay on ReplayPort + i, the offset vLLM
// gives its data-parallel ranks (vllm/distributed/kv_events.py,
// ZmqEventPublisher.offset_endpoint_port), which is what a multi-port pool
// is for (one port per DP rank). A pod annotated kvgate.io/events-port /
// kvgate.io/replay-port uses its annotation's value as the base instead;
// "0" = none. A pod whose annotation is not a port, or whose last port
// would pass 65535, is left out and counted (the reason is logged).
type InferencePool struct {
	// Kubeconfig is the client's kubeconfig file; empty = in-cluster.
	Kubeconfig string `yaml:"kubeconfig"`
	// Name and Namespace name the InferencePool (GIE's --pool-name and
	// --pool-namespace). An empty namespace is the NAMESPACE environment
	// variable, else "default", as GIE's picker resolves it (v1.5.0
	// cmd/epp/runner/runner.go resolvePoolNamespace); the composition
	// point resolves it, not this package.
	Name      string `yaml:"name"`
	Namespace string `yaml:"namespace"`
	// Group is the pool's API group (GIE's --pool-group); empty =
	// InferencePoolGroup, the only one accepted.
	Group string `yaml:"group"`

	// EventsPort and ReplayPort are the KV-event and replay ports of the
	// worker on the pool's first target port; 0 = none (see above).
	EventsPort int `yaml:"events_port"`
	ReplayPort int `yaml:"replay_port"`

	// ModelLabel and RoleLabel name the pod labels holding the served model
	// and the role, as in extproc.discovery.kubernetes; Model is the model
	// of pods without the label ("" = such pods are skipped and counted).
	ModelLabel string `yaml:"model_label"`
	RoleLabel  string `yaml:"role_label"`
	Model      string `yaml:"model"`
	// EngineLabel and DefaultEngine: each pod's engine kind, as in
	// extproc.discovery.kubernetes (GIE's engine-type label by default).
	EngineLabel   string `yaml:"engine_label"`
	DefaultEngine string `yaml:"default_engine"`

	// Objectives: watch the InferenceObjectives of the pool's namespace
	// whose poolRef names this pool and give requests naming one (header
	// x-gateway-inference-objective) its priority. Default on; off = every
	// request has priority 0.
	Objectives *bool `yaml:"objectives"`

	// ResyncPeriod and Debounce as in Config; not file keys (tests set them).
	ResyncPeriod time.Duration `yaml:"-"`
	Debounce     time.Duration `yaml:"-"`
}

// WithDefaults is p with its zero fields defaulted (the namespace is left
// as it is: see Namespace).
func (p InferencePool) WithDefaults() InferencePool {
	if p.Group == "" {
		p.Group = InferencePoolGroup
	}
	if p.ModelLabel == "" {
		p.ModelLabel = DefaultModelLabel
	}
	if p.RoleLabel == "" {
		p.RoleLabel = DefaultRoleLabel
	}
	if p.EngineLabel == "" {
		p.EngineLabel = DefaultEngineLabel
	}
	if p.Objectives == nil {
		on := true
		p.Objectives = &on
	}
	if p.ResyncPeriod == 0 {
		p.ResyncPeriod = DefaultResync
	}
	if p.Debounce == 0 {
		p.Debounce = DefaultDebounce
	}
	return p
}

// WatchObjectives reports whether InferenceObjectives are followed.
func (p InferencePool) WatchObjectives() bool { return p.Objectives == nil || *p.Objectives }

// Labels is the label part of p as a Config, for the model and role rules
// the label discovery already applies.
func (p InferencePool) Labels() Config {
	p = p.WithDefaults()
	return Config{ModelLabel: p.ModelLabel, RoleLabel: p.RoleLabel, Model: p.Model, EngineLabel: p.EngineLabel, DefaultEngine: p.DefaultEngine}
}

// Validate reports the first invalid field, named by its key under
// extproc.discovery.inference_pool.
func (p InferencePool) Validate() error {
	p = p.WithDefaults()
	if p.Name == "" {
		return errors.New("inference_pool.name is required (the InferencePool kvgate picks for; --pool-name)")
	}
	if errs := validation.IsDNS1123Subdomain(p.Name); len(errs) > 0 {
		return fmt.Errorf("inference_pool.name %q: %s", p.Name, strings.Join(errs, "; "))
	}
	if p.Namespace != "" {
		if errs := validation.IsDNS1123Label(p.Namespace); len(errs) > 0 {
			return fmt.Errorf("inference_pool.namespace %q: %s", p.Namespace, strings.Join(errs, "; "))
		}
	}
	if p.Group != InferencePoolGroup {
		return fmt.Errorf("inference_pool.group %q: only %s (InferencePool v1) is supported", p.Group, InferencePoolGroup)
	}
	// The last target port's event port must stay a port whatever the pool
	// holds (up to MaxTargetPorts).
	for _, f := range []struct {
		name string
		port int
	}{{"events_port", p.EventsPort}, {"replay_port", p.ReplayPort}} {
		if f.port < 0 || (f.port > 0 && f.port+MaxTargetPorts-1 > 65535) {
			return fmt.Errorf("inference_pool.%s: %d outside 1..%d (target port i uses it + i, up to %d ports)", f.name, f.port, 65536-MaxTargetPorts, MaxTargetPorts)
		}
	}
	if p.ReplayPort != 0 && p.EventsPort == 0 {
		return errors.New("inference_pool.replay_port: set without events_port")
	}
	if err := validateEngine("inference_pool", p.EngineLabel, p.DefaultEngine); err != nil {
		return err
	}
	return validateLabelsAndTiming("inference_pool", p.ModelLabel, p.RoleLabel, p.ResyncPeriod, p.Debounce)
}
