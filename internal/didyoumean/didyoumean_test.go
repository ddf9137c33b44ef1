package didyoumean

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "abc", 3}, {"block_sise", "block_size", 1},
		{"kitten", "sitting", 3}, {"flaw", "lawn", 2}, {"same", "same", 0},
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestClosest(t *testing.T) {
	cands := []string{"block_size", "name", "tokenizer"}
	if got := Closest("block_sise", cands); got != "block_size" {
		t.Errorf("Closest(block_sise) = %q", got)
	}
	if got := Closest("completely_else", cands); got != "" {
		t.Errorf("Closest(far) = %q, want none", got)
	}
	// Ties go to the first candidate in the given order.
	if got := Closest("ab", []string{"ax", "ay"}); got != "ax" {
		t.Errorf("tie = %q, want ax", got)
	}
	if got := Closest("ab", []string{"ay", "ax"}); got != "ay" {
		t.Errorf("tie = %q, want ay", got)
	}
}
