package plannersim

import (
	"fmt"
	"maps"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// Static is a fixed fleet: it starts at its size and never changes.
type Static struct {
	Size map[string]int // replicas per pool
}

var (
	_ plan.Policy = Static{}
	_ Initializer = Static{}
)

// Name is "static-" and the sizes, prefill first: static-3p2d, static-4.
func (s Static) Name() string {
	if n, ok := s.Size[plan.PoolAggregated]; ok && len(s.Size) == 1 {
		return fmt.Sprintf("static-%d", n)
	}
	return fmt.Sprintf("static-%dp%dd", s.Size[plan.PoolPrefill], s.Size[plan.PoolDecode])
}

// Initial is the fleet's size.
func (s Static) Initial() map[string]int { return maps.Clone(s.Size) }

// Decide keeps the size.
func (s Static) Decide(obs plan.Observation) plan.Decision {
	return plan.Decision{Time: obs.Time, Desired: maps.Clone(s.Size), Reason: "static"}
}
