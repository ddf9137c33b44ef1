package preprocess

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

func newRegistry(t *testing.T) *Registry {
	t.Helper()
	var models []kvfleet.Model
	for _, name := range []string{"qwen3", "llama3_1"} {
		dir, err := modelfiles.Model(name)
		if err != nil {
			t.Fatal(err)
		}
		models = append(models, kvfleet.Model{Name: name, BlockSize: 16, Tokenizer: dir, Namespace: "ns-" + name, LoRAs: []string{name + "-sql"}})
	}
	// The goldens were rendered at this instant (scripts/oracle/render_chat.py).
	now := func() time.Time { return time.Date(2026, 3, 7, 9, 5, 3, 0, time.UTC) }
	r, err := New(models, Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Every golden chat request, rendered by Python jinja2 and tokenized by
// Hugging Face's binding (scripts/golden-chat.sh), must come out of Chat
// with the same prompt, the same ids, and hashes over those ids.
func TestChatMatchesOracles(t *testing.T) {
	r := newRegistry(t)
	n := 0
	for _, c := range goldenChatCases(t, "../..") {
		n++
		res, err := r.Chat(c.Request)
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		if res.Prompt != c.Prompt {
			t.Errorf("%s: prompt differs from jinja2's\n got %q\nwant %q", c.Name, res.Prompt, c.Prompt)
			continue
		}
		if !slices.Equal(res.Tokens, c.IDs) {
			t.Errorf("%s: ids differ from Hugging Face's", c.Name)
			continue
		}
		seed := blockhash.Seed("", res.Model.Namespace)
		if want := blockhash.SequenceHashes(blockhash.LocalHashes(c.IDs, 16, seed)); !slices.Equal(res.Sequence, want) {
			t.Errorf("%s: sequence hashes differ", c.Name)
		}
	}
	if n < 40 {
		t.Fatalf("only %d golden chat cases", n)
	}
}

func TestUnknownModelIs404(t *testing.T) {
	r := newRegistry(t)
	_, err := r.Chat([]byte(`{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.Status != http.StatusNotFound || oe.Code != "model_not_found" || oe.Param != "model" {
		t.Fatalf("got %#v", err)
	}
	if !strings.Contains(string(oe.JSON()), `"code":"model_not_found"`) {
		t.Fatalf("JSON %s", oe.JSON())
	}
}

// A LoRA adapter is addressed by model name: same tokens as its base
// model, hashes salted with the adapter name so its blocks never match
// the base model's.
func TestLoRASaltsHashes(t *testing.T) {
	r := newRegistry(t)
	base, err := r.Chat([]byte(`{"model":"qwen3","messages":[{"role":"user","content":"` + strings.Repeat("tell me more ", 20) + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	lora, err := r.Chat([]byte(`{"model":"qwen3-sql","messages":[{"role":"user","content":"` + strings.Repeat("tell me more ", 20) + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if lora.LoRA != "qwen3-sql" || lora.Model != base.Model || !slices.Equal(lora.Tokens, base.Tokens) {
		t.Fatalf("lora resolved to %+v", lora)
	}
	if len(base.Sequence) == 0 || lora.Sequence[0] == base.Sequence[0] {
		t.Fatal("LoRA hashes equal the base model's")
	}
	seed := blockhash.Seed("qwen3-sql", "ns-qwen3")
	if want := blockhash.SequenceHashes(blockhash.LocalHashes(base.Tokens, 16, seed)); !slices.Equal(lora.Sequence, want) {
		t.Fatal("LoRA hashes not salted with the adapter name and namespace")
	}
}

func TestCompletionPrompts(t *testing.T) {
	r := newRegistry(t)
	text, err := r.Completion([]byte(`{"model":"llama3_1","prompt":"Once upon a time"}`))
	if err != nil {
		t.Fatal(err)
	}
	plain := text.Model.Tokenizer.Encode("Once upon a time")
	// vLLM's completions endpoint adds Llama's <|begin_of_text|>.
	if len(text.Tokens) != len(plain)+1 || !slices.Equal(text.Tokens[1:], plain) {
		t.Fatalf("text prompt ids %v, want BOS + %v", text.Tokens, plain)
	}
	ids, err := r.Completion([]byte(`{"model":"qwen3","prompt":[[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],[9]],"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(ids.Tokens) != 17 || len(ids.Sequence) != 1 || !ids.Stream {
		t.Fatalf("token prompt: %+v", ids)
	}
}

func TestOversizedPromptIs413(t *testing.T) {
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	lim := openai.DefaultLimits
	lim.MaxPromptTokens = 50
	r, err := New([]kvfleet.Model{{Name: "qwen3", BlockSize: 16, Tokenizer: dir}}, Options{Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Chat([]byte(`{"model":"qwen3","messages":[{"role":"user","content":"` + strings.Repeat("word ", 100) + `"}]}`))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("got %v", err)
	}
}

func TestModelWithoutTokenizerRefused(t *testing.T) {
	if _, err := New([]kvfleet.Model{{Name: "m", BlockSize: 16}}, Options{}); err == nil || !strings.Contains(err.Error(), "tokenizer") {
		t.Fatalf("got %v", err)
	}
}

// A request's cache_salt takes the model namespace's place in the seed, as
// the engine (vLLM: extra_keys of the first block) and Dynamo
// (cache_namespace) salt it: salted and unsalted requests never share
// blocks, and a salted request matches the blocks its engine announced.
func TestCacheSaltSaltsHashes(t *testing.T) {
	r := newRegistry(t)
	content := strings.Repeat("tell me more ", 20)
	plain, err := r.Chat([]byte(`{"model":"qwen3","messages":[{"role":"user","content":"` + content + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	salted, err := r.Chat([]byte(`{"model":"qwen3","cache_salt":"tenant-a","messages":[{"role":"user","content":"` + content + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if salted.CacheSalt != "tenant-a" || !slices.Equal(salted.Tokens, plain.Tokens) || len(plain.Sequence) == 0 {
		t.Fatalf("salted request %+v", salted)
	}
	seed := blockhash.Seed("", "tenant-a")
	if want := blockhash.SequenceHashes(blockhash.LocalHashes(plain.Tokens, 16, seed)); !slices.Equal(salted.Sequence, want) {
		t.Fatal("cache_salt not used as the namespace")
	}
	if salted.Sequence[0] == plain.Sequence[0] {
		t.Fatal("salted and unsalted requests hash alike")
	}
	comp, err := r.Completion([]byte(`{"model":"qwen3","cache_salt":"tenant-a","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := blockhash.SequenceHashes(blockhash.LocalHashes(comp.Tokens, 16, seed)); !slices.Equal(comp.Sequence, want) {
		t.Fatal("completion cache_salt not used as the namespace")
	}
}

// Release hands the token buffer back: the next request of the same size
// reuses it, its ids are its own, and a Result whose ids came from the
// request keeps them.
func TestReleaseRecyclesTokenBuffers(t *testing.T) {
	r := newRegistry(t)
	body := []byte(`{"model":"qwen3","prompt":"The router hashes prompt blocks to pick a warm worker."}`)
	first, err := r.Completion(body)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(first.Tokens)
	seq := slices.Clone(first.Sequence)
	first.Release()
	if first.Tokens != nil || !slices.Equal(first.Sequence, seq) {
		t.Fatalf("after Release: Tokens %v (want nil), Sequence changed", first.Tokens)
	}
	first.Release() // a second Release is a no-op
	second, err := r.Completion(body)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(second.Tokens, want) {
		t.Fatalf("ids after reuse %v, want %v", second.Tokens, want)
	}
	second.Release()

	ids, err := r.Completion([]byte(`{"model":"qwen3","prompt":[1,2,3]}`))
	if err != nil {
		t.Fatal(err)
	}
	ids.Release()
	if !slices.Equal(ids.Tokens, []uint32{1, 2, 3}) {
		t.Fatalf("request's own ids after Release: %v", ids.Tokens)
	}
}
