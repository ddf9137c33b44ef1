// Package kubeselect is the declaration of Kubernetes discovery's
// configuration (extproc.discovery.kubernetes): which pods or EndpointSlices
// are workers, on which ports, with which labels. It is apart from
// extproc/discovery so that the configuration package composes it without
// linking the Kubernetes client (only apimachinery's label and name rules).
package kubeselect

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kvgate/kvgate/kv/kvevents"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Label keys and values kvgate reads from pods (and from EndpointSlices,
// which the EndpointSlice controller labels with their Service's labels).
const (
	DefaultModelLabel = "kvgate.io/model"
	DefaultRoleLabel  = "kvgate.io/role"
	// DrainingKey set to "true" as a label or an annotation marks a worker
	// draining: it stays known but gets no new requests.
	DrainingKey = "kvgate.io/draining"
	// DefaultEngineLabel is the pod label naming a worker's engine kind
	// (engines[].kind: vllm, sglang, trtllm), the one GIE's picker reads
	// to tell engines apart in one pool
	// (kubernetes-sigs/gateway-api-inference-extension
	// pkg/epp/datalayer/metrics/mapping_registry.go EngineTypeLabelKey,
	// commit bca3b40cd3001210eb5ef65b73809345820a3b94), so pods labelled
	// for GIE are read the same way by kvgate.
	DefaultEngineLabel = "inference.networking.k8s.io/engine-type"
)

// Defaults for Config.
const (
	DefaultDebounce = 100 * time.Millisecond
	DefaultResync   = 10 * time.Minute
)

// Config selects workers in one namespace, either as the ready pods
// matching LabelSelector or as the endpoints of Service's EndpointSlices.
// Exactly one of LabelSelector and Service is set. The YAML keys are those
// of extproc.discovery.kubernetes; it is validated when extproc starts
// discovery (every kvgate process parses the file, only extproc watches).
type Config struct {
	// Kubeconfig is the client's kubeconfig file; empty = in-cluster.
	Kubeconfig    string `yaml:"kubeconfig"`
	Namespace     string `yaml:"namespace"`
	LabelSelector string `yaml:"label_selector"`
	Service       string `yaml:"service"`

	// Port is the engine's HTTP port; with pods, 0 means the container port
	// named PortName. With a Service, 0 means the slice port named PortName,
	// or the slice's only port when PortName is empty.
	Port     int    `yaml:"port"`
	PortName string `yaml:"port_name"`

	// EventsPort and ReplayPort are the KV-event PUB and replay ROUTER ports
	// of DP rank 0 on the worker's IP (rank r uses port + r, as vLLM does);
	// 0 = none.
	EventsPort int `yaml:"events_port"`
	ReplayPort int `yaml:"replay_port"`
	// DPRanks is the data-parallel ranks per pod/endpoint; 0 means 1.
	DPRanks int `yaml:"dp_ranks"`

	// ModelLabel and RoleLabel name the labels holding the served model and
	// the role (both, prefill, decode); empty = the kvgate.io defaults.
	ModelLabel string `yaml:"model_label"`
	RoleLabel  string `yaml:"role_label"`
	// Model is the model of workers that carry no model label; "" = such
	// workers are skipped (and counted).
	Model string `yaml:"model"`
	// EngineLabel names the label holding a worker's engine kind, which
	// selects the wire format of its KV events (kvevents.FormatOf);
	// DefaultEngine is the kind of workers without it. Empty = the GIE
	// label (DefaultEngineLabel) and vllm, as GIE's picker defaults its
	// engineLabelKey and defaultEngine. A worker labelled with a kind
	// kvgate does not know is skipped (and counted).
	EngineLabel   string `yaml:"engine_label"`
	DefaultEngine string `yaml:"default_engine"`

	// ResyncPeriod is the informers' resync; 0 = DefaultResync. Not a
	// file key (tests set it).
	ResyncPeriod time.Duration `yaml:"-"`
	// Debounce is the least time between two onChange calls, so that a
	// rollout's burst of pod updates yields a few calls, not hundreds;
	// 0 = DefaultDebounce. Not a file key (tests set it).
	Debounce time.Duration `yaml:"-"`
}

