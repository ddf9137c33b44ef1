package extproc

import (
	"context"

	"github.com/kvgate/kvgate/extproc/enginetokenize"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/kv/kvfleet"
)

// renderEngines is the fleet side of engine mode (preprocess.Engines,
// models[].preprocess.mode): the engines that may render a model's
// requests now, and the HTTP call to one of them.
type renderEngines struct {
	r      *Router
	client *enginetokenize.Client
}

var _ preprocess.Engines = renderEngines{}

// newRenderEngines dials within the call's timeout and keeps as many idle
// connections per engine as calls may be in flight
// (extproc.preprocess.engine).
func newRenderEngines(r *Router, cfg preprocess.EngineConfig) renderEngines {
	cfg = cfg.Resolved()
	return renderEngines{r: r, client: enginetokenize.New(cfg.Timeout.D(), cfg.MaxConcurrent)}
}

func (e renderEngines) RenderEngines(model string) []string { return e.r.renderEnginesOf(model) }

func (e renderEngines) PostTokenize(ctx context.Context, endpoint string, body []byte, limit int64) (int, []byte, error) {
	return e.client.PostTokenize(ctx, endpoint, body, limit)
}

// renderEnginesOf lists the engines that may render a request of model in
// engine mode: the pool's vLLM workers, once per HTTP endpoint, that are
// not draining, failing their probes or ejected, in the worker set's order. The
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
		// state is nil-safe (outlier detection off: never ejected), as
		// gather reads it.
		if ejected, _ := r.outlier.state(ep, now); ejected {
			continue
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
