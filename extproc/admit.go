package extproc

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/kvgate/kvgate/extproc/extprocconfig"
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
	return r.shed(req, res, prio, reason, 0)
}

// admitFlow is admit with flow control (extproc.flow_control, flowgate.go):
// over an admission bound, or saturated (flowcontrol.Saturation.
// PoolSaturated), the request waits for room instead of being shed, and is
// refused only when it could not start within max_wait or the queue's
// bounds are full. It
// reports whether the request waited (its load view is then stale) and
// the function to call once it has booked.
func (r *Router) admitFlow(ctx context.Context, req *server.Request, res *preprocess.Result, p *pool, cands []picker.Candidate, prio requestPriority) (bool, func(), *server.RouteError) {
	limit, rerr := r.flowLimitOf(req, res)
	if rerr != nil {
		return false, noop, rerr
	}
	roomNow := r.shedReason(cands, prio) == "" && !r.saturation.PoolSaturated(cands, r.cfg.PD.Enabled && p.hasPD)
	fw := r.flow.enter(ctx, res.Model.Name, prio.Priority, flowKeyOf(r.cfg.FlowControl.Tenant, req, res), int64(len(req.Body)), roomNow, limit)
	switch {
	case fw.cancelled:
		r.metrics.requests.WithLabelValues(res.Served, "client_cancel").Inc()
		return false, fw.done, routeError(req.Path, http.StatusServiceUnavailable, "request cancelled", "service_unavailable", "")
	case fw.shed != "":
		return false, fw.done, r.shed(req, res, prio, fw.shed, r.cfg.FlowControl.RetryAfter.D().Seconds())
	}
	return fw.waited, fw.done, nil
}

// flowLimitOf is how long the request may wait for room: a share of the
// TTFT budget its client states in extproc.flow_control.deadline_header
// (x-slo-ttft-ms, as llm-d's SLO-deadline ordering reads it), else
// max_wait. A malformed budget is answered 400: a client that states a
// deadline wants it kept, and silently waiting max_wait instead would
// keep it waiting past it.
func (r *Router) flowLimitOf(req *server.Request, res *preprocess.Result) (flowLimit, *server.RouteError) {
	fc := &r.cfg.FlowControl
	if fc.ReadsDeadline() {
		if v, ok := req.Headers[fc.DeadlineHeader]; ok {
			budget, err := extprocconfig.DeadlineOf(v)
			if err != nil {
				r.flow.metrics.deadlineFrom[deadlineInvalid].Inc()
				r.metrics.requests.WithLabelValues(res.Served, "bad_request").Inc()
				return flowLimit{}, routeError(req.Path, http.StatusBadRequest, "header "+fc.DeadlineHeader+": "+err.Error(), "invalid_request_error", "invalid_deadline")
			}
			r.flow.metrics.deadlineFrom[deadlineFromHeader].Inc()
			return flowLimit{wait: fc.WaitLimit(budget), budget: budget}, nil
		}
	}
	r.flow.metrics.deadlineFrom[deadlineFromMaxWait].Inc()
	return flowLimit{wait: fc.MaxWait.D()}, nil
}

// poolHasRoom is flow control's saturation judgement for pool model and a
// request of priority prio: the pool is within its admission bounds (for
// that priority) and not saturated: some usable worker is below every
// saturation bound and the workers' mean engine score is under
// pool_mean_score (flowcontrol.Saturation.PoolSaturated,
// extproc.flow_control.saturation). It reads the
// same load the picker weighs (gather), without a prefix match.
func (r *Router) poolHasRoom(model string, prio int) bool {
	p := r.fleet.Load().pools[model]
	if p == nil {
		return true // the request's own pick answers: no worker
	}
	rnd := r.rand.get()
	defer r.rand.put(rnd)
	cands := r.gatherer.gather(p.workers, nil, nil, r.now(), rnd)
	if r.shedReason(cands, requestPriority{Priority: prio}) != "" {
		return false
	}
	return !r.saturation.PoolSaturated(cands, r.cfg.PD.Enabled && p.hasPD)
}

// shed answers 429 for reason and records the refusal; retryAfter > 0
// adds a Retry-After header of that many seconds (rounded up).
func (r *Router) shed(req *server.Request, res *preprocess.Result, prio requestPriority, reason string, retryAfter float64) *server.RouteError {
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
	e := routeError(req.Path, http.StatusTooManyRequests, "kvgate is shedding load: "+reason, "rate_limit_exceeded", "shed")
	e.Headers = map[string]string{"x-kvgate-shed-reason": reason}
	if retryAfter > 0 {
		e.Headers["retry-after"] = strconv.Itoa(int(math.Ceil(retryAfter)))
	}
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
