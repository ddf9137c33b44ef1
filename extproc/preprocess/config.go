package preprocess

import (
	"fmt"
	"time"

	"github.com/kvgate/kvgate/internal/yamlconf"
)

// Config is the extproc.preprocess section of the configuration file,
// declared, defaulted and validated here and composed by extprocconfig.Config.
// It bounds what one request may cost extproc before it is routed
// (render the chat template, tokenize, hash). Every byte of a request is a
// client's, and some inputs cost far more CPU per byte than others: an
// 8 MiB run of one character took 3.5 s to tokenize (SECURITY.md).
//
//	preprocess:
//	  max_prompt_tokens: 1048576        # over → 413; tokenizing stops at the limit
//	  max_word_bytes: 262144            # a longer pre-token → 413, before BPE runs
//	  timeout: 1s                       # template + tokenizer per request; past it → 503
//	  max_output_tokens: 67108864       # max_tokens / max_completion_tokens above → 400
//	  trust_request_chat_template: false
type Config struct {
	// MaxPromptTokens is the longest prompt routed, counted as the engine
	// will see it (chat template and special tokens included).
	MaxPromptTokens int `yaml:"max_prompt_tokens"`
	// MaxWordBytes bounds one pre-token: a run of letters, spaces or
	// symbols the pre-tokenizer cannot split. BPE on a word needs ~21 bytes
	// of state per byte and its cost grows faster than its length; natural
	// text has no word anywhere near the default.
	MaxWordBytes int `yaml:"max_word_bytes"`
	// Timeout bounds the template render plus tokenization of one request;
	// both stop when it passes (or when the client goes away).
	Timeout yamlconf.Duration `yaml:"timeout"`
	// MaxOutputTokens is the largest max_tokens accepted.
	MaxOutputTokens int64 `yaml:"max_output_tokens"`
	// TrustRequestChatTemplate mirrors vLLM's --trust-request-chat-template:
	// false (vLLM's default) answers 400 to a request that brings its own
	// chat_template, as vLLM would; true routes such a request on load
	// alone (kvgate never renders a client's template: its CPU cost is the
	// client's to choose).
	TrustRequestChatTemplate bool `yaml:"trust_request_chat_template"`
}

// Bounds and defaults of the preprocess settings. The prompt and output
// bounds are the picker's (picker.MaxPromptTokens, picker.MaxOutputTokens),
// far above any model, where its arithmetic stays exact.
const (
	DefaultMaxPromptTokens   = 1 << 20
	DefaultMaxWordBytes      = 256 << 10
	DefaultPreprocessTimeout = time.Second
	maxPromptTokensBound     = 1 << 26
	maxOutputTokensBound     = 1 << 26
	minWordBytes             = 1 << 10
	minPreprocessTimeout     = 10 * time.Millisecond
	maxPreprocessTimeout     = time.Minute
)

// ApplyDefaults fills the unset fields (config.Parse calls it).
func (x *Config) ApplyDefaults() {
	if x.MaxPromptTokens == 0 {
		x.MaxPromptTokens = DefaultMaxPromptTokens
	}
	if x.MaxWordBytes == 0 {
		x.MaxWordBytes = DefaultMaxWordBytes
	}
	if x.Timeout == 0 {
		x.Timeout = yamlconf.Duration(DefaultPreprocessTimeout)
	}
	if x.MaxOutputTokens == 0 {
		x.MaxOutputTokens = maxOutputTokensBound
	}
}

// Validate reports the first invalid value; path is the section's key path
// (extproc.preprocess).
func (x *Config) Validate(path string) error {
	switch {
	case x.MaxPromptTokens < 1 || x.MaxPromptTokens > maxPromptTokensBound:
		return fmt.Errorf("%s.max_prompt_tokens: must be in 1..%d, got %d", path, maxPromptTokensBound, x.MaxPromptTokens)
	case x.MaxWordBytes < minWordBytes:
		return fmt.Errorf("%s.max_word_bytes: must be at least %d, got %d", path, minWordBytes, x.MaxWordBytes)
	case x.Timeout.D() < minPreprocessTimeout || x.Timeout.D() > maxPreprocessTimeout:
		return fmt.Errorf("%s.timeout: must be in %s..%s, got %s", path, minPreprocessTimeout, maxPreprocessTimeout, x.Timeout.D())
	case x.MaxOutputTokens < 1 || x.MaxOutputTokens > maxOutputTokensBound:
		return fmt.Errorf("%s.max_output_tokens: must be in 1..%d, got %d", path, maxOutputTokensBound, x.MaxOutputTokens)
	}
	return nil
}
