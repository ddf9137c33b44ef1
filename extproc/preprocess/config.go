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
//	  engine:                           # models with preprocess.mode engine (or auto without files)
//	    timeout: 200ms                  # one /tokenize call (and within timeout above); past it → routed on load
//	    max_concurrent: 64              # /tokenize calls in flight; beyond → routed on load (overloaded)
//	    cache_entries: 1024             # rendered requests kept, keyed by a hash of the /tokenize body
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
	// Engine bounds the calls to the engines for models whose mode is
	// engine (engine_render.go).
	Engine EngineConfig `yaml:"engine"`
}

// EngineConfig is extproc.preprocess.engine.
type EngineConfig struct {
	// Timeout bounds one /tokenize call; the request's own preprocess
	// timeout bounds it too. Past it the request is routed on load alone
	// (reason timeout): a slow engine must not hold a routing decision.
	Timeout yamlconf.Duration `yaml:"timeout"`
	// MaxConcurrent bounds the /tokenize calls in flight from this
	// extproc; a request finding them all taken is routed on load alone
	// at once (reason overloaded) rather than queue behind them.
	MaxConcurrent int `yaml:"max_concurrent"`
	// CacheEntries bounds the rendered requests kept (a retried or
	// repeated request is not sent again); 0 takes the default, and the
	// cache also holds at most cacheMaxTokens token ids in all.
	CacheEntries int `yaml:"cache_entries"`
}

// Resolved is cfg with its zero (or negative) bounds replaced by the
// defaults: what the renderer (engine_render.go) and the router's HTTP
// client (extproc/render_engines.go) both size themselves by, for a
// configuration that did not pass through Config's defaults.
func (cfg EngineConfig) Resolved() EngineConfig {
	if cfg.Timeout.D() <= 0 {
		cfg.Timeout = yamlconf.Duration(DefaultEngineTimeout)
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = DefaultEngineMaxConcurrent
	}
	if cfg.CacheEntries <= 0 {
		cfg.CacheEntries = DefaultEngineCacheEntries
	}
	return cfg
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
	// A /tokenize call is a loopback-or-LAN HTTP round trip plus the
	// engine's own render: a few milliseconds when the engine is well.
	DefaultEngineTimeout       = 200 * time.Millisecond
	DefaultEngineMaxConcurrent = 64
	DefaultEngineCacheEntries  = 1024
	maxEngineConcurrent        = 1 << 12
	maxEngineCacheEntries      = 1 << 20
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
	if x.Engine.Timeout == 0 {
		x.Engine.Timeout = yamlconf.Duration(DefaultEngineTimeout)
	}
	if x.Engine.MaxConcurrent == 0 {
		x.Engine.MaxConcurrent = DefaultEngineMaxConcurrent
	}
	if x.Engine.CacheEntries == 0 {
		x.Engine.CacheEntries = DefaultEngineCacheEntries
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
	case x.Engine.Timeout.D() < time.Millisecond || x.Engine.Timeout.D() > maxPreprocessTimeout:
		return fmt.Errorf("%s.engine.timeout: must be in %s..%s, got %s", path, time.Millisecond, maxPreprocessTimeout, x.Engine.Timeout.D())
	case x.Engine.MaxConcurrent < 1 || x.Engine.MaxConcurrent > maxEngineConcurrent:
		return fmt.Errorf("%s.engine.max_concurrent: must be in 1..%d, got %d", path, maxEngineConcurrent, x.Engine.MaxConcurrent)
	case x.Engine.CacheEntries < 1 || x.Engine.CacheEntries > maxEngineCacheEntries:
		return fmt.Errorf("%s.engine.cache_entries: must be in 1..%d, got %d", path, maxEngineCacheEntries, x.Engine.CacheEntries)
	}
	return nil
}
