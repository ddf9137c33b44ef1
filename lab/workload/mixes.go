package workload

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/kvgate/kvgate/lab/plannersim"
	"github.com/kvgate/kvgate/lab/replay"
)

// The named mixes. TuningMixes are the ones a policy's knobs may be tuned
// on; HeldOutMixes differ in seed and in every parameter and are only
// reported on, to check that what was tuned is the mechanism and not the
// trace. Rates put each mix's 1× near the conversation trace's per-worker
// load at 8 workers (light: capacity is several times higher).
//
// OverloadMixes carry tenants and priority bands (tenants.go) for the
// overload sweeps of issue 26; their content is chat's.
var (
	TuningMixes   = []string{"chat", "agent", "rag"}
	HeldOutMixes  = []string{"holdout"}
	OverloadMixes = []string{"tenants", "bands"}
)

// Named returns a named mix of n requests.
func Named(name string, n int) (Mix, error) {
	m, ok := named[name]
	if !ok {
		return Mix{}, fmt.Errorf("workload: unknown mix %q (want one of %v, %v or %v)", name, TuningMixes, HeldOutMixes, OverloadMixes)
	}
	m.Name, m.Requests = name, n
	return m, m.Validate()
}

var named = map[string]Mix{
	// Multi-turn chat behind a few shared system prompts.
	"chat": {
		Seed: 1, Rate: 32, Arrivals: Poisson,
		Weights:       ClassWeights{System: 0.2, Chat: 0.7, Unique: 0.1},
		ZipfS:         1.0,
		SystemPrompts: 8, SystemTokens: 1500, UserTokens: 300, OutputTokens: 250,
		ChatTurns:    6,
		UniqueTokens: 4000,
	},
	// Agent loops re-sending long tool schemas, in bursts.
	"agent": {
		Seed: 2, Rate: 10, Arrivals: Bursty, BurstFactor: 3, BurstShare: 0.2, BurstPeriod: 60 * time.Second,
		Weights:       ClassWeights{System: 0.1, Chat: 0.1, Agent: 0.6, Unique: 0.2},
		ZipfS:         1.0,
		SystemPrompts: 4, SystemTokens: 1000, UserTokens: 250, OutputTokens: 150,
		ChatTurns:   4,
		ToolSchemas: 6, ToolSchemaTokens: 6000, AgentSteps: 8, ToolResultTokens: 800,
		UniqueTokens: 3000,
	},
	// Retrieval-augmented questions over a shared corpus with hot documents.
	"rag": {
		Seed: 3, Rate: 12, Arrivals: Poisson,
		Weights:       ClassWeights{System: 0.2, RAG: 0.6, Unique: 0.2},
		ZipfS:         1.1,
		SystemPrompts: 4, SystemTokens: 800, UserTokens: 120, OutputTokens: 200,
		Docs: 200, DocTokens: 2500, DocsPerQuery: 3,
		UniqueTokens: 3000,
	},
	// Eight well-behaved tenants and one noisy tenant sending 5× a
	// well-behaved one's share (5 of 13 requests), on chat's content and
	// rate, another seed.
	"tenants": {
		Seed: 11, Rate: 32, Arrivals: Poisson,
		Weights:       ClassWeights{System: 0.2, Chat: 0.7, Unique: 0.1},
		ZipfS:         1.0,
		SystemPrompts: 8, SystemTokens: 1500, UserTokens: 300, OutputTokens: 250,
		ChatTurns:    6,
		UniqueTokens: 4000,
		Tenants:      8, NoisyFactor: 5,
	},
	// Two priority bands (a quarter of the sessions in the top band)
	// across eight equal tenants, arriving in bursts of 3× the mean rate
	// a fifth of the time, on chat's content, another seed.
	"bands": {
		Seed: 12, Rate: 32, Arrivals: Bursty, BurstFactor: 3, BurstShare: 0.2, BurstPeriod: 30 * time.Second,
		Weights:       ClassWeights{System: 0.2, Chat: 0.7, Unique: 0.1},
		ZipfS:         1.0,
		SystemPrompts: 8, SystemTokens: 1500, UserTokens: 300, OutputTokens: 250,
		ChatTurns:    6,
		UniqueTokens: 4000,
		Tenants:      8, HighShare: 0.25,
	},
	// Held out: every class, other lengths, flatter popularity, sharper
	// bursts, another seed.
	"holdout": {
		Seed: 97, Rate: 20, Arrivals: Bursty, BurstFactor: 4, BurstShare: 0.15, BurstPeriod: 30 * time.Second,
		Weights:       ClassWeights{System: 0.15, Chat: 0.3, Agent: 0.2, RAG: 0.15, Unique: 0.2},
		ZipfS:         0.8,
		SystemPrompts: 12, SystemTokens: 2500, UserTokens: 400, OutputTokens: 300,
		ChatTurns:   4,
		ToolSchemas: 3, ToolSchemaTokens: 9000, AgentSteps: 5, ToolResultTokens: 1200,
		Docs: 80, DocTokens: 1800, DocsPerQuery: 4,
		UniqueTokens: 6000,
	},
}

// FromAzure turns an Azure LLM inference trace (arrivals and lengths, no
// content) into Mooncake lines whose blocks are all distinct: a workload
// with nothing to cache, where routing is pure load balancing. limit > 0
// keeps the first limit requests.
func FromAzure(r io.Reader, name string, limit int) ([]replay.TraceRequest, error) {
	l, err := plannersim.ParseAzure(r, name, limit)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	out := make([]replay.TraceRequest, 0, len(l.Requests))
	next := uint64(0)
	for i, q := range l.Requests {
		if q.InputTokens < 1 || q.InputTokens > replay.MaxInputLength {
			return nil, fmt.Errorf("workload: %s request %d: %d context tokens outside [1, %d]", name, i+1, q.InputTokens, replay.MaxInputLength)
		}
		t := replay.TraceRequest{Timestamp: q.Arrival.Milliseconds(), InputLength: q.InputTokens, OutputLength: q.OutputTokens, Line: i + 1}
		for range (q.InputTokens + replay.TraceBlockSize - 1) / replay.TraceBlockSize {
			t.HashIDs = append(t.HashIDs, next)
			next++
		}
		out = append(out, t)
	}
	return out, nil
}

// WriteJSONL writes reqs as a Mooncake JSONL trace that replay.ParseTrace
// reads back unchanged.
func WriteJSONL(w io.Writer, reqs []replay.TraceRequest) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i, r := range reqs {
		line := struct {
			Timestamp    int64    `json:"timestamp"`
			InputLength  int      `json:"input_length"`
			OutputLength int      `json:"output_length"`
			HashIDs      []uint64 `json:"hash_ids"`
			Tenant       string   `json:"tenant,omitempty"`
			Priority     int      `json:"priority,omitempty"`
		}{r.Timestamp, r.InputLength, r.OutputLength, r.HashIDs, r.Tenant, r.Priority}
		if err := enc.Encode(line); err != nil {
			return fmt.Errorf("workload: writing request %d: %w", i+1, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("workload: writing trace: %w", err)
	}
	return nil
}
