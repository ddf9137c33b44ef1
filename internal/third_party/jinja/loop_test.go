package jinja_test

import (
	"testing"

	"github.com/kvgate/kvgate/internal/third_party/jinja"
)

// loop.cycle picks by the current iteration, in nested loops too.
func TestLoopCycleFollowsTheIteration(t *testing.T) {
	tmpl, err := jinja.Compile(`{% for x in xs %}{{ loop.cycle('a', 'b', 'c') }}{% for y in xs %}{{ loop.cycle(1, 2) }}{% endfor %}|{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(map[string]any{"xs": []any{1, 2, 3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "a1212|b1212|c1212|a1212|"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
