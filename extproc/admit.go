package extproc

import (
	"fmt"
	"math"
	"net/http"

	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/picker"
)

// admit applies the pool's admission bounds (extproc.admission) to the
// gathered candidates' load: over a bound, the request is shed with a 429
// that says which. A sheddable request (priority < 0, priority.go) meets
// the bounds scaled by admission.sheddable_fraction, so under saturation
// the lowest priorities go first; the shed request is recorded in the
// decision log with its priority.
func (r *Router) admit(req *server.Request, res *preprocess.Result, cands []picker.Candidate, prio requestPriority) *server.RouteError {
	reason := r.shedReason(cands, prio)
	if reason == "" {
		return nil
	}
	class := "standard"
	if prio.sheddable() {
		class = "sheddable"
	}
	r.metrics.requests.WithLabelValues(res.Served, "shed").Inc()
	r.metrics.shedByClass.WithLabelValues(class).Inc()
	r.debug.add(decisionEntry{
		Time: r.now(), RequestID: req.RequestID, Model: res.Served, Tokens: len(res.Tokens), Blocks: len(res.Sequence),
		Objective: prio.Objective, Priority: prio.Priority, PriorityFrom: prio.From, Shed: reason,
	})
	e := routeError(http.StatusTooManyRequests, "kvgate is shedding load: "+reason, "rate_limit_exceeded", "shed")
	e.Headers = map[string]string{"x-kvgate-shed-reason": reason}
	return e
}

// shedReason says why a request over the bounds is shed, or "".
func (r *Router) shedReason(cands []picker.Candidate, prio requestPriority) string {
	a := r.cfg.Admission
	if a.MaxInflight == 0 && a.MaxQueuedPrefillTokens == 0 {
		return ""
	}
	inflight, queued := 0, int64(0)
	for _, c := range cands {
		inflight += c.Load.InflightRequests
		queued += c.Load.PrefillTokens
	}
	maxInflight, maxQueued, who := int64(a.MaxInflight), a.MaxQueuedPrefillTokens, ""
	if prio.sheddable() {
		// At least 1, so that a bound of 1 still admits someone.
		scale := func(b int64) int64 { return max(1, int64(math.Ceil(float64(b)*a.SheddableFraction))) }
		if maxInflight > 0 {
			maxInflight = scale(maxInflight)
		}
		if maxQueued > 0 {
			maxQueued = scale(maxQueued)
		}
		who = fmt.Sprintf(" for sheddable requests (priority %d < 0; sheddable_fraction %g)", prio.Priority, a.SheddableFraction)
	}
	switch {
	case maxInflight > 0 && int64(inflight) >= maxInflight:
		return fmt.Sprintf("pool in-flight requests at the bound (%d)%s", maxInflight, who)
	case maxQueued > 0 && queued >= maxQueued:
		return fmt.Sprintf("pool queued prefill tokens at the bound (%d)%s", maxQueued, who)
	}
	return ""
}
