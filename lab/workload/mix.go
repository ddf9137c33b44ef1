// Package workload generates synthetic LLM request traces in the Mooncake
// JSONL shape that lab/replay reads (timestamp ms, input_length,
// output_length, hash_ids with one id per 512-token block, equal ids for
// equal prefixes). A Mix describes the traffic: how requests arrive and
// what share of them belongs to each class of prompt reuse:
//
//   - system: a shared system prompt (one of SystemPrompts, Zipf-popular)
//     followed by a fresh user message;
//   - chat: multi-turn sessions, each turn re-sending the system prompt and
//     the whole history (earlier user messages and replies) plus a new
//     message, so a session's prompt grows turn by turn;
//   - agent: tool/agent loops re-sending a long tool schema (one of
//     ToolSchemas) and the task, then every earlier step's call and tool
//     result;
//   - rag: a system prompt and DocsPerQuery documents drawn (Zipf) from a
//     shared corpus, then the question;
//   - unique: a long tail of prompts sharing nothing.
//
// Prefix reuse is what a KV-aware router can exploit, and each class
// reuses differently: chat and agent reuse the caller's own growing
// history (affinity to one worker), system and rag reuse a few hot
// prefixes across callers (hot-spot risk), unique reuses nothing (pure load
// balancing). Arrivals are Poisson or bursty (a two-state
// Markov-modulated Poisson process).
package workload

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Arrival processes.
const (
	Poisson = "poisson"
	Bursty  = "bursty"
)

// ClassWeights are the relative shares of arrivals per class; only their
// ratios matter.
type ClassWeights struct {
	System, Chat, Agent, RAG, Unique float64
}

// Mix parameterises Generate. Token lengths are means: each draw is
// log-normal around the mean (σ = 0.5 of the log), at least 1 token.
type Mix struct {
	Name     string
	Seed     uint64
	Requests int     // requests to generate, 1..MaxRequests
	Rate     float64 // mean arrivals per second

	Arrivals string // Poisson or Bursty
	// Bursty: bursts arrive at BurstFactor × Rate and take BurstShare of
	// the time; calm periods make up the rest of the mean rate (so
	// BurstFactor × BurstShare < 1). BurstPeriod is the mean length of one
	// burst plus one calm period; both are exponentially distributed.
	BurstFactor float64
	BurstShare  float64
	BurstPeriod time.Duration

	Weights ClassWeights
	// ZipfS is the skew of popularity (system prompts, tool schemas,
	// documents): item k of n is drawn with weight 1/(k+1)^ZipfS; 0 is
	// uniform.
	ZipfS float64

	SystemPrompts int // distinct shared system prompts
	SystemTokens  int
	UserTokens    int // a new user message, task or question
	OutputTokens  int // a reply

	ChatTurns float64 // mean turns per chat session (geometric), ≥ 1

	ToolSchemas      int // distinct tool schemas
	ToolSchemaTokens int
	AgentSteps       float64 // mean steps per agent loop (geometric), ≥ 1
	ToolResultTokens int

	Docs         int // RAG corpus size
	DocTokens    int
	DocsPerQuery int

	UniqueTokens int

	// Tenants, NoisyFactor and HighShare say who sends the requests
	// (tenants.go); zero: one anonymous tenant, one band.
	Tenants     int
	NoisyFactor float64
	HighShare   float64

	// MaxPromptTokens caps a prompt: a session whose next prompt would be
	// longer ends, and the arrival starts a fresh one. Default 32,768.
	MaxPromptTokens int
}

// MaxRequests bounds Mix.Requests.
const MaxRequests = 1 << 20

// maxTokens bounds every length parameter, far above any context window.
const maxTokens = 1 << 20

