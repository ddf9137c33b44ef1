package tokenizer

import (
	"context"
	"fmt"
)

// Limits bound the work of one encode. Text reaching kvgate comes from
// clients, and byte-level BPE costs far more on some inputs than on others:
// natural text hits the word cache (~0.02 µs/byte here), while a pre-token
// never seen before goes through the merge loop (0.3–0.8 µs/byte, growing
// with its length), and one long run of a character is a single pre-token.
// An 8 MiB run of "a" took 3.5 s and 176 MB of merge state in one call; the
// Hugging Face binding takes 7.9 s on the same input (BENCHMARKS.md). The
// zero value bounds nothing.
type Limits struct {
	// MaxTokens stops encoding as soon as the ids produced exceed it (they
	// are counted after each pre-token, so the work done past the limit is
	// at most one pre-token's). 0 = no limit.
	MaxTokens int
	// MaxWordBytes refuses a pre-token longer than this before BPE runs on
	// it: the merge state of a word is ~21 bytes per byte of it and its cost
	// grows faster than its length. 0 = no limit.
	MaxWordBytes int
}

// TooManyTokensError: the text encodes to more than Limits.MaxTokens ids.
type TooManyTokensError struct{ Limit int }

func (e *TooManyTokensError) Error() string {
	return fmt.Sprintf("text is more than %d tokens", e.Limit)
}

// WordTooLongError: the text holds a pre-token longer than
// Limits.MaxWordBytes (a run of letters, spaces or symbols with no break
// the pre-tokenizer splits at).
type WordTooLongError struct{ Bytes, Limit int }

func (e *WordTooLongError) Error() string {
	return fmt.Sprintf("text holds a %d-byte word with no break (one pre-token), over the %d-byte limit", e.Bytes, e.Limit)
}

// checkEvery is how many bytes of text pass between two looks at the
// context: at the slowest rate measured (0.8 µs/byte) 64 KiB is ~50 ms, and
// a look costs ~20 ns, nothing next to the 64 KiB of encoding it follows.
const checkEvery = 64 << 10

// budget is one bounded encode's state, threaded through the encoder; a nil
// *budget bounds nothing (the unbounded entry points pass nil, so their hot
// path is unchanged but for a nil test per pre-token).
type budget struct {
	ctx       context.Context
	maxTokens int // 0 = any
	maxLen    int // len(dst) may not exceed this
	maxWord   int // 0 = any
	sinceCk   int // bytes encoded since the context was last looked at
	err       error
}

func newBudget(ctx context.Context, dstLen int, lim Limits) *budget {
	if ctx == nil {
		ctx = context.Background()
	}
	b := &budget{ctx: ctx, maxTokens: lim.MaxTokens, maxLen: int(^uint(0) >> 1), maxWord: lim.MaxWordBytes}
	if lim.MaxTokens > 0 {
		b.maxLen = dstLen + lim.MaxTokens
	}
	return b
}

// stopped reports whether encoding must stop (a limit was hit or the
// context ended); checked before each piece of text.
func (b *budget) stopped() bool { return b != nil && b.err != nil }

// word accounts for one pre-token about to be encoded after dstLen ids; it
// reports false (and records why) when encoding must stop instead.
func (b *budget) word(dstLen, wordLen int) bool {
	if b.err != nil {
		return false
	}
	if dstLen > b.maxLen {
		b.err = &TooManyTokensError{Limit: b.maxTokens}
		return false
	}
	if b.maxWord > 0 && wordLen > b.maxWord {
		b.err = &WordTooLongError{Bytes: wordLen, Limit: b.maxWord}
		return false
	}
	b.sinceCk += wordLen
	if b.sinceCk >= checkEvery {
		b.sinceCk = 0
		if err := b.ctx.Err(); err != nil {
			b.err = err
			return false
		}
	}
	return true
}

// ids accounts for ids appended without pre-tokenizing (an added token, a
// segment-cache hit); it reports false when the limit is passed.
func (b *budget) ids(dstLen int) bool {
	if b.err == nil && dstLen > b.maxLen {
		b.err = &TooManyTokensError{Limit: b.maxTokens}
	}
	return b.err == nil
}

// alive looks at the context from inside a long merge loop; false means
// stop.
func (b *budget) alive() bool {
	if b.err == nil {
		b.err = b.ctx.Err()
	}
	return b.err == nil
}

// result is the error that stopped the encode, checking the final length
// (the last pre-token may have crossed the limit).
func (b *budget) result(dstLen int) error {
	b.ids(dstLen)
	return b.err
}
