package extproc

import (
	"context"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

// Issue 31 finding 6, over real ext_proc streams (the harness plays
// Envoy's side of envoy.yaml against the gRPC server): bodies vLLM serves
// after pydantic's lax coercions, and json.loads' BOM and NaN, are routed
// like their strict spellings (same prefix holder, a decision recorded),
// not answered 400. The verdicts themselves are extproc/openai's table
// (testdata/vllm_verdicts.tsv).
func TestVLLMLaxBodiesAreRouted(t *testing.T) {
	r := newRig(t, nil, envoyharness.DefaultConfig())
	prompt := strings.Repeat("Summarise the quarterly report for the board, section by section. ", 30)
	strict := chatBody("qwen3", prompt)
	res, err := r.reg.Chat(strict)
	if err != nil {
		t.Fatal(err)
	}
	holder := kvfleet.WorkerID{Endpoint: workers[2]}
	if err := r.idx.Store(context.Background(), holder, kvfleet.TierDevice, kvindex.ChainBlocks(res.Sequence)); err != nil {
		t.Fatal(err)
	}
	// chatBody writes {"messages":…,"model":…,"stream":true}; each case
	// swaps in a spelling vLLM coerces.
	lax := map[string][]byte{
		"max_tokens 2.0":          []byte(strings.Replace(string(strict), `"stream":true`, `"stream":true,"max_tokens":2.0`, 1)),
		`max_tokens "2"`:          []byte(strings.Replace(string(strict), `"stream":true`, `"stream":true,"max_tokens":"2"`, 1)),
		"stream 1":                []byte(strings.Replace(string(strict), `"stream":true`, `"stream":1`, 1)),
		`stream "yes"`:            []byte(strings.Replace(string(strict), `"stream":true`, `"stream":"yes"`, 1)),
		"UTF-8 BOM":               append([]byte("\xef\xbb\xbf"), strict...),
		"temperature NaN":         []byte(strings.Replace(string(strict), `"stream":true`, `"stream":true,"temperature":NaN`, 1)),
		"add_generation_prompt 1": []byte(strings.Replace(string(strict), `"stream":true`, `"stream":true,"add_generation_prompt":1`, 1)),
	}
	// json.loads decodes UTF-16 and UTF-32 bodies too (detect_encoding).
	var le16 []byte
	for _, u := range utf16.Encode([]rune(string(strict))) {
		le16 = append(le16, byte(u), byte(u>>8))
	}
	lax["UTF-16LE with its mark"] = append([]byte{0xFF, 0xFE}, le16...)
	before := len(r.router.debug.recent())
	for name, body := range lax {
		x, err := r.harness.Start(context.Background(), post(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if x.Local != nil {
			t.Fatalf("%s: answered %d %s, vLLM serves it", name, x.Local.Status, x.Local.Body)
		}
		if x.Forward.Upstream != workers[2] {
			t.Fatalf("%s: routed to %s, want the prefix holder %s (the same prompt key as the strict spelling)", name, x.Forward.Upstream, workers[2])
		}
		finishResponse(t, x, workers[2])
	}
	waitIdle(t, r.router)
	if got := len(r.router.debug.recent()) - before; got != len(lax) {
		t.Fatalf("%d decisions recorded, want %d", got, len(lax))
	}
	for _, d := range r.router.debug.recent() {
		if d.Model != "qwen3" || d.Blocks != len(res.Sequence) {
			t.Fatalf("decision %+v: want model qwen3 keyed on %d blocks", d, len(res.Sequence))
		}
	}
	got, err := r.reg.Chat(lax["stream 1"])
	if err != nil || !got.Stream {
		t.Fatalf(`"stream": 1 read as stream=%v (%v), vLLM streams it`, got != nil && got.Stream, err)
	}
}
