package tokenizer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/lab/testkit/cancelafter"
)

// A bounded encode that completes is the oracle's encode: every golden
// (Hugging Face tokenizers' ids) encodes exactly under a token limit equal
// to its length, and is refused one below it.
func TestEncodeBoundedMatchesGoldensAtTheLimit(t *testing.T) {
	for _, m := range goldenModels {
		tok := loadModel(t, m)
		cache := NewSegmentCache(1 << 20)
		for _, file := range []string{"golden_" + m + ".jsonl", "golden_fuzz_" + m + ".jsonl"} {
			for i, c := range readCases(t, file) {
				for _, o := range []EncodeOptions{{}, {Cache: cache}} {
					o.Limits = Limits{MaxTokens: len(c.IDs), MaxWordBytes: 3*len(c.Text) + 16} // NFC and U+FFFD may lengthen the text
					if len(c.IDs) == 0 {
						o.Limits.MaxTokens = 1
					}
					got, err := tok.EncodeBounded(context.Background(), nil, c.Text, o)
					if err != nil || !slices.Equal(got, c.IDs) {
						t.Fatalf("%s %s case %d (cache=%v): got %v, %v; want the golden ids", m, file, i, o.Cache != nil, err, c.IDs)
					}
					if len(c.IDs) < 2 {
						continue
					}
					o.Limits.MaxTokens = len(c.IDs) - 1
					_, err = tok.EncodeBounded(context.Background(), nil, c.Text, o)
					var tm *TooManyTokensError
					if !errors.As(err, &tm) || tm.Limit != len(c.IDs)-1 {
						t.Fatalf("%s %s case %d: limit %d for %d ids: err %v, want TooManyTokensError", m, file, i, len(c.IDs)-1, len(c.IDs), err)
					}
				}
			}
		}
		for i, c := range readCases(t, "golden_special_"+m+".jsonl") {
			got, err := tok.EncodeBounded(context.Background(), nil, c.Text, EncodeOptions{SpecialTokens: true, Limits: Limits{MaxTokens: len(c.IDs)}})
			if err != nil || !slices.Equal(got, c.IDs) {
				t.Fatalf("%s special case %d: got %v, %v; want %v", m, i, got, err, c.IDs)
			}
			if len(c.IDs) < 2 {
				continue // MaxTokens 0 means no limit
			}
			if _, err := tok.EncodeBounded(context.Background(), nil, c.Text, EncodeOptions{SpecialTokens: true, Limits: Limits{MaxTokens: len(c.IDs) - 1}}); !IsLimit(err) {
				t.Fatalf("%s special case %d: limit below the ids (BOS counted): err %v", m, i, err)
			}
		}
	}
}

// The limit stops the work, not just the answer: a text of a million
// pre-tokens under a limit of 100 ids returns after about 100 of them.
func TestEncodeBoundedStopsAtTheTokenLimit(t *testing.T) {
	tok := loadModel(t, "qwen3")
	text := strings.Repeat(" hello", 1<<20)
	cache := NewSegmentCache(64 << 20)
	for _, o := range []EncodeOptions{{}, {Cache: cache}, {SpecialTokens: true}} {
		o.Limits = Limits{MaxTokens: 100}
		ids, err := tok.EncodeBounded(context.Background(), nil, text, o)
		var tm *TooManyTokensError
		if !errors.As(err, &tm) || tm.Limit != 100 {
			t.Fatalf("err %v, want TooManyTokensError{100}", err)
		}
		if len(ids) > 102 {
			t.Fatalf("encoded %d ids before stopping at a limit of 100", len(ids))
		}
	}
	if st := cache.Stats(); st.Segments != 0 {
		t.Fatalf("a segment cut short by the limit was cached: %+v", st)
	}
	// Ids already in dst do not count against the limit.
	dst := make([]uint32, 50)
	ids, err := tok.EncodeBounded(context.Background(), dst, " hello hello", EncodeOptions{Limits: Limits{MaxTokens: 2}})
	if err != nil || len(ids) != 52 {
		t.Fatalf("with 50 ids already in dst: %d ids, %v", len(ids), err)
	}
}

func TestEncodeBoundedRefusesHugeWords(t *testing.T) {
	tok := loadModel(t, "qwen3")
	for _, c := range []struct {
		text string
		word int
	}{
		{strings.Repeat("a", 5000), 5000},                   // letters
		{"x" + strings.Repeat(" ", 5000) + "y", 4999},       // a space run gives one space to the next word
		{strings.Repeat("!", 5000), 5000},                   // punctuation
		{"ok " + strings.Repeat("中", 2000) + " fine", 6001}, // CJK run with its leading space
	} {
		_, err := tok.EncodeBounded(context.Background(), nil, c.text, EncodeOptions{Limits: Limits{MaxWordBytes: 4096}})
		var wl *WordTooLongError
		if !errors.As(err, &wl) || wl.Bytes != c.word || wl.Limit != 4096 {
			t.Fatalf("%.20q…: err %v, want WordTooLongError{%d, 4096}", c.text, err, c.word)
		}
		ids, err := tok.EncodeBounded(context.Background(), nil, c.text, EncodeOptions{Limits: Limits{MaxWordBytes: c.word}})
		if err != nil || !slices.Equal(ids, tok.Encode(c.text)) {
			t.Fatalf("%.20q… at a word limit equal to its longest word: %v", c.text, err)
		}
	}
}

func TestEncodeBoundedStopsWhenTheContextEnds(t *testing.T) {
	tok := loadModel(t, "qwen3")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tok.EncodeBounded(ctx, nil, strings.Repeat("word ", 1<<16), EncodeOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before: err %v", err)
	}

	// Many pre-tokens: the context is looked at every checkEvery bytes.
	cd := cancelafter.New(3)
	text := strings.Repeat(" hello", 1<<20) // 6 MiB
	ids, err := tok.EncodeBounded(cd, nil, text, EncodeOptions{})
	if !errors.Is(err, context.Canceled) || cd.Looks() != 3 {
		t.Fatalf("err %v after %d looks, want Canceled at the 3rd", err, cd.Looks())
	}
	if max := 3 * checkEvery / 6; len(ids) > max {
		t.Fatalf("%d ids encoded, want at most %d (3 checks' worth of text)", len(ids), max)
	}

	// One long word: the merge loop itself looks at the context.
	cd = cancelafter.New(2)
	ids, err = tok.EncodeBounded(cd, nil, strings.Repeat("a", 1<<20), EncodeOptions{})
	if !errors.Is(err, context.Canceled) || len(ids) != 0 {
		t.Fatalf("1 MiB word: %d ids, err %v; want it abandoned mid-merge", len(ids), err)
	}
	if got := cd.Looks(); got != 2 {
		t.Fatalf("the merge loop looked %d times, want 2 (stopped at the second)", got)
	}
}

// An unbounded encode keeps working with a nil budget everywhere: the
// old entry points and EncodeBounded with no limits agree.
func TestEncodeBoundedWithoutLimitsIsEncode(t *testing.T) {
	tok := loadModel(t, "llama3_1")
	text := "Hello <|eot_id|> world " + strings.Repeat("z", 300)
	want := tok.Encode(text)
	got, err := tok.EncodeBounded(context.Background(), nil, text, EncodeOptions{})
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
}

// IsLimit lives here because only these tests tell the encode limits apart
// from the context ending; production callers match the typed errors directly.
// IsLimit reports whether err is one of the encode limits (as opposed to
// the context ending).
func IsLimit(err error) bool {
	var tm *TooManyTokensError
	var wl *WordTooLongError
	return errors.As(err, &tm) || errors.As(err, &wl)
}
