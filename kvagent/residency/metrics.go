package residency

import "github.com/prometheus/client_golang/prometheus"

// collector exports the publisher's counters (Stats) at scrape time. Without
// them a kvagent whose residency events stop reaching the indexer (a
// publish error, a closed socket) would show only in its log, while the
// indexer silently credits the node's host and disk tiers with less and
// less.
type collector struct {
	p                         *Publisher
	batches, events, failures *prometheus.Desc
}

func newCollector(p *Publisher) *collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("kvgate_kvagent_residency_"+name, help, nil, nil)
	}
	return &collector{p: p,
		batches:  d("batches_total", "KV-event batches of host/disk tier residency published."),
		events:   d("events_total", "KV events (BlockStored, BlockRemoved, AllBlocksCleared) published in those batches."),
		failures: d("publish_failures_total", "Batches that could not be encoded or sent (each logged); their events are lost to live subscribers."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.batches
	ch <- c.events
	ch <- c.failures
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	b, e, f := c.p.Stats()
	ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(b))
	ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(e))
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(f))
}
