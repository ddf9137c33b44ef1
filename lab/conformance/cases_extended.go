package conformance

import (
	"context"
)

func extendedCases() []Case {
	return []Case{
		{ID: "body-model-routing", Profile: Extended, Reference: "GIE pkg/bbr (body-based routing: the model is read from the OpenAI body)",
			Checks: "a request naming a model in its body goes only to the endpoints serving that model", run: caseModelRouting},
		{ID: "pd-prefiller-header", Profile: Extended, Reference: "llm-d-routing-sidecar internal/proxy/connector_nixlv2.go (x-prefiller-host-port names the prefill leg)",
			Checks: "a client's x-prefiller-host-port never survives; one the picker sets is a single offered ip:port other than the primary", run: casePrefiller},
		{ID: "objective-header", Profile: Extended, Reference: "GIE pkg/epp/metadata/consts.go ObjectiveKey; pkg/epp/requestcontrol/director.go getInferenceObjective (unknown objective: default priority 0)",
			Checks: "a request naming an objective the pool does not define is routed as a default-priority request", run: caseObjective},
	}
}

func caseModelRouting(ctx context.Context, e *env) outcome {
	models := e.eps.Models()
	if !e.opts.PoolKnown || len(models) < 2 {
		return skip("needs a picker told which endpoint serves which model (an adapter writing its configuration) and at least two models; have %d models, pool known %v", len(models), e.opts.PoolKnown)
	}
	for _, m := range models {
		serving := e.eps.Serving(m)
		for i := 0; i < 4; i++ {
			x, err := e.routeOne(ctx, request{model: m})
			if err != nil {
				return fail("model %s: %v", m, err)
			}
			v := destinationOf(x)
			x.finish(ctx)
			if x.immediate != nil {
				return fail("model %s: refused with %d", m, x.status())
			}
			if _, p := wellFormed(v, serving); p != "" {
				return fail("model %s (served by %q): %s", m, serving, p)
			}
		}
	}
	return pass("%d models, 4 requests each: every destination serves the model the body names", len(models))
}

// casePrefiller asks for a prefill leg where one is likely: a long prompt
// to the second model when the picker knows which endpoints serve it (an
// adapter may give that model's pair prefill and decode roles), else to
// the first model's pool through the hint. A picker may keep any request
// aggregated, so no prefill leg passes too: what must never happen is the
// client's header reaching the decode sidecar.
func casePrefiller(ctx context.Context, e *env) outcome {
	spoof := testNet[1]
	r := request{hint: e.poolHint(), headers: [][2]string{{prefillerHeader, spoof}}}
	offered := e.offered()
	if models := e.eps.Models(); e.opts.PoolKnown && len(models) > 1 {
		r.model, r.hint, offered = models[1], nil, e.eps.Serving(models[1])
	}
	r.body = chatBody(cmpOr(r.model, e.defaultModel()), false, 32<<10)
	x, err := e.routeOne(ctx, r)
	if err != nil {
		return fail("%v", err)
	}
	defer x.finish(ctx)
	if x.immediate != nil {
		return fail("refused with %d", x.status())
	}
	v, n := x.routedHeader(prefillerHeader)
	switch {
	case n == 0:
		return pass("the client's %s: %s was removed; the picker chose no prefill leg", prefillerHeader, spoof)
	case n > 1:
		return fail("%d %s headers after the mutation", n, prefillerHeader)
	case v == spoof:
		return fail("the client's %s: %s reached the upstream", prefillerHeader, spoof)
	}
	eps, p := wellFormed(v, offered)
	if p != "" {
		return fail("%s: %s", prefillerHeader, p)
	}
	if len(eps) != 1 || eps[0] == firstOf(destinationOf(x)) {
		return fail("%s %q: want one prefill endpoint other than the primary %s", prefillerHeader, v, firstOf(destinationOf(x)))
	}
	return pass("the picker set %s: %s (decode at %s); the client's value was dropped", prefillerHeader, v, firstOf(destinationOf(x)))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func firstOf(dest string) string {
	eps, err := parseDestination(dest)
	if err != nil {
		return ""
	}
	return eps[0]
}

func caseObjective(ctx context.Context, e *env) outcome {
	obj := "conformance-undefined-objective"
	x, err := e.routeOne(ctx, request{hint: e.poolHint(), headers: [][2]string{{objectiveHeader, obj}}})
	if err != nil {
		return fail("%v", err)
	}
	defer x.finish(ctx)
	v, p := agreement(x)
	if p == "" {
		_, p = wellFormed(v, e.offered())
	}
	if p != "" {
		return fail("%s: %s: %s", objectiveHeader, obj, p)
	}
	return pass("%s: %s routed to %q", objectiveHeader, obj, v)
}
