package preprocess

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/internal/yamlconf"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

var (
	boundedOnce sync.Once
	bounded     *Registry
	boundedErr  error
)

// shippedMaxBodyBytes is extproc.max_body_bytes's default (config applies
// it; this package may not import config, which composes its Config).
const shippedMaxBodyBytes = 8 << 20

// shippedConfig is extproc.preprocess with every default applied.
func shippedConfig() Config {
	var c Config
	c.ApplyDefaults()
	return c
}

// boundedRegistry is qwen3 with the shipped configuration's preprocessing
// bounds (OptionsFor(shippedConfig())), loaded once, with edit applied to
// the configuration first: the bounds are re-derived from it on a copy of
// the loaded registry (loading Qwen3 takes seconds).
func boundedRegistry(t *testing.T, edit func(*Config)) *Registry {
	t.Helper()
	boundedOnce.Do(func() {
		dir, err := modelfiles.Model("qwen3")
		if err != nil {
			boundedErr = err
			return
		}
		bounded, boundedErr = New([]kvfleet.Model{{Name: "qwen3", BlockSize: 16, Tokenizer: dir}}, OptionsFor(shippedConfig(), shippedMaxBodyBytes, ""))
	})
	if boundedErr != nil {
		t.Fatal(boundedErr)
	}
	x := shippedConfig()
	if edit != nil {
		edit(&x)
	}
	o := OptionsFor(x, shippedMaxBodyBytes, "")
	r := *bounded
	r.limits, r.maxWordBytes, r.timeout, r.trustTemplate = o.Limits, o.MaxWordBytes, o.Timeout, o.TrustRequestChatTemplate
	return &r
}

// OptionsFor carries every preprocessing key of the configuration.
func TestOptionsFor(t *testing.T) {
	x := Config{MaxPromptTokens: 7, MaxWordBytes: 8, Timeout: yamlconf.Duration(9 * time.Millisecond), MaxOutputTokens: 10, TrustRequestChatTemplate: true}
	o := OptionsFor(x, 1<<20, "/etc/kvgate")
	if o.Limits.MaxBodyBytes != 1<<20 || o.Limits.MaxPromptTokens != 7 || o.MaxWordBytes != 8 || o.Timeout != 9*time.Millisecond ||
		o.Limits.MaxOutputTokens != 10 || !o.TrustRequestChatTemplate || o.BaseDir != "/etc/kvgate" {
		t.Fatalf("%+v", o)
	}
}

func wantError(t *testing.T, what string, err error, status int, param, contains string) {
	t.Helper()
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.Status != status || oe.Param != param || !strings.Contains(oe.Message, contains) {
		t.Fatalf("%s: got %v (%#v), want %d on %q containing %q", what, err, oe, status, param, contains)
	}
}

func chatBody(content string) []byte {
	return []byte(`{"model":"qwen3","messages":[{"role":"user","content":"` + content + `"}]}`)
}

// An 8 MiB run of one character is refused before BPE runs on it (it took
// 3.5 s to tokenize), with the key that bounds it named.
func TestHugeWordRefused(t *testing.T) {
	r := boundedRegistry(t, nil)
	for _, c := range []string{"a", "中"} { // more kinds of run: tokenizer.TestEncodeBoundedRefusesHugeWords
		body := chatBody(strings.Repeat(c, (8<<20-100)/len(c)))
		_, err := r.Chat(body)
		wantError(t, "8 MiB of "+c, err, http.StatusRequestEntityTooLarge, "messages", "extproc.preprocess.max_word_bytes")
	}
	_, err := r.Completion([]byte(`{"model":"qwen3","prompt":"` + strings.Repeat("z", 300<<10) + `"}`))
	wantError(t, "completion", err, http.StatusRequestEntityTooLarge, "prompt", "over the 262144-byte limit")
}

func TestPromptTokenLimitFromConfig(t *testing.T) {
	r := boundedRegistry(t, func(x *Config) { x.MaxPromptTokens = 64 })
	_, err := r.Chat(chatBody(strings.Repeat("word ", 1<<20)))
	wantError(t, "5 MiB of words", err, http.StatusRequestEntityTooLarge, "messages", "prompt is more than 64 tokens")
	if _, err := r.Chat(chatBody("short")); err != nil {
		t.Fatal(err)
	}
}

