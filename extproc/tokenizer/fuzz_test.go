package tokenizer

import (
	"context"
	"errors"
	"slices"
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
			checkBounded(t, tc.tok, s, ids)
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

// checkBounded: a bounded encode agrees with the unbounded one at the
// limits' edges: exactly the ids at a token limit equal to their number, a
// refusal one below it; a word limit refuses only with a longer word, and
// one above any word (NFC and U+FFFD can lengthen the text) never does.
func checkBounded(t *testing.T, tok *Tokenizer, s string, ids []uint32) {
	t.Helper()
	ctx := context.Background()
	got, err := tok.EncodeBounded(ctx, nil, s, EncodeOptions{Limits: Limits{MaxTokens: max(len(ids), 1), MaxWordBytes: 3*len(s) + 4}})
	if err != nil || !slices.Equal(got, ids) {
		t.Fatalf("EncodeBounded(%q) at its own length: %v, %v; want %v", s, got, err, ids)
	}
	if len(ids) > 1 {
		var tm *TooManyTokensError
		if _, err := tok.EncodeBounded(ctx, nil, s, EncodeOptions{Limits: Limits{MaxTokens: len(ids) - 1}}); !errors.As(err, &tm) {
			t.Fatalf("EncodeBounded(%q) one token under: err %v", s, err)
		}
	}
	for _, w := range []int{1, 4, 16} {
		got, err := tok.EncodeBounded(ctx, nil, s, EncodeOptions{Limits: Limits{MaxWordBytes: w}})
		var wl *WordTooLongError
		switch {
		case err == nil && !slices.Equal(got, ids):
			t.Fatalf("EncodeBounded(%q) with words of at most %d bytes: %v, want %v", s, w, got, ids)
		case err != nil && (!errors.As(err, &wl) || wl.Bytes <= w):
			t.Fatalf("EncodeBounded(%q) with words of at most %d bytes: err %v", s, w, err)
		}
	}
}
