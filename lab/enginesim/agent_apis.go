package enginesim

// The answers of the two agent APIs vLLM serves beside chat, in their
// non-streamed shapes: Anthropic's message (vLLM's AnthropicMessagesResponse,
// vllm/entrypoints/anthropic/protocol.py at commit
// 82df3f491008e46124f7afb5008c789dc7432515) and OpenAI's response object
// (vLLM's ResponsesResponse, vllm/entrypoints/openai/responses/protocol.py
// at c0bc59655a4068c08621bcac8ab67b39cd2ec173). The simulator always
// stops at max tokens: stop_reason "max_tokens", status "incomplete".

type anthropicText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicUsage struct {
	InputTokens          int `json:"input_tokens"`
	OutputTokens         int `json:"output_tokens"`
	CacheReadInputTokens int `json:"cache_read_input_tokens"`
}

type anthropicMessageBody struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Role       string          `json:"role"`
	Content    []anthropicText `json:"content"`
	Model      string          `json:"model"`
	StopReason string          `json:"stop_reason"`
	Usage      anthropicUsage  `json:"usage"`
}

func anthropicMessage(g *generation, text string, o *Output) anthropicMessageBody {
	return anthropicMessageBody{ID: g.id, Type: "message", Role: "assistant", Content: []anthropicText{{Type: "text", Text: text}},
		Model: g.served, StopReason: "max_tokens",
		Usage: anthropicUsage{InputTokens: o.PromptTokens, OutputTokens: o.OutputTokens, CacheReadInputTokens: o.CachedTokens}}
}

type responsesOutputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type responsesOutputMessage struct {
	ID      string                `json:"id"`
	Type    string                `json:"type"`
	Role    string                `json:"role"`
	Status  string                `json:"status"`
	Content []responsesOutputText `json:"content"`
}

type responsesUsage struct {
	InputTokens        int            `json:"input_tokens"`
	InputTokensDetails map[string]int `json:"input_tokens_details"`
	OutputTokens       int            `json:"output_tokens"`
	TotalTokens        int            `json:"total_tokens"`
}

type responsesBody struct {
	ID        string                   `json:"id"`
	Object    string                   `json:"object"`
	CreatedAt int64                    `json:"created_at"`
	Model     string                   `json:"model"`
	Status    string                   `json:"status"`
	Output    []responsesOutputMessage `json:"output"`
	Usage     responsesUsage           `json:"usage"`
}

func responsesResponse(g *generation, text string, o *Output) responsesBody {
	return responsesBody{ID: g.id, Object: "response", CreatedAt: g.created, Model: g.served, Status: "incomplete",
		Output: []responsesOutputMessage{{ID: "msg_" + g.id, Type: "message", Role: "assistant", Status: "incomplete",
			Content: []responsesOutputText{{Type: "output_text", Text: text, Annotations: []any{}}}}},
		Usage: responsesUsage{InputTokens: o.PromptTokens, InputTokensDetails: map[string]int{"cached_tokens": o.CachedTokens},
			OutputTokens: o.OutputTokens, TotalTokens: o.PromptTokens + o.OutputTokens}}
}
