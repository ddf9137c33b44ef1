package chattemplate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/extproc/openai"
)

// chatOfTokens builds a Qwen3 chat of roughly tokens tokens (~4 bytes each)
// in 200-token turns, with tools and a tool call in the history.
func chatOfTokens(tokens int) []byte {
	turn := strings.Repeat("The router hashes prompt blocks to pick a warm worker. ", 15) // ~200 tokens
	msgs := []any{map[string]any{"role": "system", "content": "You are a helpful assistant."}}
	msgs = append(msgs,
		map[string]any{"role": "user", "content": "weather?"},
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Zürich"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": "c1", "content": "21C"})
	for i := 0; len(msgs)*200 < tokens; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": turn})
	}
	body, _ := json.Marshal(map[string]any{
		"model": "qwen3", "messages": msgs,
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}},
	})
	return body
}

func BenchmarkRenderQwen3(b *testing.B) {
	r, err := New(loadModel(b, "qwen3"), Options{Now: func() time.Time { return fixedNow }})
	if err != nil {
		b.Fatal(err)
	}
	for _, tokens := range []int{1000, 8000, 32000} {
		body := chatOfTokens(tokens)
		req, err := openai.ParseChat(body, openai.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%dk-tokens", tokens/1000), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Render(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
