package extproc

import (
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// renderEnginesOf lists the engines that may render a request of model in
// engine mode (preprocess.EngineSource, models[].preprocess.mode): the
// pool's vLLM workers, once per HTTP endpoint, that are not draining,
// failing their probes or ejected, in the worker set's order. The
// preprocessor takes them in turn (round robin); each is the worker's own
// endpoint, the one requests are routed to.
func (r *Router) renderEnginesOf(model string) []string {
	p := r.fleet.Load().pools[model]
	if p == nil {
		return nil
	}
	now := r.now()
	out := make([]string, 0, len(p.renderEngines))
	for _, ep := range p.renderEngines {
		if !r.health.healthy(ep) {
			continue
		}
		if r.outlier != nil {
			if ejected, _ := r.outlier.state(ep, now); ejected {
				continue
			}
		}
		out = append(out, ep)
	}
	return out
}

// rendersChat reports whether w's engine serves /tokenize with chat
// messages: vLLM does (the default kind); SGLang's /tokenize takes a
// prompt only and TensorRT-LLM's server has none
// (preprocess/engine_render.go).
func rendersChat(w kvfleet.Worker) bool { return w.Kind == "" || w.Kind == "vllm" }
