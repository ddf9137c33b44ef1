package tokenizer

import (
	"fmt"
	"testing"
)

// The table finds every indexed string's id and nothing else, and gives
// each entry's string back, whatever the ids.
func TestStringTable(t *testing.T) {
	strs := []string{"b", "", "ab", "Ġthe", "x"}
	ids := []uint32{40, 41, 7, 151000, 3}
	tab := newStringTable(strs, ids, func(e int) bool { return e != 4 }) // "x" not indexed
	for e, s := range strs {
		if got := string(tab.entry(uint32(e))); got != s {
			t.Errorf("entry(%d) = %q, want %q", e, got, s)
		}
	}
	for s, want := range map[string]uint32{"b": 40, "ab": 7, "Ġthe": 151000} {
		if id, ok := tab.lookup(s); !ok || id != want {
			t.Errorf("lookup(%q) = %d, %v; want %d", s, id, ok, want)
		}
	}
	for _, s := range []string{"", "x", "a", "abc", "the"} {
		if id, ok := tab.lookup(s); ok {
			t.Errorf("lookup(%q) = %d, want a miss", s, id)
		}
	}
	if tab.entry(99) != nil || tab.entries() != 5 {
		t.Errorf("entry(99) = %q, entries %d", tab.entry(99), tab.entries())
	}

	// Without ids an entry's id is its number; many strings probe past
	// each other in the index.
	many := make([]string, 5000)
	for i := range many {
		many[i] = fmt.Sprintf("w%d", i)
	}
	byNumber := newStringTable(many, nil, nil)
	for i, s := range many {
		if id, ok := byNumber.lookup(s); !ok || id != uint32(i) {
			t.Fatalf("lookup(%q) = %d, %v", s, id, ok)
		}
	}
	// The first of two equal strings keeps the lookup.
	dup := newStringTable([]string{"a", "a"}, []uint32{5, 6}, nil)
	if id, _ := dup.lookup("a"); id != 5 {
		t.Errorf("duplicate: lookup = %d, want 5", id)
	}
}
