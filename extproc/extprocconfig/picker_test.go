package extprocconfig

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/kvgate/kvgate/picker"
)

func TestPickerTermsFromYAML(t *testing.T) {
	var x Config
	if err := yaml.Unmarshal([]byte("picker: {terms: {recompute: {enabled: false}, herd: {weight: 0.5}}}"), &x); err != nil {
		t.Fatal(err)
	}
	x.ApplyDefaults()
	if err := x.Validate("extproc"); err != nil {
		t.Fatal(err)
	}
	if len(x.Picker.Terms) != int(picker.NumTerms) {
		t.Fatalf("defaults fill every listed term: %v", x.Picker.Terms)
	}
	if s := x.Picker.Terms["prefill"]; !*s.Enabled || *s.Weight != 1 {
		t.Errorf("prefill defaults: enabled %v weight %v", *s.Enabled, *s.Weight)
	}
	cfg := picker.DefaultConfig()
	cfg.Policy = picker.PolicyKvgate
	if err := x.Picker.Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if !cfg.TermsOff[picker.TermRecompute] || cfg.TermEnabled(picker.TermRecompute) || cfg.Kvgate.HerdWeight != 0.5 {
		t.Errorf("applied: off %v, herd weight %v", cfg.TermsOff, cfg.Kvgate.HerdWeight)
	}
	// The defaults applied change nothing: the picker computes what its
	// own defaults do.
	var d Config
	d.ApplyDefaults()
	got, want := picker.DefaultConfig(), picker.DefaultConfig()
	if err := d.Picker.Apply(&got); err != nil || got != want {
		t.Errorf("default terms applied: %v, %+v, want %+v", err, got, want)
	}
}

func TestPickerTermsValidateNamesThePath(t *testing.T) {
	w := func(v float64) *float64 { return &v }
	for name, tc := range map[string]struct {
		terms map[string]TermSetting
		want  string
	}{
		"unknown term": {map[string]TermSetting{"credit": {}}, "gw.picker.terms.credit: no such term (terms: [prefill decode requests herd recompute])"},
		"negative":     {map[string]TermSetting{"herd": {Weight: w(-1)}}, "gw.picker.terms.herd.weight: term herd weight -1 outside [0, 1e+06]"},
		"fixed":        {map[string]TermSetting{"decode": {Weight: w(2)}}, "gw.picker.terms.decode.weight: term decode has a fixed weight of 1, got 2"},
	} {
		var x Config
		x.Picker.Terms = tc.terms
		x.ApplyDefaults()
		if err := x.Validate("gw"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
}
