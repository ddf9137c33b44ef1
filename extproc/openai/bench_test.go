package openai

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// chatBody builds a realistic chat body of about size bytes: a system prompt,
// tools, and alternating turns with a tool call every few turns.
func chatBody(size int) []byte {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	type msg struct {
		Role      string `json:"role"`
		Content   any    `json:"content"`
		ToolCalls []call `json:"tool_calls,omitempty"`
	}
	tools := json.RawMessage(`[{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}}]`)
	msgs := []msg{{Role: "system", Content: "You are a helpful assistant. Answer briefly and cite sources."}}
	sentence := "The quick brown fox jumps over the lazy dog while the router picks a worker. "
	for i := 0; ; i++ {
		body, _ := json.Marshal(map[string]any{"model": "qwen3", "stream": true, "max_tokens": 256, "messages": msgs, "tools": tools})
		if len(body) >= size {
			return body
		}
		switch i % 4 {
		case 0:
			msgs = append(msgs, msg{Role: "user", Content: strings.Repeat(sentence, 1+i%5)})
		case 1:
			msgs = append(msgs, msg{Role: "assistant", Content: nil, ToolCalls: []call{{ID: fmt.Sprint("c", i), Type: "function", Function: fn{Name: "get_weather", Arguments: `{"city":"Zürich","unit":"c"}`}}}})
		case 2:
			msgs = append(msgs, msg{Role: "tool", Content: `{"temp": 21}`})
		default:
			msgs = append(msgs, msg{Role: "assistant", Content: []map[string]string{{"type": "text", "text": strings.Repeat(sentence, 2)}}})
		}
	}
}

func BenchmarkParseChat(b *testing.B) {
	for _, size := range []int{1 << 10, 32 << 10, 220 << 10} {
		body := chatBody(size)
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseChat(body, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseCompletionTokenIDs(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","prompt":[`)
	for i := 0; i < 32768; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprint(&sb, (i*7919)%151643)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseCompletion(body, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodingJSONChat is the reference point: encoding/json decoding the
// same bodies into an interface{} tree.
func BenchmarkEncodingJSONChat(b *testing.B) {
	body := chatBody(220 << 10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}
