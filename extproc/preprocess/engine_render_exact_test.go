package preprocess_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/kvgate/kvgate/extproc/enginetokenize"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// startEngine serves an enginesim for model over real HTTP on a loopback
// port until the test ends, and returns its host:port.
func startEngine(t *testing.T, model, dir string) string {
	t.Helper()
	s, err := enginesim.NewServer(enginesim.ServerConfig{Model: model, LoRAs: []string{model + "-sql"}, TokenizerDir: dir,
		Engine: enginesim.Config{BlockSize: 16, NumGPUBlocks: 4096, SpeedUp: 200}, Seed: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// Issue 29, done-when 2: preprocess.mode engine routes exactly. For both
// test models, a chat (system, tools, a tool call and its result, thinking
// off), a completion, a LoRA chat, an Anthropic Messages request and a
// Responses request each get, from the engine's /tokenize (enginesim over
// HTTP), the same token ids and block hashes as kvgate's local rendering;
// a repeated request is answered from the render cache.
func TestEngineModeHashesEqualLocal(t *testing.T) {
	for _, model := range []string{"qwen3", "llama3_1"} {
		t.Run(model, func(t *testing.T) {
			dir, err := modelfiles.Model(model)
			if err != nil {
				t.Fatal(err)
			}
			engine := startEngine(t, model, dir)
			mc := kvfleet.Model{Name: model, BlockSize: 16, Namespace: "ns-" + model, LoRAs: []string{model + "-sql"}}
			localMC := mc
			localMC.Tokenizer = dir
			local, err := preprocess.New([]kvfleet.Model{localMC}, preprocess.Options{})
			if err != nil {
				t.Fatal(err)
			}
			engineMC := mc
			engineMC.Preprocess.Mode = preprocess.ModeEngine // no tokenizer directory at all
			remote, err := preprocess.New([]kvfleet.Model{engineMC}, preprocess.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if m, _, _ := remote.Lookup(model); m.Mode != preprocess.ModeEngine || m.Tokenizer != nil {
				t.Fatalf("engine-mode model %+v loaded local files", m)
			}
			ctx := preprocess.WithEngines(context.Background(), oneEngine{model: model, endpoint: engine, t: t,
				Client: enginetokenize.New(time.Second, preprocess.DefaultEngineMaxConcurrent)})
			chat := `{"model":"` + model + `","messages":[{"role":"system","content":"You are a careful \"agent\" <b>."},
				{"role":"user","content":"Weather in Paris?"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"unit\": 1.0}"}}]},
				{"role":"tool","tool_call_id":"call_9","content":"18C"},{"role":"user","content":[{"type":"text","text":"And tomorrow?"}]}],
				"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
				"chat_template_kwargs":{"enable_thinking":false},"max_tokens":8}`
			cases := []struct {
				name string
				run  func(*preprocess.Registry, context.Context, []byte) (*preprocess.Result, error)
				body string
			}{
				{"chat", (*preprocess.Registry).ChatContext, chat},
				{"lora chat", (*preprocess.Registry).ChatContext, `{"model":"` + model + `-sql","messages":[{"role":"user","content":"SELECT the answer FROM the table of answers WHERE the question IS the one the user asked ORDER BY relevance"}],"add_generation_prompt":true}`},
				{"completion", (*preprocess.Registry).CompletionContext, `{"model":"` + model + `","prompt":"Once upon a time, in a land of long prompts and short caches, a router learned to ask the engine for its tokens","max_tokens":4}`},
				{"messages", (*preprocess.Registry).MessagesContext, `{"model":"` + model + `","max_tokens":8,"system":[{"type":"text","text":"You are a coding agent."}],
					"tools":[{"name":"read_file","description":"Read a file","input_schema":{"properties":{"path":{"type":"string"}}}}],
					"messages":[{"role":"user","content":"Open main.go"},
					{"role":"assistant","content":[{"type":"text","text":"Reading it."},{"type":"tool_use","id":"call_1","name":"read_file","input":{"path":"main.go"}}]},
					{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"package main"},{"type":"text","text":"Now fix it."}]}]}`},
				{"responses", (*preprocess.Registry).ResponsesContext, `{"model":"` + model + `","instructions":"You are a coding agent.","input":[
					{"type":"message","role":"user","content":[{"type":"input_text","text":"Open main.go"}]},
					{"type":"function_call","call_id":"call_1","name":"read_file","arguments":"{\"path\": \"main.go\"}"},
					{"type":"function_call_output","call_id":"call_1","output":"package main"}]}`},
			}
			for _, c := range cases {
				want, err := c.run(local, context.Background(), []byte(c.body))
				if err != nil {
					t.Fatalf("%s: local: %v", c.name, err)
				}
				got, err := c.run(remote, ctx, []byte(c.body))
				if err != nil {
					t.Fatalf("%s: engine: %v", c.name, err)
				}
				if want.Approximate != "" || got.Approximate != "" {
					t.Fatalf("%s: approximate: local %q, engine %q", c.name, want.Approximate, got.Approximate)
				}
				if len(want.Sequence) < 1 || !slices.Equal(got.Tokens, want.Tokens) || !slices.Equal(got.Local, want.Local) || !slices.Equal(got.Sequence, want.Sequence) {
					t.Fatalf("%s: engine render differs from local:\n engine %d tokens %v\n  local %d tokens %v", c.name, len(got.Tokens), got.Tokens, len(want.Tokens), want.Tokens)
				}
				if got.LoRA != want.LoRA || got.Served != want.Served {
					t.Fatalf("%s: served %q/%q, want %q/%q", c.name, got.Served, got.LoRA, want.Served, want.LoRA)
				}
			}
			st := remote.EngineRenderStats()
			if st.Calls != uint64(len(cases)) || st.CacheHits != 0 || st.CacheEntries != len(cases) {
				t.Fatalf("stats %+v: want %d calls, no hit, %d entries", st, len(cases), len(cases))
			}
			again, err := remote.ChatContext(ctx, []byte(chat))
			if err != nil || again.Approximate != "" {
				t.Fatalf("repeat: %v %q", err, again.Approximate)
			}
			if st := remote.EngineRenderStats(); st.Calls != uint64(len(cases)) || st.CacheHits != 1 {
				t.Fatalf("repeat: stats %+v: want it answered from the cache", st)
			}
		})
	}
}

// oneEngine is the router's preprocess.Engines in miniature
// (extproc/render_engines.go): one engine for one model, called over the
// real HTTP client the router uses.
type oneEngine struct {
	model, endpoint string
	t               *testing.T
	*enginetokenize.Client
}

func (e oneEngine) RenderEngines(base string) []string {
	if base != e.model {
		e.t.Errorf("engines asked for %q", base)
	}
	return []string{e.endpoint}
}
