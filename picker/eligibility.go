package picker

// Reasons a candidate is excluded, shown in Terms.Reason and the debug header.
const (
	ReasonDraining        = "draining"
	ReasonUnhealthy       = "unhealthy"
	ReasonWarming         = "slow-start"
	ReasonEjected         = "ejected"
	ReasonRole            = "role does not serve this stage"
	ReasonInflightBound   = "saturated: in-flight requests at bound"
	ReasonPrefillTokBound = "saturated: queued prefill tokens at bound"
)

// exclusion returns why c may not take a request of stage s, or "" if it
// may. In panic the health flags (Unhealthy, Ejected, Warming) exclude no
// one: Envoy then balances over all hosts (hostSourceToUse, AllHosts).
func exclusion(c *Candidate, s Stage, cfg *Config, inPanic bool) string {
	switch {
	case c.Worker.Unhealthy && !inPanic:
		return ReasonUnhealthy
	case c.Worker.Ejected && !inPanic:
		return ReasonEjected
	case c.Worker.Draining:
		return ReasonDraining
	case c.Worker.Warming && !inPanic:
		return ReasonWarming
	case !serves(c.Worker.Role, s):
		return ReasonRole
	case cfg.MaxInflight > 0 && inflight(&c.Load) >= float64(cfg.MaxInflight):
		return ReasonInflightBound
	case cfg.MaxQueuedPrefillTokens > 0 && c.Load.PrefillTokens >= cfg.MaxQueuedPrefillTokens:
		return ReasonPrefillTokBound
	}
	return ""
}

// healthyPanic applies cfg's healthy panic threshold to the candidates able
// to serve stage s: whether the pick is in panic, and the healthy and
// counted candidates. Draining workers are not counted (Envoy's excluded
// hosts leave the denominator: LoadBalancerBase::isHostSetInPanic), nor
// are those whose role cannot serve s (they are not in this host set).
func healthyPanic(cands []Candidate, s Stage, cfg *Config) (inPanic bool, healthy, hosts int) {
	for i := range cands {
		w := &cands[i].Worker
		if w.Draining || !serves(w.Role, s) {
			continue
		}
		hosts++
		if !w.Unhealthy && !w.Ejected {
			healthy++
		}
	}
	if cfg.HealthyPanicThreshold <= 0 || hosts == 0 {
		return false, healthy, hosts
	}
	return 100*float64(healthy) < cfg.HealthyPanicThreshold*float64(hosts), healthy, hosts
}
