package extprocconfig

import (
	"fmt"
	"slices"

	"github.com/kvgate/kvgate/picker"
)

// Picker tunes the picker's cost (extproc.picker).
type Picker struct {
	// Terms switches and weighs the listed terms of the cost by name
	// (picker/terms.go: prefill, decode, requests, herd, recompute). A
	// term not named keeps the picker's default; herd and recompute count
	// only under policy kvgate.
	Terms map[string]TermSetting `yaml:"terms"`
}

// TermSetting is one term's switch and weight.
type TermSetting struct {
	// Enabled: false leaves the term's column at 0. Default true.
	Enabled *bool `yaml:"enabled"`
	// Weight multiplies the term; default the picker's
	// (picker.DefaultConfig: prefill 1 as Dynamo's prefill_load_scale,
	// requests 0 as Dynamo's decode_active_request_weight, herd 0.1,
	// recompute 8). decode's weight is fixed at 1.
	Weight *float64 `yaml:"weight"`
}

// DefaultTermEnabled: every listed term is on unless switched off.
const DefaultTermEnabled = true

// applyDefaults fills every listed term's switch and weight, the weights
// from picker.DefaultConfig, where they are declared once.
func (p *Picker) applyDefaults() {
	if p.Terms == nil {
		p.Terms = map[string]TermSetting{}
	}
	def := picker.DefaultConfig()
	for _, t := range picker.TermList() {
		s := p.Terms[t.Name]
		if s.Enabled == nil {
			on := DefaultTermEnabled
			s.Enabled = &on
		}
		if s.Weight == nil {
			w := def.TermWeight(t.ID)
			s.Weight = &w
		}
		p.Terms[t.Name] = s
	}
}

func (p *Picker) validate(path string) error {
	names := make([]string, 0, len(p.Terms))
	for name := range p.Terms {
		names = append(names, name)
	}
	slices.Sort(names) // the first error is the same on every run
	for _, name := range names {
		id, ok := picker.LookupTerm(name)
		if !ok {
			var known []string
			for _, t := range picker.TermList() {
				known = append(known, t.Name)
			}
			return fmt.Errorf("%s.terms.%s: no such term (terms: %v)", path, name, known)
		}
		if w := p.Terms[name].Weight; w != nil {
			if err := picker.CheckTermWeight(id, *w); err != nil {
				return fmt.Errorf("%s.terms.%s.weight: %w", path, name, err)
			}
		}
	}
	return nil
}

// Apply sets the terms' switches and weights on c (checked by validate).
func (p *Picker) Apply(c *picker.Config) error {
	for name, s := range p.Terms {
		id, ok := picker.LookupTerm(name)
		if !ok {
			return fmt.Errorf("picker.terms.%s: no such term", name)
		}
		if s.Enabled != nil {
			c.TermsOff[id] = !*s.Enabled
		}
		if s.Weight != nil {
			if err := c.SetTermWeight(id, *s.Weight); err != nil {
				return fmt.Errorf("picker.terms.%s.weight: %w", name, err)
			}
		}
	}
	return nil
}
