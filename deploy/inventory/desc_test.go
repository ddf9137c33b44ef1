package inventory

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestParseDesc(t *testing.T) {
	cases := []struct {
		name, help   string
		variable     prometheus.ConstrainedLabels
		constLabels  prometheus.Labels
		wantConst    []string
		wantVariable []string
	}{
		{name: "a_total", help: "plain"},
		{name: "b_seconds", help: `tricky "help", with {braces}, = signs and constLabels: {x="y"}`,
			variable: prometheus.ConstrainedLabels{{Name: "worker"}, {Name: "model"}}, wantVariable: []string{"worker", "model"}},
		{name: "vllm:c", help: "h", constLabels: prometheus.Labels{"model_name": `a "quoted", value}`, "engine": "0"},
			variable:  prometheus.ConstrainedLabels{{Name: "finished_reason", Constraint: func(s string) string { return s }}},
			wantConst: []string{"engine", "model_name"}, wantVariable: []string{"finished_reason"}},
	}
	for _, c := range cases {
		d := prometheus.V2.NewDesc(c.name, c.help, c.variable, c.constLabels)
		got, err := parseDesc(d)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got.name != c.name || got.help != c.help || !slices.Equal(got.varLabels, c.wantVariable) || !slices.Equal(got.constLabels, c.wantConst) {
			t.Errorf("%s: parsed %+v from %s", c.name, got, d)
		}
	}
}

func TestParseDescRejectsOtherShapes(t *testing.T) {
	for _, s := range []string{
		"",
		`Desc{fqName: x}`,
		`Desc{fqName: "x", help: "h", unit: "", constLabels: {a=1}, variableLabels: {}}`,
		`Desc{fqName: "x", help: "h", unit: "", constLabels: {}, variableLabels: {a b}}`,
		`Desc{fqName: "x", help: "h", unit: "", constLabels: {}, variableLabels: {a}`,
		`Desc{fqName: "", help: "h", unit: "", constLabels: {}, variableLabels: {}}`,
	} {
		if got, err := parseDescString(s); err == nil {
			t.Errorf("parseDescString(%q) = %+v, want an error", s, got)
		}
	}
}

func FuzzParseDesc(f *testing.F) {
	f.Add(`Desc{fqName: "x", help: "h", unit: "", constLabels: {a="1"}, variableLabels: {b,c(d)}}`)
	f.Add(`Desc{fqName: "x", help: "h", unit: "", constLabels: {}, variableLabels: {}}`)
	f.Fuzz(func(t *testing.T, s string) {
		info, err := parseDescString(s)
		if err != nil {
			return
		}
		for _, l := range append(info.constLabels, info.varLabels...) {
			if !labelNameRe.MatchString(l) {
				t.Fatalf("accepted label name %q from %q", l, s)
			}
		}
		if info.name == "" {
			t.Fatalf("accepted an empty name from %q", s)
		}
	})
}
