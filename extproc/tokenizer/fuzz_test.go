package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzEncodeRoundTrip: Encode never panics, and decoding gives back the text
// (for Qwen3, its NFC; both models only when no added token is written in
// it, since added tokens cut the text before normalization).
func FuzzEncodeRoundTrip(f *testing.F) {
	qwen := loadModel(f, "qwen3")
	llama := loadModel(f, "llama3_1")
	for _, s := range []string{"", "hello world", "  \n\t x", "don't STOP'll", "\U000E004B\u0301", "<|im_start|>user\nhi<|im_end|>", "12345678", "中文 テスト 한국어", "e\u0301\u0323", "\xff\xfe", "\u2ebf0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hasAdded := func(tok *Tokenizer) bool {
			for _, a := range tok.added {
				if strings.Contains(s, a.Content) {
					return true
				}
			}
			return false
		}
		for _, tc := range []struct {
			tok  *Tokenizer
			want func(string) string
		}{{qwen, nfc}, {llama, func(s string) string { return s }}} {
			ids := tc.tok.Encode(s)
			got := tc.tok.Decode(ids)
			if !utf8.ValidString(s) {
				continue // only "no panic" is asserted for invalid UTF-8
			}
			if hasAdded(tc.tok) {
				continue
			}
			if want := tc.want(s); got != want {
				t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
			}
		}
	})
}
