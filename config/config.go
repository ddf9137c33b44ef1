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
	"os"

	"gopkg.in/yaml.v3"

	"github.com/kvgate/kvgate/extproc/envoyaddr"
	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/indexer/indexerconfig"
	"github.com/kvgate/kvgate/internal/confaddr"
	"github.com/kvgate/kvgate/kv/indexconfig"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kvagent/agentconfig"
	"github.com/kvgate/kvgate/planner-sidecar/plannerconfig"
)

// MaxFileBytes bounds the configuration file.
const MaxFileBytes = 4 << 20

// Config is the whole file.
type Config struct {
	// Index and Indexer are declared by the indexer (indexerconfig),
	// Extproc by extproc (extprocconfig), Kvagent by the kvagent
	// (agentconfig), Planner by the planner (plannerconfig); config
	// composes them and checks what spans sections.
	Index   indexconfig.Index    `yaml:"index"`
	Indexer indexerconfig.Config `yaml:"indexer"`
	Extproc extprocconfig.Config `yaml:"extproc"`
	Models  []Model              `yaml:"models"`
	Engines []Engine             `yaml:"engines"`
	Kvagent agentconfig.Config   `yaml:"kvagent"`
	Planner plannerconfig.Config `yaml:"planner"`
	Log     Log                  `yaml:"log"`
}

// Log configures every kvgate process's log lines (library lines
// included: go-redis, klog, the standard log package).
type Log struct {
	// Format is "json" (default) or "text"; a --log-format flag overrides it.
	Format string `yaml:"format"`
}

// EventsBindMode is the engines[].events value of an engine that connects
// to indexer.events_bind instead of being dialed.
const EventsBindMode = kvfleet.EventsBindMode

// Model is one served model (models[]); the one declaration lives in the
// leaf kvfleet so that the preprocessor and the indexer take it without
// importing config.
type Model = kvfleet.Model

// Engine is one inference engine (vLLM, SGLang, TensorRT-LLM) publishing KV events.
type Engine struct {
	// Kind is the engine: "vllm" (the default, also when empty), "sglang"
	// or "trtllm". It selects the KV-event wire format: vLLM's EventBatch
	// (which SGLang, and Dynamo's TensorRT-LLM republisher, also send), or
	// TensorRT-LLM's own event list (kvevents.FormatTRTLLM).
	Kind string `yaml:"kind"`
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
	if extprocconfig.FallbacksSet(data) {
		c.Extproc.KeepExplicitFallbacks()
	}
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func (c *Config) applyDefaults() {
	c.Index.ApplyDefaults()
	c.Indexer.ApplyDefaults()
	for i := range c.Engines {
		if c.Engines[i].DPRanks == 0 {
			c.Engines[i].DPRanks = 1
		}
		if c.Engines[i].Role == "" {
			c.Engines[i].Role = "both"
		}
	}
	c.Extproc.ApplyDefaults()
	c.Kvagent.ApplyDefaults()
	c.Planner.ApplyDefaults()
}

// Validate reports the first invalid value, naming its path in the file.
// It rewrites engine endpoints to Envoy's canonical ip:port
// (extproc/envoyaddr).
func (c *Config) Validate() error {
	if f := c.Log.Format; f != "" && f != "json" && f != "text" {
		return fmt.Errorf("log.format: %q is not one of json, text", f)
	}
	if err := c.Index.Validate("index"); err != nil {
		return err
	}
	if err := c.Indexer.Validate("indexer"); err != nil {
		return err
	}
	if err := c.Extproc.Validate("extproc"); err != nil {
		return err
	}
	if err := c.Kvagent.Validate("kvagent"); err != nil {
		return err
	}
	if err := c.Planner.Validate("planner"); err != nil {
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
		if err := preprocess.ValidateMode(p+".preprocess.mode", m.Preprocess.Mode); err != nil {
			return err
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
			if _, _, err := confaddr.ZMQEndpoint(c.Indexer.EventsBind, e.DPRanks-1); err != nil {
				return fmt.Errorf("%s.dp_ranks: indexer.events_bind plus rank %d: %w", p, e.DPRanks-1, err)
			}
		} else if e.Events != "" {
			if _, _, err := confaddr.ZMQEndpoint(e.Events, 0); err != nil {
				return fmt.Errorf("%s.events: %w", p, err)
			}
		} else if e.Replay != "" {
			return fmt.Errorf("%s.replay: set without events", p)
		}
		if _, err := kvfleet.ParseRole(e.Role); err != nil {
			return fmt.Errorf("%s.role: %w", p, err)
		}
		if _, err := kvevents.FormatOf(e.Kind); err != nil {
			return fmt.Errorf("%s.kind: %w", p, err)
		}
		if e.Replay != "" {
			if _, _, err := confaddr.ZMQEndpoint(e.Replay, 0); err != nil {
				return fmt.Errorf("%s.replay: %w", p, err)
			}
		}
		if e.TierEvents != "" {
			if _, _, err := confaddr.ZMQEndpoint(e.TierEvents, e.DPRanks-1); err != nil {
				return fmt.Errorf("%s.tier_events: %w", p, err)
			}
			if e.TierEvents == e.Events {
				return fmt.Errorf("%s.tier_events: same endpoint as events", p)
			}
		} else if e.TierReplay != "" {
			return fmt.Errorf("%s.tier_replay: set without tier_events", p)
		}
		if e.TierReplay != "" {
			if _, _, err := confaddr.ZMQEndpoint(e.TierReplay, e.DPRanks-1); err != nil {
				return fmt.Errorf("%s.tier_replay: %w", p, err)
			}
		}
	}
	return nil
}

// Model returns the base model named name, or nil.
func (c *Config) Model(name string) *Model { return kvfleet.FindModel(c.Models, name) }
