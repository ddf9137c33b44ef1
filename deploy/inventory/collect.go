package inventory

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// recorder is the prometheus.Registerer handed to a component's own
// registration function (extproc's Router.Register, …): it keeps every
// collector so that its metrics can be described, and registers them on a
// real Registry too, so that a registration the real process would refuse
// (duplicates, inconsistent labels) fails here as well.
type recorder struct {
	reg        *prometheus.Registry
	collectors []prometheus.Collector
}

func newRecorder() *recorder { return &recorder{reg: prometheus.NewRegistry()} }

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) Unregister(c prometheus.Collector) bool {
	i := slices.Index(r.collectors, c)
	if i < 0 {
		return false
	}
	r.collectors = slices.Delete(r.collectors, i, i+1)
	return r.reg.Unregister(c)
}

// describe lists the metric families of the recorded collectors. Names and
// label names come from each collector's Describe, so a metric vector with
// no child yet is listed too. The type comes from a collected sample
// (Metric.Write says which of counter/gauge/histogram/summary it is) or,
// for a vector that has not been used yet, from the vector's Go type. A
// described family that yields neither is an error: the component must be
// exercised more before it can be inventoried.
func (r *recorder) describe(source string) ([]Family, error) {
	var out []Family
	for _, c := range r.collectors {
		fams, err := describeCollector(c, source)
		if err != nil {
			return nil, err
		}
		out = append(out, fams...)
	}
	return out, nil
}

func describeCollector(c prometheus.Collector, source string) ([]Family, error) {
	descs := make(chan *prometheus.Desc)
	go func() { c.Describe(descs); close(descs) }()
	var order []*prometheus.Desc
	for d := range descs {
		order = append(order, d)
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("%s: collector %T describes no metric (unchecked collectors are inventoried by gathering)", source, c)
	}

	type seen struct {
		typ    string
		labels []string
	}
	collected := map[*prometheus.Desc]seen{}
	metrics := make(chan prometheus.Metric)
	go func() { c.Collect(metrics); close(metrics) }()
	var werr error
	for m := range metrics {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			werr = fmt.Errorf("%s: writing %s: %w", source, m.Desc(), err)
			continue
		}
		var names []string
		for _, l := range pb.GetLabel() {
			names = append(names, l.GetName())
		}
		slices.Sort(names)
		collected[m.Desc()] = seen{typ: dtoType(&pb), labels: names}
	}
	if werr != nil {
		return nil, werr
	}

	var out []Family
	for _, d := range order {
		info, err := parseDesc(d)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		labels := append(append([]string(nil), info.constLabels...), info.varLabels...)
		slices.Sort(labels)
		f := Family{Name: info.name, Help: info.help, Labels: labels, Source: source}
		if s, ok := collected[d]; ok {
			f.Type = s.typ
			// The sample's labels must be the described ones: if not, the
			// description was misread.
			if !slices.Equal(s.labels, labels) {
				return nil, fmt.Errorf("%s: %s: described labels %v but a sample has %v", source, info.name, labels, s.labels)
			}
		} else {
			f.Type = vectorType(c)
		}
		if f.Type == "" {
			return nil, fmt.Errorf("%s: %s is described but %T collected no sample of it, so its type is unknown: exercise the component before inventorying it", source, info.name, c)
		}
		out = append(out, f)
	}
	return out, nil
}

func dtoType(m *dto.Metric) string {
	switch {
	case m.Counter != nil:
		return TypeCounter
	case m.Gauge != nil:
		return TypeGauge
	case m.Histogram != nil:
		return TypeHistogram
	case m.Summary != nil:
		return TypeSummary
	}
	return TypeUntyped
}

// vectorType is the type of a metric vector, whose Collect emits nothing
// until a child exists; "" for anything else.
func vectorType(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return TypeCounter
	case *prometheus.GaugeVec:
		return TypeGauge
	case *prometheus.HistogramVec:
		return TypeHistogram
	case *prometheus.SummaryVec:
		return TypeSummary
	}
	return ""
}

// familiesFromGather inventories already gathered families (an unchecked
// collector's, or a scraped /metrics page).
func familiesFromGather(mfs []*dto.MetricFamily, source string) ([]Family, error) {
	var out []Family
	for _, mf := range mfs {
		set := map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				set[l.GetName()] = true
			}
		}
		labels := make([]string, 0, len(set))
		for l := range set {
			labels = append(labels, l)
		}
		slices.Sort(labels)
		t, ok := map[dto.MetricType]string{
			dto.MetricType_COUNTER: TypeCounter, dto.MetricType_GAUGE: TypeGauge, dto.MetricType_HISTOGRAM: TypeHistogram,
			dto.MetricType_SUMMARY: TypeSummary, dto.MetricType_UNTYPED: TypeUntyped, dto.MetricType_GAUGE_HISTOGRAM: TypeHistogram,
		}[mf.GetType()]
		if !ok {
			return nil, fmt.Errorf("%s: %s has unsupported type %v", source, mf.GetName(), mf.GetType())
		}
		out = append(out, Family{Name: mf.GetName(), Help: mf.GetHelp(), Type: t, Labels: labels, Source: source})
	}
	return out, nil
}
