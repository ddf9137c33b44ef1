package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

// target is one /metrics endpoint and the labels Prometheus would attach
// to its series (job, instance, namespace).
type target struct {
	url       string
	job       string
	instance  string
	namespace string
}

// maxPageBytes bounds one scraped page.
const maxPageBytes = 16 << 20

var client = &http.Client{Timeout: 2 * time.Second}

// scrapeOnce reads one target and stores its samples at time t, with
// histogram and summary families expanded into the sample names
// Prometheus stores (_bucket with le, _sum, _count; quantile).
func scrapeOnce(ctx context.Context, st *memStore, tg target, t time.Time) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tg.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", tg.url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxPageBytes))
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", tg.url, err)
	}
	ms := t.UnixMilli()
	for name, mf := range fams {
		for _, m := range mf.GetMetric() {
			base := map[string]string{"job": tg.job, "instance": tg.instance, "namespace": tg.namespace}
			for _, l := range m.GetLabel() {
				base[l.GetName()] = l.GetValue()
			}
			put := func(n string, v float64, extra ...string) {
				b := labels.NewBuilder(labels.FromMap(base))
				b.Set(model.MetricNameLabel, n)
				for i := 0; i+1 < len(extra); i += 2 {
					b.Set(extra[i], extra[i+1])
				}
				st.add(b.Labels(), ms, v)
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				put(name, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				put(name, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				put(name, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					put(name+"_bucket", float64(b.GetCumulativeCount()), "le", formatFloat(b.GetUpperBound()))
				}
				put(name+"_bucket", float64(h.GetSampleCount()), "le", "+Inf")
				put(name+"_sum", h.GetSampleSum())
				put(name+"_count", float64(h.GetSampleCount()))
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				for _, q := range s.GetQuantile() {
					put(name, q.GetValue(), "quantile", formatFloat(q.GetQuantile()))
				}
				put(name+"_sum", s.GetSampleSum())
				put(name+"_count", float64(s.GetSampleCount()))
			}
		}
	}
	return fams, nil
}

// formatFloat writes a bucket bound as Prometheus' exposition does.
func formatFloat(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// engineTargets finds the engines behind the extproc from its per-worker
// gauge: worker labels are "ip:port#rank", the engine's HTTP endpoint.
func engineTargets(fams map[string]*dto.MetricFamily) []string {
	var out []string
	for _, m := range fams["kvgate_extproc_worker_inflight_requests"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() != "worker" {
				continue
			}
			ep, _, _ := strings.Cut(l.GetValue(), "#")
			out = append(out, ep)
		}
	}
	return out
}
