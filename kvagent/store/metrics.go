package store

import "github.com/prometheus/client_golang/prometheus"

// TierStats are one tier's figures; the Prometheus metric each field feeds
// is named beside it (label tier="host" or "disk").
type TierStats struct {
	Blocks          int    // kvgate_kvagent_blocks
	Bytes           int64  // kvgate_kvagent_bytes
	CapacityBytes   int64  // kvgate_kvagent_capacity_bytes
	Hits            uint64 // kvgate_kvagent_hits_total: blocks served from this tier (Acquire, Get)
	OffloadBytes    uint64 // kvgate_kvagent_offload_bytes_total: bytes stored into this tier
	OnboardBytes    uint64 // kvgate_kvagent_onboard_bytes_total: bytes served from this tier
	Evictions       uint64 // kvgate_kvagent_evictions_total
	OffloadsDropped uint64 // kvgate_kvagent_offloads_dropped_total: host: no slot; disk: queue full, no slot or write error
	CorruptBlocks   uint64 // kvgate_kvagent_corrupt_blocks_total: checksum failures (disk: at recovery too)
	Pinned          int    // kvgate_kvagent_pinned_blocks: blocks pinned now (host: acquired for an onboard or a peer read; disk: being read); eviction skips them
}

// Stats is a snapshot of the store's figures.
type Stats struct {
	Host, Disk          TierStats
	Misses              uint64 // kvgate_kvagent_misses_total: blocks asked for (Acquire, Get) and not resident
	AdmissionRejections uint64 // kvgate_kvagent_admission_rejections_total: blocks leaving host (or offered to a disk-only store) not admitted to disk
	DirectIO            bool   // kvgate_kvagent_direct_io: the disk tier uses O_DIRECT
	DiskQueued          int    // disk writes waiting in the queue
}

// Stats returns the current figures.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	bb := int64(s.cfg.BlockBytes)
	tier := func(t Tier, idx *tierIndex) TierStats {
		ts := TierStats{Hits: s.c.hits[t], OffloadBytes: s.c.offloadBytes[t], OnboardBytes: s.c.onboardBytes[t],
			Evictions: s.c.evictions[t], OffloadsDropped: s.c.dropped[t], CorruptBlocks: s.c.corrupt[t]}
		if idx != nil {
			ts.Blocks = len(idx.entries)
			ts.Bytes = int64(ts.Blocks) * bb
			ts.CapacityBytes = int64(idx.capacity) * bb
			ts.Pinned = idx.pinned
		}
		return ts
	}
	st := Stats{Host: tier(TierHost, s.hostIndex), Disk: tier(TierDisk, s.diskIndex), Misses: s.c.misses, AdmissionRejections: s.c.rejections,
		DiskQueued: len(s.pending)}
	st.DirectIO = s.diskFile != nil && s.diskFile.direct
	return st
}

// collector exports Stats to Prometheus at scrape time, so the metrics and
// Stats can never disagree.
type collector struct {
	s                                                    *Store
	blocks, bytes, capacity, hits, offload, onboard      *prometheus.Desc
	evictions, dropped, corrupt, misses, rejects, direct *prometheus.Desc
	pinned                                               *prometheus.Desc
}

func newCollector(s *Store) *collector {
	tier := []string{"tier"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc("kvgate_kvagent_"+name, help, labels, nil)
	}
	return &collector{s: s,
		blocks:    d("blocks", "Blocks resident in the tier.", tier),
		bytes:     d("bytes", "Bytes of blocks resident in the tier.", tier),
		capacity:  d("capacity_bytes", "Capacity of the tier in bytes.", tier),
		hits:      d("hits_total", "Blocks served from the tier (acquire, get).", tier),
		offload:   d("offload_bytes_total", "Bytes stored into the tier.", tier),
		onboard:   d("onboard_bytes_total", "Bytes served from the tier.", tier),
		evictions: d("evictions_total", "Blocks evicted from the tier.", tier),
		dropped:   d("offloads_dropped_total", "Offloads dropped: host tier full of pinned slots, or disk queue full, no disk slot or write error.", tier),
		corrupt:   d("corrupt_blocks_total", "Blocks dropped for a failed checksum or a torn write.", tier),
		misses:    d("misses_total", "Blocks asked for and not resident in any tier.", nil),
		rejects:   d("admission_rejections_total", "Blocks not admitted to disk by the frequency gate.", nil),
		direct:    d("direct_io", "1 if the disk tier uses O_DIRECT.", nil),
		pinned:    d("pinned_blocks", "Blocks of the tier pinned now (host: acquired for an onboard or a peer read; disk: being read): eviction skips them.", tier),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.blocks, c.bytes, c.capacity, c.hits, c.offload, c.onboard, c.evictions, c.dropped, c.corrupt, c.misses, c.rejects, c.direct, c.pinned} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for _, t := range []struct {
		label string
		ts    TierStats
	}{{"host", st.Host}, {"disk", st.Disk}} {
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, t.label)
		}
		n := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), t.label)
		}
		g(c.blocks, float64(t.ts.Blocks))
		g(c.bytes, float64(t.ts.Bytes))
		g(c.capacity, float64(t.ts.CapacityBytes))
		g(c.pinned, float64(t.ts.Pinned))
		n(c.hits, t.ts.Hits)
		n(c.offload, t.ts.OffloadBytes)
		n(c.onboard, t.ts.OnboardBytes)
		n(c.evictions, t.ts.Evictions)
		n(c.dropped, t.ts.OffloadsDropped)
		n(c.corrupt, t.ts.CorruptBlocks)
	}
	ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(st.Misses))
	ch <- prometheus.MustNewConstMetric(c.rejects, prometheus.CounterValue, float64(st.AdmissionRejections))
	direct := 0.0
	if st.DirectIO {
		direct = 1
	}
	ch <- prometheus.MustNewConstMetric(c.direct, prometheus.GaugeValue, direct)
}