// WithDefaults is c with its zero fields defaulted.
func (c Config) WithDefaults() Config {
	if c.ModelLabel == "" {
		c.ModelLabel = DefaultModelLabel
	}
	if c.RoleLabel == "" {
		c.RoleLabel = DefaultRoleLabel
	}
	if c.EngineLabel == "" {
		c.EngineLabel = DefaultEngineLabel
	}
	if c.DPRanks == 0 {
		c.DPRanks = 1
	}
	if c.ResyncPeriod == 0 {
		c.ResyncPeriod = DefaultResync
	}
	if c.Debounce == 0 {
		c.Debounce = DefaultDebounce
	}
	return c
}

// Validate reports the first invalid field. Zero values that have defaults
// are valid.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
		return fmt.Errorf("kubernetes.namespace %q: %s", c.Namespace, strings.Join(errs, "; "))
	}
	switch {
	case c.LabelSelector == "" && c.Service == "":
		return errors.New("kubernetes: one of label_selector and service is required")
	case c.LabelSelector != "" && c.Service != "":
		return errors.New("kubernetes: label_selector and service are exclusive")
	case c.LabelSelector != "":
		if _, err := labels.Parse(c.LabelSelector); err != nil {
			return fmt.Errorf("kubernetes.label_selector: %w", err)
		}
		if c.Port == 0 && c.PortName == "" {
			return errors.New("kubernetes: port or port_name is required with label_selector")
		}
	default:
		if errs := validation.IsDNS1035Label(c.Service); len(errs) > 0 {
			return fmt.Errorf("kubernetes.service %q: %s", c.Service, strings.Join(errs, "; "))
		}
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("kubernetes.port: %d outside 0..65535", c.Port)
	}
	if c.PortName != "" {
		if errs := validation.IsValidPortName(c.PortName); len(errs) > 0 {
			return fmt.Errorf("kubernetes.port_name %q: %s", c.PortName, strings.Join(errs, "; "))
		}
	}
	if c.DPRanks < 1 || c.DPRanks > 1024 {
		return fmt.Errorf("kubernetes.dp_ranks: %d outside 1..1024", c.DPRanks)
	}
	for _, p := range []struct {
		name string
		port int
	}{{"events_port", c.EventsPort}, {"replay_port", c.ReplayPort}} {
		if p.port < 0 || (p.port > 0 && p.port+c.DPRanks-1 > 65535) {
			return fmt.Errorf("kubernetes.%s: %d (+ %d ranks) outside 1..65535", p.name, p.port, c.DPRanks)
		}
	}
	if c.ReplayPort != 0 && c.EventsPort == 0 {
		return errors.New("kubernetes.replay_port: set without events_port")
	}
	if err := validateEngine("kubernetes", c.EngineLabel, c.DefaultEngine); err != nil {
		return err
	}
	return validateLabelsAndTiming("kubernetes", c.ModelLabel, c.RoleLabel, c.ResyncPeriod, c.Debounce)
}

// validateEngine checks the engine label key (a Kubernetes qualified name)
// and the default kind (one kvevents.FormatOf knows); section prefixes the
// key path in the message.
func validateEngine(section, label, kind string) error {
	if errs := validation.IsQualifiedName(label); len(errs) > 0 {
		return fmt.Errorf("%s.engine_label %q: %s", section, label, strings.Join(errs, "; "))
	}
	if _, err := kvevents.FormatOf(kind); err != nil {
		return fmt.Errorf("%s.default_engine: %w", section, err)
	}
	return nil
}

// validateLabelsAndTiming checks what both discovery sections share: the
// model and role label keys (Kubernetes qualified names) and the informer
// timings; section prefixes the key path in the message.
func validateLabelsAndTiming(section, modelLabel, roleLabel string, resync, debounce time.Duration) error {
	for _, l := range []struct{ name, key string }{{"model_label", modelLabel}, {"role_label", roleLabel}} {
		if errs := validation.IsQualifiedName(l.key); len(errs) > 0 {
			return fmt.Errorf("%s.%s %q: %s", section, l.name, l.key, strings.Join(errs, "; "))
		}
	}
	if resync < 0 {
		return fmt.Errorf("%s.resync_period: must be >= 0", section)
	}
	if debounce < 0 || debounce > time.Minute {
		return fmt.Errorf("%s.debounce: must be in 0..1m", section)
	}
	return nil
}
