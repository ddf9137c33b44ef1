// Package inventory lists every metric the kvgate processes expose and the
// engine metrics kvgate scrapes, generated from the code rather than typed
// in: each component's collectors are instantiated on a fresh registry and
// described (names, types, label names). Dashboards (deploy/dashboards)
// and alert rules (deploy/alerts) are checked against it by this package's
// tests, so that a renamed metric or label fails `make test` instead of
// leaving an empty panel or an alert that can never fire.
package inventory

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Metric types, as Prometheus' text format names them.
const (
	TypeCounter   = "counter"
	TypeGauge     = "gauge"
	TypeHistogram = "histogram"
	TypeSummary   = "summary"
	TypeUntyped   = "untyped"
)

// Family is one metric family: what a "# TYPE" line names.
type Family struct {
	Name   string
	Type   string
	Help   string
	Labels []string // sorted; the labels the exporter sets (not job/instance)
	Source string   // which process or component exposes it
}

// Series is a sample name a query can select: a family's name, or for
// histograms and summaries one of the _bucket/_sum/_count names.
type Series struct {
	Name   string
	Family *Family
	Labels []string // sorted; le for _bucket, quantile for summary samples
}

// ScrapeLabels are the labels Prometheus (or the operator's ServiceMonitor
// and PodMonitor relabelling) attaches to every scraped series; queries may
// match and group by them on any metric.
var ScrapeLabels = []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}

// Inventory is the set of families, keyed by family name.
type Inventory struct {
	families map[string]*Family
	series   map[string]Series
}

// New builds an inventory from families; the same name from two sources
// must agree on type and labels (one metric means one thing).
func New(fams []Family) (*Inventory, error) {
	inv := &Inventory{families: map[string]*Family{}, series: map[string]Series{}}
	for _, f := range fams {
		if old, ok := inv.families[f.Name]; ok {
			if old.Type != f.Type || !slices.Equal(old.Labels, f.Labels) {
				return nil, fmt.Errorf("metric %s: %s exposes it as %s %v, %s as %s %v", f.Name, old.Source, old.Type, old.Labels, f.Source, f.Type, f.Labels)
			}
			if !strings.Contains(old.Source, f.Source) {
				old.Source += ", " + f.Source
			}
			continue
		}
		f := f
		f.Labels = slices.Sorted(slices.Values(f.Labels))
		inv.families[f.Name] = &f
	}
	for _, f := range inv.families {
		add := func(name string, extra ...string) error {
			if s, ok := inv.series[name]; ok {
				return fmt.Errorf("sample name %s of %s collides with family %s", name, f.Name, s.Family.Name)
			}
			labels := slices.Sorted(slices.Values(append(slices.Clone(f.Labels), extra...)))
			inv.series[name] = Series{Name: name, Family: f, Labels: labels}
			return nil
		}
		var err error
		switch f.Type {
		case TypeHistogram:
			err = firstErr(add(f.Name+"_bucket", "le"), add(f.Name+"_sum"), add(f.Name+"_count"))
		case TypeSummary:
			err = firstErr(add(f.Name, "quantile"), add(f.Name+"_sum"), add(f.Name+"_count"))
		default:
			err = add(f.Name)
		}
		if err != nil {
			return nil, err
		}
	}
	return inv, nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// Lookup finds the series a selector's metric name refers to.
func (inv *Inventory) Lookup(name string) (Series, bool) {
	s, ok := inv.series[name]
	return s, ok
}

// Family returns a family by name.
func (inv *Inventory) Family(name string) (*Family, bool) {
	f, ok := inv.families[name]
	return f, ok
}

// Families lists all families sorted by name.
func (inv *Inventory) Families() []Family {
	out := make([]Family, 0, len(inv.families))
	for _, f := range inv.families {
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
