// Package apicompare replays one agent workload through each API vLLM
// serves for it — Chat Completions, Anthropic Messages, OpenAI Responses —
// with the same conversation content in each (issue 29): agent loops as
// the agent class of lab/workload generates them (a tool schema set drawn
// by popularity, a task, then steps of one tool call and its result),
// here kept as structured turns so that each API's body can carry them in
// its own shape.
package apicompare

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/kvgate/kvgate/lab/workload"
)

// API is one of the request APIs a conversation is sent as.
type API string

const (
	Chat      API = "chat"      // POST /v1/chat/completions
	Messages  API = "messages"  // POST /v1/messages
	Responses API = "responses" // POST /v1/responses
)

// APIs lists them in the order the comparison runs them.
var APIs = []API{Chat, Messages, Responses}

// Path is the route the API's requests are sent to.
func (a API) Path() string {
	switch a {
	case Messages:
		return "/v1/messages"
	case Responses:
		return "/v1/responses"
	}
	return "/v1/chat/completions"
}

// Tool is one function the agent may call; Parameters is its JSON schema.
type Tool struct {
	Name, Description string
	Parameters        map[string]any
}

// Step is one agent step: the model's tool call and the tool's result.
// Arguments is the call's arguments as one JSON object with a single
// string member "input", written as Python's json.dumps writes it ({"input":
// "…"}), so that the Messages form (an object vLLM serialises) and the
// Chat and Responses forms (the string as sent) carry the same text.
type Step struct {
	CallID, Name, Input string
	Result              string
}

// Arguments is the step's call arguments as a JSON string.
func (s Step) Arguments() string { return `{"input": "` + s.Input + `"}` }

// Conversation is one agent loop: a system prompt and tools (shared by
// every loop that drew the same schema set), the user's task, its steps.
type Conversation struct {
	System string
	Tools  []Tool
	Task   string
	Steps  []Step
}

// Request is one request of the replay: the conversation up to (not
// including) step Steps, i.e. the task and the first Steps steps.
type Request struct {
	Conv  *Conversation
	Steps int
}

// Options shape the generated workload.
type Options struct {
	Requests int
	// Scale multiplies the mix's token lengths (0 < Scale ≤ 1): the agent
	// mix's 6,000-token tool schemas are costly to tokenize on a small
	// machine, and the comparison is between APIs, not of the lengths.
	Scale float64
	Seed  uint64
}

// Generate draws opts.Requests requests of agent loops shaped by mix's
// agent parameters (ToolSchemas, ToolSchemaTokens, AgentSteps,
// ToolResultTokens, UserTokens, OutputTokens, ZipfS), interleaved as
// lab/workload interleaves open loops: an arrival continues a random open
// loop with probability 1 − 1/AgentSteps, else starts a new one.
func Generate(mix workload.Mix, opts Options) ([]Request, error) {
	if opts.Requests < 1 || opts.Requests > 100000 {
		return nil, fmt.Errorf("apicompare: requests %d outside 1..100000", opts.Requests)
	}
	if !(opts.Scale > 0 && opts.Scale <= 1) {
		return nil, fmt.Errorf("apicompare: scale %v outside (0, 1]", opts.Scale)
	}
	if mix.ToolSchemas < 1 || mix.AgentSteps < 1 {
		return nil, fmt.Errorf("apicompare: mix %s has no agent loops (tool schemas %d, agent steps %v)", mix.Name, mix.ToolSchemas, mix.AgentSteps)
	}
	g := &generator{rnd: rand.New(rand.NewPCG(mix.Seed, opts.Seed)), scale: opts.Scale}
	schemas := make([]schemaSet, mix.ToolSchemas)
	for i := range schemas {
		schemas[i] = g.schemaSet(i, mix.ToolSchemaTokens)
	}
	type open struct {
		c    *Conversation
		sent int
	}
	var loops []*open
	reqs := make([]Request, 0, opts.Requests)
	for len(reqs) < opts.Requests {
		if len(loops) > 0 && g.rnd.Float64() < 1-1/mix.AgentSteps {
			k := g.rnd.IntN(len(loops))
			l := loops[k]
			l.sent++
			reqs = append(reqs, Request{Conv: l.c, Steps: l.sent})
			if l.sent == len(l.c.Steps) {
				loops[k] = loops[len(loops)-1]
				loops = loops[:len(loops)-1]
			}
			continue
		}
		steps := 0
		for g.rnd.Float64() >= 1/mix.AgentSteps && steps < 64 {
			steps++
		}
		s := schemas[g.zipf(len(schemas), mix.ZipfS)]
		c := &Conversation{System: s.system, Tools: s.tools, Task: g.text(mix.UserTokens)}
		for i := range steps {
			t := s.tools[g.rnd.IntN(len(s.tools))]
			c.Steps = append(c.Steps, Step{CallID: fmt.Sprintf("call_%d_%d", len(reqs), i), Name: t.Name,
				Input: g.text(mix.OutputTokens), Result: g.text(mix.ToolResultTokens)})
		}
		reqs = append(reqs, Request{Conv: c})
		if steps > 0 {
			loops = append(loops, &open{c: c})
		}
	}
	return reqs, nil
}

type schemaSet struct {
	system string
	tools  []Tool
}

type generator struct {
	rnd   *rand.Rand
	scale float64
}

// words are what the generated text is made of: short common English
// words, about one token each in the tokenizers kvgate ships tests for.
var words = strings.Fields("the a of to and in is it for on with as at by from that this be are was or an file code test build run read write line value error name path step tool call result data list item check open close find make use need next last first new old")

// text is about n×scale tokens of words (at least one), log-normal
// around the mean as lab/workload draws lengths.
func (g *generator) text(n int) string {
	mean := float64(n) * g.scale
	k := max(1, int(mean*math.Exp(0.5*g.rnd.NormFloat64()-0.125)))
	var b strings.Builder
	for i := range k {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[g.rnd.IntN(len(words))])
	}
	return b.String()
}

// schemaSet is schema set i: a system prompt and four tools whose
// descriptions together carry about tokens×scale tokens.
func (g *generator) schemaSet(i, tokens int) schemaSet {
	const tools = 4
	s := schemaSet{system: fmt.Sprintf("You are coding agent %d. Use the tools to finish the task.", i)}
	for k := range tools {
		s.tools = append(s.tools, Tool{
			Name:        fmt.Sprintf("tool_%d_%d", i, k),
			Description: g.text(tokens / tools),
			Parameters: map[string]any{"type": "object", "properties": map[string]any{
				"input": map[string]any{"type": "string", "description": "what the tool works on"}}, "required": []any{"input"}},
		})
	}
	return s
}

// zipf draws item k of n with weight 1/(k+1)^s.
func (g *generator) zipf(n int, s float64) int {
	total := 0.0
	for k := range n {
		total += math.Pow(float64(k+1), -s)
	}
	x := g.rnd.Float64() * total
	for k := range n {
		if x -= math.Pow(float64(k+1), -s); x < 0 {
			return k
		}
	}
	return n - 1
}
