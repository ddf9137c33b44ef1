package loadview

import (
	"sync"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

// Throughput holds each worker's prefill-rate estimate
// (picker.ThroughputEstimator): written once per routed request, at its
// first response byte, and read for every candidate of every request. It
// has its own lock, held for one map lookup and at most one estimator
// update, so neither side waits on anything else (before issue 18 the
// estimates sat under the router's one mutex, with its random source).
// The zero value is not usable; call NewThroughput.
type Throughput struct {
	mu  sync.RWMutex
	est map[kvfleet.WorkerID]*picker.ThroughputEstimator
}

// NewThroughput returns estimates that know no worker yet.
func NewThroughput() *Throughput {
	return &Throughput{est: make(map[kvfleet.WorkerID]*picker.ThroughputEstimator)}
}

// Observe adds one sample to w's estimate: tokens prefilled in seconds.
// A sample the estimator refuses (picker.ThroughputEstimator.Observe: zero
// tokens, a clock jump) leaves the estimate as it was.
func (t *Throughput) Observe(w kvfleet.WorkerID, tokens int64, seconds float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	est := t.est[w]
	if est == nil {
		e, err := picker.NewThroughputEstimator(picker.DefaultThroughputAlpha, 0)
		if err != nil {
			return // the package's own default: cannot happen
		}
		est = &e
		t.est[w] = est
	}
	_ = est.Observe(tokens, seconds)
}

// Rate is w's estimate in prompt tokens per second; ok is false until a
// sample was accepted (the picker then uses its default).
func (t *Throughput) Rate(w kvfleet.WorkerID) (rate float64, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	est := t.est[w]
	if est == nil || est.Samples() == 0 {
		return 0, false
	}
	return est.Rate(), true
}
