package extproc

import (
	"maps"
	"math"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/extproc/server"
)

// ObjectiveHeader names a request's InferenceObjective, as GIE's picker
// reads it (v1.5.0 pkg/epp/metadata/consts.go ObjectiveKey, taken from the
// request headers in pkg/epp/handlers/request.go). Like GIE, kvgate takes
// it from the request: a gateway that must not let clients choose their
// objective sets or removes it per route (an HTTPRoute
// RequestHeaderModifier filter) before the picker sees the request.
const ObjectiveHeader = "x-gateway-inference-objective"

// requestPriority is what admission and the decision record know of a
// request's priority.
type requestPriority struct {
	Objective string // the objective the request named, "" = none
	Priority  int
	// From says where Priority came from: "objective", "header"
	// (extproc.admission.priority_header), or "default" (no objective, or
	// one the pool does not have: priority 0, GIE's default, v1.5.0
	// pkg/epp/requestcontrol/director.go getInferenceObjective).
	From string
}

// sheddable is GIE's rule: a request with a negative priority may be
// dropped under saturation (v1.5.0 pkg/epp/util/request/sheddable.go IsSheddable,
// used by pkg/epp/requestcontrol/admission.go rejectIfSheddableAndSaturated,
// which answers ResourceExhausted: a 429).
func (p requestPriority) sheddable() bool { return p.Priority < 0 }

// SetObjectives replaces the priorities of the pool's InferenceObjectives,
// by objective name (discovery.PoolHooks.Objectives). nil = none known.
func (r *Router) SetObjectives(prio map[string]int) {
	m := maps.Clone(prio)
	r.objectives.Store(&m)
}

// priorityOf reads a request's priority: the operator's priority header
// when extproc.admission.priority_header names one and the request carries
// a valid integer there, else the objective the request names, else 0.
func (r *Router) priorityOf(req *server.Request) requestPriority {
	p := requestPriority{Objective: strings.TrimSpace(req.Headers[ObjectiveHeader]), From: "default"}
	if h := r.cfg.Admission.PriorityHeader; h != "" {
		if v, ok := req.Headers[h]; ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= math.MinInt32 && n <= math.MaxInt32 {
				p.Priority, p.From = n, "header"
				return p
			}
		}
	}
	if p.Objective == "" {
		return p
	}
	if m := r.objectives.Load(); m != nil {
		if n, ok := (*m)[p.Objective]; ok {
			p.Priority, p.From = n, "objective"
		}
	}
	return p
}
