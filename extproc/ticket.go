package extproc

import (
	"sync"
	"time"

	"github.com/kvgate/kvgate/extproc/loadview"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// ticket follows one routed request: it releases kvgate's load accounting
// at the first token (prefill done) and at the end of the stream, whatever
// ends it, and feeds the observed time to first byte back into the
// worker's prefill-throughput estimate.
type ticket struct {
	router   *Router
	worker   kvfleet.WorkerID
	model    string
	start    time.Time
	uncached int64
	// decodeBlocks is the KV footprint booked with load.
	decodeBlocks int64
	load         *loadview.Ticket
	prefill      *loadview.Ticket // the prefill worker's leg of a P/D request
	// fallbacks are the endpoints the proxy may walk after the primary,
	// fallbackIDs their workers.
	fallbacks   []string
	fallbackIDs []kvfleet.WorkerID
	// serving is the worker the load is booked on: the primary until the
	// proxy reports that a fallback served.
	serving kvfleet.WorkerID
	// chain is the prompt's block hashes, credited to the serving worker
	// as pending until its KV events arrive (pendingcredit.go).
	chain []uint64

	once   sync.Once
	served string
	status int // response :status; 0 until response headers pass
}

var (
	_ server.Lifecycle        = (*ticket)(nil)
	_ server.ServedReporter   = (*ticket)(nil)
	_ server.ResponseReporter = (*ticket)(nil)
)

// servingWorker is the worker running the request: the primary unless the
// proxy reported a fallback.
func (t *ticket) servingWorker() kvfleet.WorkerID {
	if t.serving.Endpoint != "" {
		return t.serving
	}
	return t.worker
}

func (t *ticket) ResponseStatus(status int, _ bool) { t.status = status }

func (t *ticket) FirstByte() {
	t.load.PrefillDone()
	t.prefill.Finish(loadview.OutcomeCompleted)
	t.router.kickFlow() // the prefill queue shrank
	secs := t.router.now().Sub(t.start).Seconds()
	t.router.metrics.ttfb.Observe(secs)
	if t.uncached <= 0 || secs <= 0 {
		return
	}
	// Time to first byte bounds the prefill time from above (queueing and
	// the network are in it too), so the estimate is conservative.
	t.router.throughput.Observe(t.servingWorker(), t.uncached, secs)
}

// finishUnobserved ends a request whose response Envoy never showed
// kvgate (server.OutcomeUnobserved): the prefill is over by the time Envoy
// closes the stream (at the response headers), so its tokens leave the
// queue now; the decode may go on, so its blocks stay booked for
// extproc.unobserved_hold. No status was seen: outlier detection learns
// nothing.
func (t *ticket) finishUnobserved() {
	t.load.PrefillDone()
	t.prefill.Finish(loadview.OutcomeCompleted)
	if hold := t.router.cfg.UnobservedHold.D(); hold > 0 {
		time.AfterFunc(hold, func() { t.load.Finish(loadview.OutcomeCompleted); t.router.kickFlow() })
	} else {
		t.load.Finish(loadview.OutcomeCompleted)
	}
	t.router.kickFlow()
	t.router.metrics.finished.WithLabelValues(server.OutcomeUnobserved.String()).Inc()
}

// Served is the proxy's report of the endpoint that answered (override_host
// selected_host_key). When it is a fallback, the request's load moves to
// that worker: it is the one prefilling and decoding now.
func (t *ticket) Served(endpoint string) {
	t.served = endpoint
	if endpoint == "" || endpoint == t.worker.Endpoint {
		return
	}
	t.router.metrics.fallbacksUsed.Inc()
	for i, fb := range t.fallbacks {
		if fb != endpoint || i >= len(t.fallbackIDs) {
			continue
		}
		id := t.fallbackIDs[i]
		// The primary did not serve: its booking ends as a failure.
		t.load.Finish(loadview.OutcomeUpstreamError)
		now := t.router.now()
		t.load = t.router.load.Begin(id, t.uncached, t.decodeBlocks, now)
		t.router.withdrawPending(t.servingWorker(), t.chain)
		t.router.pending.Record(id, t.chain, now)
		t.serving = id
		return
	}
}

func (t *ticket) Finish(o server.Outcome) {
	t.once.Do(func() {
		if o == server.OutcomeUnobserved {
			t.finishUnobserved()
			return
		}
		lo := loadview.OutcomeCompleted
		switch o {
		case server.OutcomeClientCancel:
			lo = loadview.OutcomeCanceled
		case server.OutcomeUpstreamError, server.OutcomeStreamError:
			lo = loadview.OutcomeUpstreamError
			t.router.withdrawPending(t.servingWorker(), t.chain)
		case server.OutcomeTimeout:
			lo = loadview.OutcomeTimeout
		}
		t.load.Finish(lo)
		t.prefill.Finish(lo)
		t.router.kickFlow()
		if t.worker.Endpoint != "" {
			t.router.outlier.observeRequest(t.worker.Endpoint, t.fallbacks, t.served, t.status, t.router.now())
		}
		t.router.metrics.finished.WithLabelValues(o.String()).Inc()
	})
}

// kickFlow tells flow control that load fell: a request waiting for room
// may go now (flowgate.go). The accounting has been released before, so
// the saturation judged next sees it.
func (r *Router) kickFlow() {
	if r.flow != nil {
		r.flow.kick()
	}
}
