package extproc

import (
	"sync"
	"time"

	"github.com/kvgate/kvgate/extproc/loadview"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/indexer/index"
	"github.com/kvgate/kvgate/picker"
)

// ticket follows one routed request: it releases kvgate's load accounting
// at the first token (prefill done) and at the end of the stream, whatever
// ends it, and feeds the observed time to first byte back into the
// worker's prefill-throughput estimate.
type ticket struct {
	router   *Router
	worker   index.WorkerID
	model    string
	start    time.Time
	uncached int64
	load     *loadview.Ticket
	prefill  *loadview.Ticket // the prefill worker's leg of a P/D request
	// fallbacks are the endpoints the proxy may walk after the primary.
	fallbacks []string

	once   sync.Once
	served string
	status int // response :status; 0 until response headers pass
}

var (
	_ server.Lifecycle        = (*ticket)(nil)
	_ server.ServedReporter   = (*ticket)(nil)
	_ server.ResponseReporter = (*ticket)(nil)
)

func (t *ticket) ResponseStatus(status int, _ bool) { t.status = status }

func (t *ticket) FirstByte() {
	t.load.PrefillDone()
	t.prefill.Finish(loadview.OutcomeCompleted)
	secs := t.router.now().Sub(t.start).Seconds()
	t.router.metrics.ttfb.Observe(secs)
	if t.uncached <= 0 || secs <= 0 {
		return
	}
	r := t.router
	r.mu.Lock()
	est := r.throughput[t.worker]
	if est == nil {
		e, err := picker.NewThroughputEstimator(picker.DefaultThroughputAlpha, 0)
		if err == nil {
			est = &e
			r.throughput[t.worker] = est
		}
	}
	if est != nil {
		// Time to first byte bounds the prefill time from above (queueing
		// and the network are in it too), so the estimate is conservative.
		_ = est.Observe(t.uncached, secs)
	}
	r.mu.Unlock()
}

func (t *ticket) Served(endpoint string) {
	t.served = endpoint
	if endpoint != "" {
		if primary := t.worker.Endpoint; endpoint != primary {
			t.router.metrics.fallbacksUsed.Inc()
		}
	}
}

func (t *ticket) Finish(o server.Outcome) {
	t.once.Do(func() {
		lo := loadview.OutcomeCompleted
		switch o {
		case server.OutcomeClientCancel:
			lo = loadview.OutcomeCanceled
		case server.OutcomeUpstreamError, server.OutcomeStreamError:
			lo = loadview.OutcomeUpstreamError
		case server.OutcomeTimeout:
			lo = loadview.OutcomeTimeout
		}
		t.load.Finish(lo)
		t.prefill.Finish(lo)
		if t.worker.Endpoint != "" {
			t.router.outlier.observeRequest(t.worker.Endpoint, t.fallbacks, t.served, t.status, t.router.now())
		}
		t.router.metrics.finished.WithLabelValues(o.String()).Inc()
	})
}