func (m *Mix) fill() error {
	if m.MaxPromptTokens == 0 {
		m.MaxPromptTokens = 32768
	}
	if m.Arrivals == "" {
		m.Arrivals = Poisson
	}
	w := m.Weights
	for _, c := range []struct {
		name string
		v    float64
	}{{"weights.system", w.System}, {"weights.chat", w.Chat}, {"weights.agent", w.Agent}, {"weights.rag", w.RAG}, {"weights.unique", w.Unique}, {"zipf_s", m.ZipfS}} {
		if math.IsNaN(c.v) || c.v < 0 || c.v > 1e6 {
			return fmt.Errorf("workload %s: %s = %v outside [0, 1e6]", m.Name, c.name, c.v)
		}
	}
	if w.System+w.Chat+w.Agent+w.RAG+w.Unique == 0 {
		return fmt.Errorf("workload %s: every class weight is 0", m.Name)
	}
	switch {
	case m.Requests < 1 || m.Requests > MaxRequests:
		return fmt.Errorf("workload %s: requests %d outside [1, %d]", m.Name, m.Requests, MaxRequests)
	case math.IsNaN(m.Rate) || m.Rate <= 0 || m.Rate > 1e6:
		return fmt.Errorf("workload %s: rate %v outside (0, 1e6] per second", m.Name, m.Rate)
	case m.Arrivals != Poisson && m.Arrivals != Bursty:
		return fmt.Errorf("workload %s: arrivals %q: want %q or %q", m.Name, m.Arrivals, Poisson, Bursty)
	case m.Arrivals == Bursty && !(m.BurstFactor > 1 && m.BurstShare > 0 && m.BurstFactor*m.BurstShare < 1):
		return fmt.Errorf("workload %s: bursty arrivals need burst factor > 1, burst share > 0 and factor × share < 1 (got %v, %v)", m.Name, m.BurstFactor, m.BurstShare)
	case m.Arrivals == Bursty && (m.BurstPeriod < time.Millisecond || m.BurstPeriod > 24*time.Hour):
		return fmt.Errorf("workload %s: burst period %v outside [1ms, 24h]", m.Name, m.BurstPeriod)
	case w.Chat > 0 && !(m.ChatTurns >= 1 && m.ChatTurns <= 1e4):
		return fmt.Errorf("workload %s: chat turns %v outside [1, 10000]", m.Name, m.ChatTurns)
	case w.Agent > 0 && !(m.AgentSteps >= 1 && m.AgentSteps <= 1e4):
		return fmt.Errorf("workload %s: agent steps %v outside [1, 10000]", m.Name, m.AgentSteps)
	case (w.System > 0 || w.Chat > 0 || w.RAG > 0) && m.SystemPrompts < 1:
		return fmt.Errorf("workload %s: system, chat and rag need system prompts ≥ 1", m.Name)
	case w.Agent > 0 && m.ToolSchemas < 1:
		return fmt.Errorf("workload %s: agent needs tool schemas ≥ 1", m.Name)
	case w.RAG > 0 && (m.Docs < 1 || m.DocsPerQuery < 1):
		return fmt.Errorf("workload %s: rag needs docs ≥ 1 and docs per query ≥ 1", m.Name)
	case m.SystemPrompts > maxTokens || m.ToolSchemas > maxTokens || m.Docs > maxTokens || m.DocsPerQuery > 64:
		return fmt.Errorf("workload %s: item counts too large (system %d, schemas %d, docs %d, docs per query %d of at most 64)", m.Name, m.SystemPrompts, m.ToolSchemas, m.Docs, m.DocsPerQuery)
	case m.MaxPromptTokens < 512 || m.MaxPromptTokens > maxTokens:
		return fmt.Errorf("workload %s: max prompt tokens %d outside [512, %d]", m.Name, m.MaxPromptTokens, maxTokens)
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"system_tokens", m.SystemTokens}, {"user_tokens", m.UserTokens}, {"output_tokens", m.OutputTokens}, {"tool_schema_tokens", m.ToolSchemaTokens},
		{"tool_result_tokens", m.ToolResultTokens}, {"doc_tokens", m.DocTokens}, {"unique_tokens", m.UniqueTokens}} {
		if c.v < 0 || c.v > maxTokens {
			return fmt.Errorf("workload %s: %s = %d outside [0, %d]", m.Name, c.name, c.v, maxTokens)
		}
	}
	if err := m.checkOwners(); err != nil {
		return err
	}
	if m.UserTokens < 1 || m.OutputTokens < 1 {
		return errors.New("workload " + m.Name + ": user_tokens and output_tokens must be at least 1")
	}
	return nil
}

// Validate reports the first bad parameter, after defaults.
func (m Mix) Validate() error { return m.fill() }
