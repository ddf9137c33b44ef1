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

func casePrefiller(ctx context.Context, e *env) outcome {
	spoof := testNet[1]
	x, err := e.routeOne(ctx, request{hint: e.poolHint(), headers: [][2]string{{prefillerHeader, spoof}}})
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
	eps, p := wellFormed(v, e.offered())
	if p != "" {
		return fail("%s: %s", prefillerHeader, p)
	}
	if len(eps) != 1 || eps[0] == firstOf(destinationOf(x)) {
		return fail("%s %q: want one prefill endpoint other than the primary %s", prefillerHeader, v, firstOf(destinationOf(x)))
	}
	return pass("%s set to %s by the picker; the client's value was dropped", prefillerHeader, v)
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