// The deadline is the registry's: past it, 503 naming the key; the
// caller's cancellation is ErrCancelled (nobody is left to answer).
func TestPreprocessDeadlineAndCancel(t *testing.T) {
	r := boundedRegistry(t, func(x *Config) { x.Timeout = yamlconf.Duration(time.Minute) })
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for name, call := range map[string]func(context.Context) error{
		"chat": func(ctx context.Context) error { _, err := r.ChatContext(ctx, chatBody("hello")); return err },
		"completion": func(ctx context.Context) error {
			_, err := r.CompletionContext(ctx, []byte(`{"model":"qwen3","prompt":"hello"}`))
			return err
		},
	} {
		err := call(expired)
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.Status != http.StatusServiceUnavailable || oe.Code != "preprocess_timeout" || !strings.Contains(oe.Message, "extproc.preprocess.timeout") {
			t.Fatalf("%s past the deadline: %v", name, err)
		}
		gone, cancelGone := context.WithCancel(context.Background())
		cancelGone()
		if err := call(gone); !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) {
			t.Fatalf("%s cancelled: %v", name, err)
		}
	}
}

// vLLM answers 400 to a request bringing its own template unless started
// with --trust-request-chat-template; kvgate does the same, or with the
// matching key routes it on load alone (never rendering it).
func TestRequestChatTemplate(t *testing.T) {
	strict := boundedRegistry(t, nil)
	trusting := boundedRegistry(t, func(x *Config) { x.TrustRequestChatTemplate = true })
	for body, field := range map[string]string{
		`{"model":"qwen3","chat_template":"{% for m in messages %}{{ m.content }}{% endfor %}","messages":[{"role":"user","content":"hi"}]}`: "chat_template",
		`{"model":"qwen3","chat_template":"","messages":[{"role":"user","content":"hi"}]}`:                                                   "chat_template",
		`{"model":"qwen3","chat_template_kwargs":{"chat_template":"x"},"messages":[{"role":"user","content":"hi"}]}`:                         "chat_template_kwargs.chat_template",
	} {
		_, err := strict.Chat([]byte(body))
		wantError(t, body, err, http.StatusBadRequest, field, "--trust-request-chat-template")
		res, err := trusting.Chat([]byte(body))
		if err != nil || res.Approximate == "" || len(res.Tokens) != 0 {
			t.Fatalf("trusting, %s: %+v, %v", body, res, err)
		}
	}
	if _, err := strict.Chat([]byte(`{"model":"qwen3","chat_template":null,"messages":[{"role":"user","content":"hi"}]}`)); err != nil {
		t.Fatalf("chat_template: null: %v", err)
	}
}

func TestMissingModelAndEmptyBody(t *testing.T) {
	r := boundedRegistry(t, nil)
	for _, body := range []string{`{"messages":[{"role":"user","content":"hi"}]}`, `{"model":"","messages":[{"role":"user","content":"hi"}]}`, `{"model":null,"messages":[{"role":"user","content":"hi"}]}`} {
		_, err := r.Chat([]byte(body))
		wantError(t, body, err, http.StatusBadRequest, "model", "model: required")
	}
	_, err := r.Completion([]byte(`{"prompt":"hi"}`))
	wantError(t, "completion without model", err, http.StatusBadRequest, "model", "model: required")
	_, err = r.Chat(nil)
	wantError(t, "empty chat body", err, http.StatusBadRequest, "", "request body is empty")
	_, err = r.Completion([]byte{})
	wantError(t, "empty completion body", err, http.StatusBadRequest, "", "request body is empty")
}

func TestMaxTokensBoundFromConfig(t *testing.T) {
	r := boundedRegistry(t, nil)
	_, err := r.Chat([]byte(`{"model":"qwen3","max_tokens":9223372036854775807,"messages":[{"role":"user","content":"hi"}]}`))
	wantError(t, "max_tokens 2^63-1", err, http.StatusBadRequest, "max_tokens", "is more than the 67108864 tokens")
	small := boundedRegistry(t, func(x *Config) { x.MaxOutputTokens = 4096 })
	_, err = small.Completion([]byte(`{"model":"qwen3","max_tokens":4097,"prompt":"hi"}`))
	wantError(t, "max_tokens over the configured bound", err, http.StatusBadRequest, "max_tokens", "4097 is more than the 4096 tokens")
}
