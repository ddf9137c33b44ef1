package apicompare

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/workload"
)

// The same agent conversation sent as Chat, as Messages and as Responses
// gets the same routing key in kvgate — the same tokens and so the same
// block hashes — request by request, for a fixed handful of requests of
// the agent mix (tasks, tool calls and results), as vLLM renders the three
// to the same prompt. With tool definitions, Chat and Messages still
// agree exactly; Responses differs inside the tool list only, because
// vLLM hands the template each Responses tool as the openai library dumps
// FunctionTool ({"name", "parameters", "strict": null, "type",
// "description"}: vllm/entrypoints/openai/responses/utils.py
// construct_tool_dicts, as transcribed in extproc/openai/responses.go)
// where chat's is {"name", "description", "parameters"}: a conversation
// that moves from Responses to another API mid-way loses its cached
// prefix from the tools on, in vLLM itself.
func TestTheThreeAPIsGiveOneConversationTheSameRoutingKeys(t *testing.T) {
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: "qwen3", BlockSize: 16, Tokenizer: dir}}
	reg, err := preprocess.New(cfg.Models, preprocess.OptionsFor(cfg.Extproc.Preprocess, cfg.Extproc.MaxBodyBytes, ""))
	if err != nil {
		t.Fatal(err)
	}
	mix, err := workload.Named("agent", 12)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := Generate(mix, Options{Requests: 12, Scale: 0.02, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	withSteps := 0
	for i, r := range reqs {
		toolless := *r.Conv
		toolless.Tools = nil
		for _, rr := range []Request{{Conv: &toolless, Steps: r.Steps}, r} {
			sameKeys(t, reg, i, rr)
		}
		if r.Steps > 0 {
			withSteps++
		}
	}
	if withSteps == 0 {
		t.Fatal("no request carried a tool call and its result")
	}
}

// sameKeys checks request i of the comparison as the test's comment says.
func sameKeys(t *testing.T, reg *preprocess.Registry, i int, r Request) {
	t.Helper()
	{
		var keys [][]uint64
		var prompts []string
		for _, api := range APIs {
			body := Body(api, r, "qwen3", 8)
			var res *preprocess.Result
			var err error
			switch api {
			case Chat:
				res, err = reg.ChatContext(context.Background(), body)
			case Messages:
				res, err = reg.MessagesContext(context.Background(), body)
			case Responses:
				res, err = reg.ResponsesContext(context.Background(), body)
			}
			if err != nil {
				t.Fatalf("request %d as %s: %v\n%s", i, api, err, body)
			}
			if res.Approximate != "" || len(res.Sequence) == 0 {
				t.Fatalf("request %d as %s: no routing key (approximate: %q)", i, api, res.Approximate)
			}
			keys = append(keys, slices.Clone(res.Sequence))
			prompts = append(prompts, res.Prompt)
			res.Release()
		}
		for k := 1; k < len(keys); k++ {
			if APIs[k] == Responses && len(r.Conv.Tools) > 0 {
				// Outside the tool list the prompts are the same.
				if outsideTools(prompts[0]) != outsideTools(prompts[k]) || prompts[0] == prompts[k] {
					t.Fatalf("request %d (%d steps): responses' prompt differs from chat's elsewhere than in the tool list, or not there\nchat prompt:\n%s\nresponses prompt:\n%s",
						i, r.Steps, prompts[0], prompts[k])
				}
				continue
			}
			if !slices.Equal(keys[0], keys[k]) {
				t.Fatalf("request %d (%d steps, %d tools): %s's block hashes differ from chat's\nchat prompt:\n%s\n%s prompt:\n%s",
					i, r.Steps, len(r.Conv.Tools), APIs[k], prompts[0], APIs[k], prompts[k])
			}
		}
	}
}

// outsideTools is prompt without what lies between the chat template's
// <tools> and </tools> (Qwen3's template lists the tools there).
func outsideTools(prompt string) string {
	a, b := strings.Index(prompt, "<tools>\n"), strings.LastIndex(prompt, "</tools>")
	if a < 0 || b < a {
		return prompt
	}
	return prompt[:a] + prompt[b:]
}
