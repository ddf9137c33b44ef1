package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The cached path must give the oracle's ids: run every golden corpus text
// (special tokens inside text included) through EncodeCached twice (cold,
// then warm).
func TestEncodeCachedMatchesGoldens(t *testing.T) {
	for _, m := range goldenModels {
		t.Run(m, func(t *testing.T) {
			tok := loadModel(t, m)
			c := NewSegmentCache(64 << 20)
			for pass := 0; pass < 2; pass++ {
				checkCases(t, readCases(t, "golden_"+m+".jsonl"), func(s string) []uint32 { return tok.EncodeCached(nil, s, c) })
			}
			if st := c.Stats(); st.Hits == 0 || st.Misses == 0 {
				t.Fatalf("cache never hit or never missed: %+v", st)
			}
		})
	}
}

// A 20-turn chat, rendered in Qwen's ChatML as vLLM would: every turn's
// prompt encodes identically with and without the cache, and from the
// second turn on the history's segments come from the cache.
func TestEncodeCachedMultiTurnChat(t *testing.T) {
	tok := loadModel(t, "qwen3")
	c := NewSegmentCache(8 << 20)
	var prompt strings.Builder
	prompt.WriteString("<|im_start|>system\nYou are a careful assistant. Answer in the user's language, cite sources, and keep code blocks fenced.<|im_end|>\n")
	for turn := 0; turn < 20; turn++ {
		fmt.Fprintf(&prompt, "<|im_start|>user\nTurn %d: explain step %d of the plan, with the edge cases — naïve approaches, 日本語の例, and\tindented\n    code.<|im_end|>\n", turn, turn*7)
		full := prompt.String() + "<|im_start|>assistant\n"
		before := c.Stats()
		got := tok.EncodeCached(nil, full, c)
		if want := tok.Encode(full); !slices.Equal(got, want) {
			t.Fatalf("turn %d: cached ids differ from a full encode\n%s", turn, firstDifference(got, want))
		}
		after := c.Stats()
		if turn > 0 && after.Hits-before.Hits < uint64(turn) {
			t.Fatalf("turn %d: only %d segment hits, want the %d earlier messages reused", turn, after.Hits-before.Hits, turn)
		}
		if after.Misses-before.Misses > 2 {
			t.Fatalf("turn %d: %d segments encoded afresh, want only the new message and the reply", turn, after.Misses-before.Misses)
		}
		fmt.Fprintf(&prompt, "<|im_start|>assistant\nStep %d: first check the inputs; then the rest follows in order.<|im_end|>\n", turn*7)
	}
}

func TestSegmentCacheStaysWithinItsBound(t *testing.T) {
	tok := loadModel(t, "qwen3")
	const bound = 4096
	c := NewSegmentCache(bound)
	for i := 0; i < 200; i++ {
		text := fmt.Sprintf("<|im_start|>user\nmessage number %d with enough text to be cached as a segment of its own<|im_end|>", i)
		if got, want := tok.EncodeCached(nil, text, c), tok.Encode(text); !slices.Equal(got, want) {
			t.Fatalf("message %d: %s", i, firstDifference(got, want))
		}
		if st := c.Stats(); st.Bytes > bound {
			t.Fatalf("cache holds %d bytes, bound %d", st.Bytes, bound)
		}
	}
	if st := c.Stats(); st.Evictions == 0 {
		t.Fatalf("no evictions with a %d-byte bound: %+v", bound, st)
	}
}
