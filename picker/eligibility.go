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

// exclusion returns why c may not take a request of stage s, or "" if it may.
func exclusion(c *Candidate, s Stage, cfg *Config) string {
	switch {
	case c.Worker.Unhealthy:
		return ReasonUnhealthy
	case c.Worker.Ejected:
		return ReasonEjected
	case c.Worker.Draining:
		return ReasonDraining
	case c.Worker.Warming:
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
