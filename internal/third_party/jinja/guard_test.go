package jinja_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/third_party/jinja"
	"github.com/kvgate/kvgate/lab/testkit/cancelafter"
)

func strings1k(n int) jinja.Value {
	items := make([]jinja.Value, n)
	for i := range items {
		items[i] = jinja.NewString(strings.Repeat("x", 100))
	}
	return jinja.NewList(items)
}

func TestRenderValuesContextRendersLikeRenderValues(t *testing.T) {
	for _, src := range []string{
		`{% for m in items %}{{ loop.index }}:{{ m[:3] }}{% if not loop.last %},{% endif %}{% endfor %}`,
		`{% macro wrap(s) %}[{{ s }}]{% endmacro %}{% for m in items if m %}{{ wrap(m[:1]) }}{% endfor %}`,
		`{% set acc %}{% for m in items %}{{ m|length }}{% endfor %}{% endset %}{{ acc|length }}`,
	} {
		tmpl, err := jinja.Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		data := map[string]jinja.Value{"items": strings1k(3000)}
		want, err := tmpl.RenderValues(data)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.RenderValuesContext(context.Background(), data, jinja.RenderOptions{MaxOutputBytes: 1 << 20})
		if err != nil || got != want {
			t.Fatalf("%s: got %d bytes, %v; want %d bytes", src, len(got), err, len(want))
		}
	}
}

// A cancelled render stops within guardCheckEvery steps, wherever the work
// is: nested loops, empty loop bodies, loop filters, macros, call blocks.
func TestRenderValuesContextStopsWhenCancelled(t *testing.T) {
	for _, src := range []string{
		`{% for a in items %}{% for b in items %}x{% endfor %}{% endfor %}`,
		`{% for a in items %}{% for b in items %}{% endfor %}{% endfor %}`,
		`{% for a in items %}{% for b in items if b == "y" %}{% endfor %}{% endfor %}`,
		`{% macro inner() %}{% for b in items %}x{% endfor %}{% endmacro %}{% for a in items %}{{ inner() }}{% endfor %}`,
		`{% macro box() %}{{ caller() }}{% endmacro %}{% for a in items %}{% call box() %}{% for b in items %}x{% endfor %}{% endcall %}{% endfor %}`,
	} {
		tmpl, err := jinja.Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		// 3,000² = 9M steps uncancelled; the 3rd look cancels.
		ctx := cancelafter.New(3)
		_, err = tmpl.RenderValuesContext(ctx, map[string]jinja.Value{"items": strings1k(3000)}, jinja.RenderOptions{})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: err %v, want context.Canceled", src, err)
		}
		if got := ctx.Looks(); got != 3 {
			t.Fatalf("%s: the context was looked at %d times, want 3 (the render must stop at the look that saw the cancel)", src, got)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tmpl, _ := jinja.Compile(`hello`)
	if _, err := tmpl.RenderValuesContext(ctx, nil, jinja.RenderOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before the render: err %v", err)
	}
}

func TestRenderValuesContextBoundsOutput(t *testing.T) {
	for _, src := range []string{
		`{% for m in items %}{{ m }}{% endfor %}`,
		`{% set acc %}{% for m in items %}{{ m }}{% endfor %}{% endset %}ok`, // captured, never printed
		`{% macro echo(s) %}{{ s }}{% endmacro %}{% for m in items %}{% set _ = echo(m) %}{% endfor %}`,
	} {
		tmpl, err := jinja.Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tmpl.RenderValuesContext(context.Background(), map[string]jinja.Value{"items": strings1k(1000)}, jinja.RenderOptions{MaxOutputBytes: 50_000})
		var ol *jinja.OutputLimitError
		if !errors.As(err, &ol) || ol.Limit != 50_000 {
			t.Fatalf("%s: err %v, want OutputLimitError{50000}", src, err)
		}
	}
	// The last write is checked too, after the last step.
	tmpl, _ := jinja.Compile(`{{ items[0] }}`)
	if _, err := tmpl.RenderValuesContext(context.Background(), map[string]jinja.Value{"items": strings1k(1)}, jinja.RenderOptions{MaxOutputBytes: 99}); err == nil {
		t.Fatal("a single 100-byte write under a 99-byte limit rendered")
	}
}
