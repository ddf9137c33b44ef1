package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// The single-first-byte path of find (strings.IndexByte) matches exactly
// what the per-byte table walk finds, on texts dense with near-misses.
func TestAddedMatcherSingleFirstByteMatchesTableWalk(t *testing.T) {
	tokens := []AddedToken{{Content: "<|im_start|>"}, {Content: "<|im_end|>"}, {Content: "<think>"}, {Content: "</think>"}, {Content: "<"}, {Content: "<|im"}}
	all := func(AddedToken) bool { return true }
	content := func(a AddedToken) string { return a.Content }
	fast := newAddedMatcher(tokens, all, content)
	if fast.only != '<' {
		t.Fatalf("only = %d, want '<'", fast.only)
	}
	walk := newAddedMatcher(tokens, all, content)
	walk.only = -1
	pieces := []string{"<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|i", "<|im", "</", "<", "|", "a", "text ", "\n", "é"}
	rnd := rand.New(rand.NewPCG(19, 2))
	for i := 0; i < 5000; i++ {
		var sb strings.Builder
		for n := rnd.IntN(10); n > 0; n-- {
			sb.WriteString(pieces[rnd.IntN(len(pieces))])
		}
		s := sb.String()
		for from := 0; from <= len(s); from++ {
			s1, e1, t1, ok1 := fast.find(s, from)
			s2, e2, t2, ok2 := walk.find(s, from)
			if s1 != s2 || e1 != e2 || t1 != t2 || ok1 != ok2 {
				t.Fatalf("%q from %d: IndexByte path (%d,%d,%d,%v), table walk (%d,%d,%d,%v)", s, from, s1, e1, t1, ok1, s2, e2, t2, ok2)
			}
		}
	}
	// Two first bytes: the table walk is kept.
	if m := newAddedMatcher([]AddedToken{{Content: "<a>"}, {Content: "[b]"}}, all, content); m.only != -1 {
		t.Errorf("only = %d with two first bytes, want -1", m.only)
	}
}
