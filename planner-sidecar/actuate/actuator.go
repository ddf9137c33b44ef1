// Package actuate carries the planner's decisions out: on Kubernetes
// through the /scale subresource (Deployments, StatefulSets, anything that
// has one) with draining marked on pods, to a file or an HTTP endpoint
// for fleets run by something else, or nowhere at all (advisory mode).
package actuate

import (
	"context"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// Actuator applies decisions and reports the pools' current sizes.
type Actuator interface {
	// Apply marks Decision.Drain replicas draining and sets each pool's
	// size to Decision.Desired (which removes the Decision.Remove ones).
	Apply(ctx context.Context, d plan.Decision) error
	// Current is each pool's requested size as the actuator last set or
	// reads it; a pool missing from the map is unknown (the observed count
	// stands).
	Current(ctx context.Context) (map[string]int, error)
}

// Advisory changes nothing: the planner decides, journals and exports
// metrics, so a policy can be watched against a live fleet before it is
// trusted to act.
type Advisory struct{}

func (Advisory) Apply(context.Context, plan.Decision) error { return nil }

func (Advisory) Current(context.Context) (map[string]int, error) { return map[string]int{}, nil }

// DrainingLabel marks a pod draining; kvgate extproc's Kubernetes discovery
// (extproc/discovery.DrainingKey) stops sending it new requests.
const DrainingLabel = "kvgate.io/draining"

// DeletionCostAnnotation is read by the ReplicaSet controller when scaling
// a Deployment down: pods with the lowest cost go first, so drained pods
// are the ones removed.
const DeletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"

// drainedState folds one decision into the set of draining replicas per pool.
func drainedState(prev map[string][]string, d plan.Decision) map[string][]string {
	out := map[string][]string{}
	for pool, names := range prev {
		out[pool] = append([]string(nil), names...)
	}
	for pool, names := range d.Drain {
		for _, n := range names {
			if !contains(out[pool], n) {
				out[pool] = append(out[pool], n)
			}
		}
	}
	for pool, names := range d.Remove {
		var keep []string
		for _, n := range out[pool] {
			if !contains(names, n) {
				keep = append(keep, n)
			}
		}
		if len(keep) == 0 {
			delete(out, pool)
		} else {
			out[pool] = keep
		}
	}
	return out
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
