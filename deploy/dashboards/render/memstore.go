package main

import (
	"context"
	"slices"
	"sort"
	"sync"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// memStore keeps scraped float samples in memory and serves them to the
// PromQL engine as a storage.Queryable. Prometheus' own TSDB would do the
// same on disk, but its package imports prometheus/config and with it the
// AWS, Azure and Google SDKs; a minute of demo samples fits in memory.
type memStore struct {
	mu     sync.Mutex
	series map[string]*memSeries // by labels.Labels.String()
}

type memSeries struct {
	lset    labels.Labels
	samples []chunks.Sample
}

func newMemStore() *memStore { return &memStore{series: map[string]*memSeries{}} }

// add appends one sample; samples of a series arrive in time order.
func (s *memStore) add(lset labels.Labels, t int64, v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := lset.String()
	ser := s.series[k]
	if ser == nil {
		ser = &memSeries{lset: lset}
		s.series[k] = ser
	}
	if n := len(ser.samples); n > 0 && ser.samples[n-1].T() >= t {
		return
	}
	ser.samples = append(ser.samples, fSample{t: t, f: v})
}

func (s *memStore) Querier(mint, maxt int64) (storage.Querier, error) {
	return &memQuerier{s: s, mint: mint, maxt: maxt}, nil
}

type memQuerier struct {
	s          *memStore
	mint, maxt int64
}

func (q *memQuerier) matching(ms []*labels.Matcher) []*memSeries {
	q.s.mu.Lock()
	defer q.s.mu.Unlock()
	var out []*memSeries
	for _, ser := range q.s.series {
		ok := true
		for _, m := range ms {
			if !m.Matches(ser.lset.Get(m.Name)) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, ser)
		}
	}
	sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].lset, out[j].lset) < 0 })
	return out
}

func (q *memQuerier) Select(_ context.Context, _ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	var list []storage.Series
	for _, ser := range q.matching(ms) {
		q.s.mu.Lock()
		var in []chunks.Sample
		for _, smp := range ser.samples {
			if smp.T() >= q.mint && smp.T() <= q.maxt {
				in = append(in, smp)
			}
		}
		q.s.mu.Unlock()
		if len(in) > 0 {
			list = append(list, storage.NewListSeries(ser.lset, in))
		}
	}
	return &sliceSet{list: list, i: -1}
}

func (q *memQuerier) LabelValues(_ context.Context, name string, _ *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	var out []string
	for _, ser := range q.matching(ms) {
		if v := ser.lset.Get(name); v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out, nil, nil
}

func (q *memQuerier) LabelNames(_ context.Context, _ *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	var out []string
	for _, ser := range q.matching(ms) {
		ser.lset.Range(func(l labels.Label) {
			if !slices.Contains(out, l.Name) {
				out = append(out, l.Name)
			}
		})
	}
	slices.Sort(out)
	return out, nil, nil
}

func (q *memQuerier) Close() error { return nil }

type sliceSet struct {
	list []storage.Series
	i    int
}

func (s *sliceSet) Next() bool                        { s.i++; return s.i < len(s.list) }
func (s *sliceSet) At() storage.Series                { return s.list[s.i] }
func (s *sliceSet) Err() error                        { return nil }
func (s *sliceSet) Warnings() annotations.Annotations { return nil }

// fSample is one float sample.
type fSample struct {
	t int64
	f float64
}

func (s fSample) T() int64                      { return s.t }
func (s fSample) ST() int64                     { return 0 }
func (s fSample) F() float64                    { return s.f }
func (s fSample) H() *histogram.Histogram       { return nil }
func (s fSample) FH() *histogram.FloatHistogram { return nil }
func (s fSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s fSample) Copy() chunks.Sample           { return s }
