package extproc

import (
	"fmt"
	"net/http"

	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/picker"
)

// admit applies the pool's admission bounds (extproc.admission) to the
// gathered candidates' load: over a bound, the request is shed with a 429
// that says which.
func (r *Router) admit(model string, cands []picker.Candidate) *server.RouteError {
	reason := r.shedReason(cands)
	if reason == "" {
		return nil
	}
	r.metrics.requests.WithLabelValues(model, "shed").Inc()
	e := routeError(http.StatusTooManyRequests, "kvgate is shedding load: "+reason, "rate_limit_exceeded", "shed")
	e.Headers = map[string]string{"x-kvgate-shed-reason": reason}
	return e
}

// shedReason says why a request over the bounds is shed, or "".
func (r *Router) shedReason(cands []picker.Candidate) string {
	a := r.cfg.Admission
	if a.MaxInflight == 0 && a.MaxQueuedPrefillTokens == 0 {
		return ""
	}
	inflight, queued := 0, int64(0)
	for _, c := range cands {
		inflight += c.Load.InflightRequests
		queued += c.Load.PrefillTokens
	}
	switch {
	case a.MaxInflight > 0 && inflight >= a.MaxInflight:
		return fmt.Sprintf("pool in-flight requests at the bound (%d)", a.MaxInflight)
	case a.MaxQueuedPrefillTokens > 0 && queued >= a.MaxQueuedPrefillTokens:
		return fmt.Sprintf("pool queued prefill tokens at the bound (%d)", a.MaxQueuedPrefillTokens)
	}
	return ""
}
