package chattemplate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/internal/third_party/jinja"
)

func parse(t testing.TB, body string) *openai.ChatRequest {
	t.Helper()
	r, err := openai.ParseChat([]byte(body), openai.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseConfigNamedTemplatesAndTokens(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{
	  "chat_template": [{"name": "default", "template": "D{{ bos_token }}"}, {"name": "tool_use", "template": "T{{ tools | length }}"}],
	  "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "unk_token": null,
	  "model_max_length": 1000000000000000019884624838656}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SpecialTokens["bos_token"] != "<s>" || cfg.SpecialTokens["eos_token"] != "</s>" {
		t.Errorf("special tokens = %v", cfg.SpecialTokens)
	}
	if _, ok := cfg.SpecialTokens["unk_token"]; ok {
		t.Errorf("null unk_token kept")
	}
	r, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// transformers: tool_use when tools are given and it exists, else default.
	out, err := r.Render(parse(t, `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}`))
	if err != nil || out != "T1" {
		t.Errorf("with tools: %q, %v", out, err)
	}
	out, err = r.Render(parse(t, `{"messages":[{"role":"user","content":"x"}]}`))
	if err != nil || out != "D<s>" {
		t.Errorf("without tools: %q, %v", out, err)
	}
}

func TestParseConfigRejects(t *testing.T) {
	for _, c := range []string{`[]`, `{"chat_template": 5}`, `{"chat_template": [{"template": "x"}]}`, `{"bos_token": 3}`} {
		if _, err := ParseConfig([]byte(c)); err == nil {
			t.Errorf("%s accepted", c)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	cfg := &Config{Templates: map[string]string{"default": "{% for m in messages %}{{ m.content }}{% endfor %}"}}
	r, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Render(parse(t, `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]}]}`))
	if !errors.Is(err, ErrMediaContent) || !strings.Contains(err.Error(), "messages[0]: content: [1] (image_url)") {
		t.Errorf("media part: %v", err)
	}
	_, err = r.Render(parse(t, `{"messages":[{"role":"user","content":"a"}],"chat_template":"{{ 1 }}"}`))
	if !errors.Is(err, ErrRequestTemplate) {
		t.Errorf("request template: %v", err)
	}
	_, err = r.Render(parse(t, `{"messages":[{"role":"user","content":"a"}],"chat_template_kwargs":{"messages":[]}}`))
	if err == nil || !strings.Contains(err.Error(), `"messages" cannot be set`) {
		t.Errorf("reserved kwarg: %v", err)
	}
	if s := r.Stats(); s.Failures != 3 || s.Renders != 0 {
		t.Errorf("stats = %+v", s)
	}
	if _, err := New(&Config{Templates: map[string]string{"default": "{% if %}"}}, Options{}); err == nil {
		t.Error("broken template compiled")
	}
}

func TestRenderOpenAIContentFormat(t *testing.T) {
	cfg := &Config{Templates: map[string]string{"default": "{% for m in messages %}{% for p in m.content %}[{{ p.type }}:{{ p.text }}]{% endfor %}|{% endfor %}"}}
	r, err := New(cfg, Options{ContentFormat: ContentOpenAI})
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Render(parse(t, `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}},{"type":"input_audio","input_audio":{}}]},{"role":"user","content":"s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "[text:a][image:][audio:]|[text:s]|"; out != want {
		t.Errorf("got %q want %q", out, want)
	}
}

func TestRenderConcurrent(t *testing.T) {
	r, err := New(loadModel(t, "qwen3"), Options{Now: func() time.Time { return fixedNow }})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				text := fmt.Sprintf("goroutine %d message %d", g, i)
				out, err := r.Render(parse(t, `{"messages":[{"role":"user","content":"`+text+`"}]}`))
				want := "<|im_start|>user\n" + text + "<|im_end|>\n<|im_start|>assistant\n"
				if err != nil || out != want {
					errs <- fmt.Errorf("got %q, %v", out, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestStrftimeUnsupported(t *testing.T) {
	if _, err := strftime("%Q", fixedNow); err == nil {
		t.Error("unknown directive accepted")
	}
}

// The real Qwen3 template (loops over the messages backwards, then
// forwards) stops when the request's context ends, and its output is
// bounded.
func TestRenderContextStopsAndBounds(t *testing.T) {
	cfg := loadModel(t, "qwen3")
	msgs := make([]string, 4000)
	for i := range msgs {
		msgs[i] = fmt.Sprintf(`{"role":"user","content":"message %d"}`, i)
	}
	req := parse(t, `{"messages":[`+strings.Join(msgs, ",")+`]}`)
	r, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	full, err := r.RenderContext(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.RenderContext(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err %v", err)
	}
	bounded, err := New(cfg, Options{MaxPromptBytes: len(full) - 1})
	if err != nil {
		t.Fatal(err)
	}
	var ol *jinja.OutputLimitError
	if _, err := bounded.RenderContext(context.Background(), req); !errors.As(err, &ol) {
		t.Fatalf("one byte under the prompt's size: err %v", err)
	}
	exact, _ := New(cfg, Options{MaxPromptBytes: len(full)})
	if out, err := exact.RenderContext(context.Background(), req); err != nil || out != full {
		t.Fatalf("at the prompt's size: %d bytes, %v", len(out), err)
	}
}
