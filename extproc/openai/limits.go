package openai

// Limits bounds what a request body may make kvgate allocate. A zero field
// takes its default (DefaultLimits).
type Limits struct {
	// MaxBodyBytes is the largest body accepted (413 above it).
	MaxBodyBytes int
	// MaxDepth is the deepest nesting of arrays and objects (400 above it).
	MaxDepth int
	// MaxStringBytes is the longest decoded JSON string (413 above it).
	MaxStringBytes int
	// MaxMessages is the most chat messages (413 above it).
	MaxMessages int
	// MaxPrompts is the most prompts in one completions batch (413 above it).
	MaxPrompts int
	// MaxPromptTokens is the most token ids across a completions request's
	// token-id prompts (413 above it).
	MaxPromptTokens int
	// MaxOutputTokens is the largest max_tokens / max_completion_tokens
	// accepted (400 above it): the engine would refuse more than its context
	// allows anyway, and the router's arithmetic on the value must not
	// overflow (a max_tokens of 2^63-1 used to surface as a picker error).
	MaxOutputTokens int64
	// MaxKeptValues is the most JSON values kept as trees (tools, tool-call
	// arguments, kwargs, documents, opaque content parts); it bounds memory
	// where the body-size limit alone would not (413 above it).
	MaxKeptValues int
}

// DefaultLimits are sized for long-context chats: an 8 MiB body holds a
// 1M-token prompt as text, and 64-deep nesting is far beyond any tool
// schema seen in practice.
var DefaultLimits = Limits{
	MaxBodyBytes:    8 << 20,
	MaxDepth:        64,
	MaxStringBytes:  8 << 20,
	MaxMessages:     4096,
	MaxPrompts:      1024,
	MaxPromptTokens: 1 << 20,
	// 2^26 (67M) is far beyond any served context window (the largest
	// today are ~10M tokens) and equals picker.MaxOutputTokens.
	MaxOutputTokens: 1 << 26,
	MaxKeptValues:   200_000,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxBodyBytes > 0 {
		d.MaxBodyBytes = l.MaxBodyBytes
	}
	if l.MaxDepth > 0 {
		d.MaxDepth = l.MaxDepth
	}
	if l.MaxStringBytes > 0 {
		d.MaxStringBytes = l.MaxStringBytes
	}
	if l.MaxMessages > 0 {
		d.MaxMessages = l.MaxMessages
	}
	if l.MaxPrompts > 0 {
		d.MaxPrompts = l.MaxPrompts
	}
	if l.MaxPromptTokens > 0 {
		d.MaxPromptTokens = l.MaxPromptTokens
	}
	if l.MaxOutputTokens > 0 {
		d.MaxOutputTokens = l.MaxOutputTokens
	}
	if l.MaxKeptValues > 0 {
		d.MaxKeptValues = l.MaxKeptValues
	}
	return d
}
