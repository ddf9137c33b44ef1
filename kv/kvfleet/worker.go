package kvfleet

import "fmt"

// Role is what a worker is deployed to do (llm-d / Dynamo pools).
type Role uint8

const (
	RoleBoth    Role = iota // serves whole requests, or either half of a split one
	RolePrefill             // prefill only (llm-d / Dynamo prefill pool)
	RoleDecode              // decode; also serves whole requests when not split
)

func (r Role) String() string {
	switch r {
	case RoleBoth:
		return "both"
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return fmt.Sprintf("role%d", uint8(r))
}

// ParseRole maps a configuration value (engines[].role) or a pod label
// (discovery's role_label) to a Role; "" is "both". It is the one place a
// role is spelled, so that the file and the labels accept the same words.
func ParseRole(s string) (Role, error) {
	switch s {
	case "", "both":
		return RoleBoth, nil
	case "prefill":
		return RolePrefill, nil
	case "decode":
		return RoleDecode, nil
	}
	return 0, fmt.Errorf("%q is not one of both, prefill, decode", s)
}

// EventsBindMode is the Events value of a worker whose engine connects to
// the indexer's bound socket (indexer.events_bind) instead of being dialed.
const EventsBindMode = "bind"

// Worker is one engine data-parallel rank: the one shape of a worker that
// the configuration (config.Config.Workers, the engines list expanded per
// rank) and Kubernetes discovery (extproc/discovery) produce, and that the
// router, the indexer and the engine-metrics scraper consume.
//
// Data-parallel ranks of one engine share its HTTP endpoint (vLLM's API
// server balances across them): they are one destination with separate
// caches, told apart by ID.DPRank.
type Worker struct {
	ID       WorkerID // ID.Endpoint is the ip:port requests are sent to
	Model    string   // served base model
	Role     Role
	Draining bool // gets no new requests
	// Events and Replay are this rank's ZMQ KV-event PUB and replay ROUTER
	// endpoints (tcp://host:port, rank 0's port + rank, as vLLM offsets
	// them); "" = none. Events is EventsBindMode when the engine dials the
	// indexer instead.
	Events, Replay string
	// Topic is the engine's KV-event topic; in bind mode it is what tells
	// its batches apart on the indexer's bound socket.
	Topic string
	// TierEvents and TierReplay are this rank's endpoints of the node's
	// kvagent residency stream (host and disk tiers); "" = none.
	TierEvents, TierReplay string
	// Kind is the engine kind (engines[].kind: "vllm", "sglang",
	// "trtllm"; "" = vllm): it selects the wire format of its KV events
	// (kvevents.FormatOf).
	Kind string
}

// Endpoint is the ip:port requests for this worker are sent to.
func (w Worker) Endpoint() string { return w.ID.Endpoint }

// Approximate reports that the worker publishes no KV events: kvgate
// infers its cache from its own recent routing decisions.
func (w Worker) Approximate() bool { return w.Events == "" }

// Model is one served base model (the configuration's models[] entry):
// what the preprocessor needs to tokenize and hash its requests exactly as
// the engines do, and what the indexer needs to recompute the hashes of
// the engines' KV events. Declared here, in the leaf, so that both take it
// without importing the configuration package.
type Model struct {
	Name      string `yaml:"name"`
	BlockSize int    `yaml:"block_size"`
	// Namespace salts block hashes (Dynamo's cache_salt), isolating tenants.
	Namespace string `yaml:"namespace"`
	// Tokenizer is a Hugging Face model directory (tokenizer.json, tokenizer_config.json).
	Tokenizer string `yaml:"tokenizer"`
	// LoRAs lists adapter names served under this base model; requests
	// address them by model name.
	LoRAs []string `yaml:"loras"`
	// Preprocess is how the extproc makes this model's token ids
	// (models[].preprocess; extproc/preprocess/mode.go).
	Preprocess ModelPreprocess `yaml:"preprocess"`
}

// ModelPreprocess is models[].preprocess.
type ModelPreprocess struct {
	// Mode is local (the default: kvgate renders and tokenizes), engine
	// (one of the model's vLLM engines does, over its /tokenize) or auto
	// (local when the tokenizer directory loads, engine otherwise).
	Mode string `yaml:"mode"`
}

// FindModel returns the base model of models named name, or nil: the one
// lookup the configuration's validation and the indexer's streams share.
func FindModel(models []Model, name string) *Model {
	for i := range models {
		if models[i].Name == name {
			return &models[i]
		}
	}
	return nil
}
