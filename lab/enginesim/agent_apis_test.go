package enginesim

import (
	"net/http"
	"strings"
	"testing"
)

// /v1/messages and /v1/responses are served in their own shapes, and a
// repeated conversation hits the prefix cache the way chat does: the
// engine renders them as vLLM does, so its cached blocks are the ones the
// router hashes.
func TestAgentAPIsAreServedAndCached(t *testing.T) {
	s := startServer(t, nil)
	long := strings.Repeat("An agent's long system prompt, resent on every turn of the loop. ", 20)
	messages := map[string]any{"model": testModel, "max_tokens": 3, "system": long,
		"messages": []any{map[string]any{"role": "user", "content": "list the files"}}}
	var cached [2]int
	for i := range cached {
		status, out := post(t, s.url+"/v1/messages", messages)
		if status != http.StatusOK {
			t.Fatalf("messages %d: status %d: %s", i, status, out)
		}
		m := decode[anthropicMessageBody](t, out)
		if m.Type != "message" || len(m.Content) != 1 || m.Content[0].Type != "text" || m.Usage.OutputTokens != 3 {
			t.Fatalf("messages answer %s", out)
		}
		cached[i] = m.Usage.CacheReadInputTokens
	}
	if cached[0] != 0 || cached[1] == 0 || cached[1]%16 != 0 {
		t.Fatalf("messages cached tokens %v: want 0, then a positive multiple of the block size", cached)
	}
	responses := map[string]any{"model": testModel, "max_output_tokens": 2, "instructions": long, "input": "list the files"}
	status, out := post(t, s.url+"/v1/responses", responses)
	if status != http.StatusOK {
		t.Fatalf("responses: status %d: %s", status, out)
	}
	r := decode[responsesBody](t, out)
	if r.Object != "response" || len(r.Output) != 1 || r.Output[0].Content[0].Type != "output_text" || r.Usage.OutputTokens != 2 {
		t.Fatalf("responses answer %s", out)
	}
	// The Responses request renders the same system + user turn as the
	// Messages one, so it finds the blocks that one left.
	if r.Usage.InputTokensDetails["cached_tokens"] == 0 {
		t.Fatalf("responses after messages found no cached prefix: %s", out)
	}
}
