package jinja

import (
	"strings"
	"testing"
)

func TestPyFloatRepr(t *testing.T) {
	// Values as CPython 3.11 prints repr(float(x)).
	for in, want := range map[float64]string{1: "1.0", 1e6: "1000000.0", 0.1: "0.1", 1e16: "1e+16", 1e-5: "1e-05", 0.0001: "0.0001", 123456789.5: "123456789.5", -2.5e-7: "-2.5e-07", 1.5e300: "1.5e+300", 0: "0.0"} {
		if got := pyFloatRepr(in); got != want {
			t.Errorf("repr(%v) = %s, want %s", in, got, want)
		}
	}
}

func TestPyJSONString(t *testing.T) {
	// json.dumps(s, ensure_ascii=False) in CPython 3.11.
	for in, want := range map[string]string{
		"a\"b\\c":          `"a\"b\\c"`,
		"line\nbreak\ttab": `"line\nbreak\ttab"`,
		"\x01\x1f\x7f":     `"\u0001\u001f` + "\x7f" + `"`,
		"<&>\u2028\u2029é": "\"<&>\u2028\u2029é\"",
		"bad\xffutf8":      "\"bad\ufffdutf8\"",
	} {
		var sb strings.Builder
		appendPyJSONString(&sb, in)
		if sb.String() != want {
			t.Errorf("%q → %s, want %s", in, sb.String(), want)
		}
	}
}

func TestTojsonIndentKeepsOrder(t *testing.T) {
	tmpl, err := Compile(`{{ x | tojson(indent=2) }}`)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDict()
	d.AsDict().Set("zeta", NewFloat(1))
	d.AsDict().Set("alpha", NewList([]Value{NewInt(1), NewList(nil), NewDict()}))
	out, err := tmpl.RenderValues(map[string]Value{"x": d})
	if err != nil {
		t.Fatal(err)
	}
	// json.dumps({"zeta": 1.0, "alpha": [1, [], {}]}, indent=2)
	want := "{\n  \"zeta\": 1.0,\n  \"alpha\": [\n    1,\n    [],\n    {}\n  ]\n}"
	if out != want {
		t.Fatalf("got %q\nwant %q", out, want)
	}
}
