package indexer

import (
	"context"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/kv/ingest"
)

// collector turns the components' counter snapshots into Prometheus
// metrics at scrape time, so the event path itself never touches a
// Prometheus object. Labels: worker (endpoint#rank) and model — bounded by
// the configured fleet.
type collector struct {
	s *Service
}

// Collector exposes the service's metrics (kvgate_indexer_*, kvgate_index_*).
func (s *Service) Collector() prometheus.Collector { return collector{s} }

var (
	workerLabels = []string{"worker", "model"}

	mBatches      = prometheus.NewDesc("kvgate_indexer_batches_total", "Event batches applied to the index, live and replayed.", workerLabels, nil)
	mReplayed     = prometheus.NewDesc("kvgate_indexer_batches_replayed_total", "Event batches obtained from the engine's replay endpoint.", workerLabels, nil)
	mEvents       = prometheus.NewDesc("kvgate_indexer_events_applied_total", "KV events applied, by kind.", append(workerLabels, "kind"), nil)
	mRejected     = prometheus.NewDesc("kvgate_indexer_events_rejected_total", "KV events dropped without touching the index, by reason.", append(workerLabels, "reason"), nil)
	mDecodeErr    = prometheus.NewDesc("kvgate_indexer_decode_errors_total", "Event batches that failed to decode (the worker's entries are reset).", workerLabels, nil)
	mMalformed    = prometheus.NewDesc("kvgate_indexer_malformed_messages_total", "ZMQ messages dropped for breaking the framing or the size limit.", workerLabels, nil)
	mGaps         = prometheus.NewDesc("kvgate_indexer_sequence_gaps_total", "Sequence gaps detected in an engine's event stream.", workerLabels, nil)
	mGapsRepaired = prometheus.NewDesc("kvgate_indexer_sequence_gaps_repaired_total", "Sequence gaps closed completely through the replay endpoint.", workerLabels, nil)
	mReplays      = prometheus.NewDesc("kvgate_indexer_replays_total", "Replay requests sent to the engine's replay endpoint.", workerLabels, nil)
	mReplayFail   = prometheus.NewDesc("kvgate_indexer_replay_failures_total", "Replay requests that failed or timed out.", workerLabels, nil)
	mResets       = prometheus.NewDesc("kvgate_indexer_worker_resets_total", "Times a worker's entries were dropped to rebuild from new events (unrepairable gap, engine restart, decode error, engine unreachable).", workerLabels, nil)
	mDeadResets   = prometheus.NewDesc("kvgate_indexer_engine_unreachable_resets_total", "Times a worker's entries were dropped because its engine stayed unreachable past indexer.engine_dead_after.", workerLabels, nil)
	mRestarts     = prometheus.NewDesc("kvgate_indexer_publisher_restarts_total", "Times an engine's event sequence went backwards (engine restart).", workerLabels, nil)
	mHandlerErr   = prometheus.NewDesc("kvgate_indexer_apply_errors_total", "Batches whose application to the index failed.", workerLabels, nil)
	mConnected    = prometheus.NewDesc("kvgate_indexer_connects_total", "Successful connections to the engine's event socket.", workerLabels, nil)
	mLag          = prometheus.NewDesc("kvgate_indexer_lag_seconds", "Age of the engine timestamp on the last applied batch; NaN before the first.", workerLabels, nil)
	mLastSeq      = prometheus.NewDesc("kvgate_indexer_last_sequence", "Sequence number of the last delivered batch.", workerLabels, nil)
	mWorkerBlocks = prometheus.NewDesc("kvgate_indexer_worker_blocks", "(block, tier) entries this worker holds in the index.", workerLabels, nil)

	mBindRefused = prometheus.NewDesc("kvgate_indexer_bind_refused_total", "Bind mode (indexer.events_bind): connections and batches refused, by reason: peer_not_allowed (neither loopback nor events_bind_allow; connection closed), foreign_topic (a batch under an engine's topic from a peer that is not that engine; dropped, connection cut), unknown_topic (no engine has the topic; dropped).", []string{"reason"}, nil)

	mIndexBlocks  = prometheus.NewDesc("kvgate_index_blocks", "Distinct blocks with at least one holder (Redis: approximate).", nil, nil)
	mIndexEntries = prometheus.NewDesc("kvgate_index_entries", "(block, worker, tier) entries (Redis: approximate).", nil, nil)
	mIndexWorkers = prometheus.NewDesc("kvgate_index_workers", "Workers known to the index.", nil, nil)
	mIndexUp      = prometheus.NewDesc("kvgate_index_up", "1 if the index answered the last stats query.", nil, nil)
	mIndexWipes   = prometheus.NewDesc("kvgate_index_wipes_total", "Times the index was found to have lost its data (Redis FLUSHALL or restart without persistence) and every worker was resynced.", nil, nil)
)

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mBatches, mReplayed, mEvents, mRejected, mDecodeErr, mMalformed, mGaps, mGapsRepaired,
		mReplays, mReplayFail, mResets, mDeadResets, mRestarts, mHandlerErr, mConnected, mLag, mLastSeq, mWorkerBlocks,
		mBindRefused, mIndexBlocks, mIndexEntries, mIndexWorkers, mIndexUp, mIndexWipes} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	for _, st := range c.s.snapshot() {
		w, m := st.label, st.model
		ss, is := st.sub.Stats(), st.ing.Stats()
		counter(mBatches, is.Batches, w, m)
		counter(mReplayed, ss.BatchesReplayed, w, m)
		counter(mEvents, is.StoredEvents, w, m, "block_stored")
		counter(mEvents, is.RemovedEvents, w, m, "block_removed")
		counter(mEvents, is.ClearedEvents, w, m, "all_blocks_cleared")
		for r := ingest.RejectReason(0); r < ingest.NumRejectReasons; r++ {
			counter(mRejected, is.Rejected[r], w, m, r.String())
		}
		counter(mDecodeErr, st.decodeErrors.Load(), w, m)
		counter(mMalformed, ss.MalformedDropped, w, m)
		counter(mGaps, ss.GapsDetected, w, m)
		counter(mGapsRepaired, ss.GapsRepaired, w, m)
		counter(mReplays, ss.ReplaysRequested, w, m)
		counter(mReplayFail, ss.ReplayFailures, w, m)
		counter(mResets, ss.Resets, w, m)
		counter(mDeadResets, ss.DeadResets, w, m)
		counter(mRestarts, ss.PublisherRestarts, w, m)
		counter(mHandlerErr, ss.HandlerErrors, w, m)
		counter(mConnected, ss.Connects, w, m)
		gauge(mLag, st.lag(), w, m)
		gauge(mLastSeq, float64(ss.LastSeq), w, m)
		gauge(mWorkerBlocks, float64(is.SequenceEntries), w, m)
	}
	counter(mIndexWipes, c.s.wipes.Load())
	// Zero without bind mode, so that an alert on its increase and a
	// dashboard panel read the same series whatever the mode.
	ls, _ := c.s.listenerStats()
	counter(mBindRefused, ls.RejectedPeers, "peer_not_allowed")
	counter(mBindRefused, ls.ForeignTopic, "foreign_topic")
	counter(mBindRefused, ls.UnknownTopic, "unknown_topic")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stats, err := c.s.idx.Stats(ctx)
	if err != nil {
		gauge(mIndexUp, 0)
		return
	}
	gauge(mIndexUp, 1)
	gauge(mIndexBlocks, float64(stats.Blocks))
	gauge(mIndexEntries, float64(stats.Entries))
	gauge(mIndexWorkers, float64(stats.Workers))
}

// lag is how old the engine's timestamp on the last applied batch is, in
// seconds; NaN before the first batch (Prometheus' "no value yet").
func (st *stream) lag() float64 {
	bits := st.lastBatchTS.Load()
	if bits == 0 {
		return math.NaN()
	}
	return math.Max(0, float64(time.Now().UnixNano())/1e9-math.Float64frombits(bits))
}
