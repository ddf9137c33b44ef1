package jinja_test

import (
	"testing"

	"github.com/kvgate/kvgate/internal/third_party/jinja"
)

// A chain of '+' renders as the pairwise fold would, whatever mix of
// strings, numbers, lists and undefined values it holds, and wherever the
// first string comes (the fold is numeric, or list concatenation, until
// then).
func TestAddChainEqualsPairwiseFold(t *testing.T) {
	for src, want := range map[string]string{
		`{{ 'a' + 'b' + 'c' }}`:                       "abc",
		`{{ 1 + 2 + 'x' + 3 + 4 }}`:                   "3x34",
		`{{ 1 + 2.5 + 'x' }}`:                         "3.5x",
		`{{ [1] + [2] + 'x' }}`:                       "[1, 2]x",
		`{{ 'x' + [1] + none + undefined_name }}`:     "x[1]",
		`{{ n + n + n }}`:                             "21",
		`{{ s + (n + n) + s }}`:                       "<14<",
		`{{ '<|im_start|>' + r + '\n' + s + 'end' }}`: "<|im_start|>user\n<end",
		`{{ (1 + 2) * 2 + 1 }}`:                       "7",
		`{% set x = 'a' + 'b' %}{{ x + x + x }}`:      "ababab",
		`{{ true + 1 + 'x' }}`:                        "2x",
		// More pieces than the fold's inline array, emitted and joined.
		`{{ 1 + 'b' + 'c' + 'd' + 'e' + 'f' + 'g' + 'h' + 'i' + 'j' }}`:                "1bcdefghij",
		`{% set x = 1 + 'b' + 'c' + 'd' + 'e' + 'f' + 'g' + 'h' + 'i' + 'j' %}{{ x }}`: "1bcdefghij",
		`{{ 1 + 2 }}{{ [1] + [2] }}{{ none + 'x' }}`:                                   "3[1, 2]x",
	} {
		tmpl, err := jinja.Compile(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		got, err := tmpl.Render(map[string]any{"n": 7, "s": "<", "r": "user"})
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got != want {
			t.Errorf("%s: got %q, want %q", src, got, want)
		}
	}
}
