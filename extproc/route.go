package extproc

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/picker"
)

// Decide implements server.Decider. It is the README's request path, one
// call per stage:
//
//	preprocess → match → gather → admit → pick → book
//
// With flow control (extproc.flow_control, on by default) admit may hold
// the request until its pool has room (admitFlow); then match and gather
// run again on the load of that moment. The router holds no lock of its own and none is held across two stages.
// Each piece of state guards itself, for one read or one write at a time:
// the index (its backend's), the load view (loadview.View.mu: bookings),
// the recent and pending credits (loadview.Recent.mu each: recorded
// chains), the throughput estimates (loadview.Throughput.mu), the outlier
// detector (outlierDetector.mu: ejections), the health checker
// (healthChecker.mu: probe results), the engine metrics
// (enginemetrics.Scraper.mu: samples), the decision log (decisionLog.mu:
// its ring), flow control (flowGate.mu: the pools' queues; it reads the
// load under it, never the other way round); the worker set and the peers' shared load are atomic pointers
// swapped whole; each request draws from its own random source
// (randsource.go).
func (r *Router) Decide(ctx context.Context, req *server.Request) (*server.Decision, *server.RouteError) {
	start := r.now()
	res, rerr := r.preprocess(ctx, req)
	if rerr != nil {
		return nil, rerr
	}
	if res == nil {
		return r.routeUnparsed(req)
	}
	// The token ids are read for their count only, within this call.
	defer res.Release()
	p := r.fleet.Load().pools[res.Model.Name]
	if p == nil {
		r.metrics.requests.WithLabelValues(res.Served, "no_worker").Inc()
		return nil, routeError(req.Path, http.StatusServiceUnavailable, fmt.Sprintf("no worker serves model %s", res.Served), "service_unavailable", "no_eligible_worker")
	}
	rnd := r.rand.get()
	defer r.rand.put(rnd)

	m := newMatchBuffer()
	defer releaseMatchBuffer(m)
	r.match(ctx, p, res.Sequence, start, m)
	cands := r.gatherer.gather(p.workers, m, req.SubsetHint, r.now(), rnd)
	prio := r.priorityOf(req)
	if r.flow == nil {
		if rerr := r.admit(req, res, cands, prio); rerr != nil {
			return nil, rerr
		}
	} else {
		waited, done, rerr := r.admitFlow(ctx, req, res, p, cands, prio)
		defer done() // booked (or failed): the next waiting request may go
		if rerr != nil {
			return nil, rerr
		}
		if waited {
			// Seconds may have passed: the worker set, the index and the
			// load are read again.
			if p = r.fleet.Load().pools[res.Model.Name]; p == nil {
				r.metrics.requests.WithLabelValues(res.Served, "no_worker").Inc()
				return nil, routeError(req.Path, http.StatusServiceUnavailable, fmt.Sprintf("no worker serves model %s", res.Served), "service_unavailable", "no_eligible_worker")
			}
			r.match(ctx, p, res.Sequence, r.now(), m)
			cands = r.gatherer.gather(p.workers, m, req.SubsetHint, r.now(), rnd)
		}
	}
	c, rerr := r.pick(req, res, p, cands, rnd)
	if rerr != nil {
		return nil, rerr
	}
	defer r.release(&c)
	now := r.now()
	d := r.book(p, c, bookingFor(res, c), now)
	r.record(req, res, c, d, prio, now)
	return d, nil
}

// preprocess parses, templates, tokenizes and hashes the body once
// (extproc/preprocess). It returns nil and no error for a request kvgate
// cannot key on a prompt (no body on a path without one, a route it does
// not parse): routeUnparsed routes those. The route is read from :path as
// the engines read it (endpointFor).
func (r *Router) preprocess(ctx context.Context, req *server.Request) (*preprocess.Result, *server.RouteError) {
	ep := endpointFor(req.Path)
	switch {
	case req.Body == nil && req.Method == http.MethodPost && ep.parsed():
		// A POST without a body (Envoy sends end_of_stream on the headers)
		// is a request the engine would refuse: say so instead of routing it.
		r.metrics.requests.WithLabelValues("", "bad_request").Inc()
		e := &openai.Error{Status: http.StatusBadRequest, Message: "request body is empty: want a JSON object with " + ep.required(), Type: "invalid_request_error"}
		return nil, &server.RouteError{Status: e.Status, Body: ep.errorBody(e)}
	case req.Body == nil || !ep.parsed():
		return nil, nil
	}
	if r.reg.UsesEngines() {
		// Models in engine mode are rendered by one of their engines.
		ctx = preprocess.WithEngines(ctx, r.renderers)
	}
	res, err := ep.preprocess(ctx, r.reg, req.Body)
	if err != nil {
		var oe *openai.Error
		if errors.Is(err, preprocess.ErrCancelled) {
			// Nobody is left to answer: the stream's context ended.
			r.metrics.requests.WithLabelValues("", "client_cancel").Inc()
			return nil, routeError(req.Path, http.StatusServiceUnavailable, "request cancelled", "service_unavailable", "")
		}
		if errors.As(err, &oe) {
			r.metrics.requests.WithLabelValues("", outcomeFor(oe.Status)).Inc()
			return nil, &server.RouteError{Status: oe.Status, Body: ep.errorBody(oe)}
		}
		r.metrics.requests.WithLabelValues("", "bad_request").Inc()
		e := &openai.Error{Status: http.StatusBadRequest, Message: err.Error(), Type: "invalid_request_error"}
		return nil, &server.RouteError{Status: e.Status, Body: ep.errorBody(e)}
	}
	if res.Approximate != "" {
		r.metrics.approximate.WithLabelValues(res.ApproximateReason).Inc()
		r.log.Debug("routing without a prefix key", "request_id", req.RequestID, "reason", res.Approximate)
	}
	return res, nil
}

// routeUnparsed routes requests kvgate cannot key on a prompt: gather →
// pick → book, nothing to match or admit. One whose JSON body names a
// model (/v1/embeddings, /tokenize, a
// trailing-slash spelling the engine redirects, …) goes to the least-loaded
// eligible worker of that model's pool, and its decision is recorded: the
// whole fleet would hand it to engines that answer 404 model_not_found
// (issue 31). A served name kvgate does not know is answered 404 as the
// engines answer it, and as kvgate answers it on the routes it parses.
// Requests that name no model (GET /v1/models, header-only requests,
// bodies that are not a JSON object) go to the least-loaded eligible
// worker of the whole fleet: any engine answers them.
func (r *Router) routeUnparsed(req *server.Request) (*server.Decision, *server.RouteError) {
	rnd := r.rand.get()
	defer r.rand.put(rnd)
	f := r.fleet.Load()
	p := &pool{workers: f.all}
	var res *preprocess.Result
	if name, ok := openai.ModelOf(req.Body, r.reg.Limits()); ok {
		m, lora, known := r.reg.Lookup(name)
		if !known {
			r.metrics.requests.WithLabelValues("", "unknown_model").Inc()
			e := openai.ModelNotFound(name)
			return nil, &server.RouteError{Status: e.Status, Body: e.JSON()}
		}
		if p = f.pools[m.Name]; p == nil {
			r.metrics.requests.WithLabelValues(name, "no_worker").Inc()
			return nil, routeError(req.Path, http.StatusServiceUnavailable, fmt.Sprintf("no worker serves model %s", name), "service_unavailable", "no_eligible_worker")
		}
		res = &preprocess.Result{Model: m, Served: name, LoRA: lora}
	}
	cands := r.gatherer.gather(p.workers, nil, req.SubsetHint, r.now(), rnd)
	// The validating Pick (not r.picks): these requests are few (no
	// prompt to key on), and it keeps the package's one-call API in use.
	dec, err := picker.Pick(picker.Request{Stage: picker.StageAggregated, BlockSize: 1}, cands, r.pickConfig, rnd)
	if err != nil || len(cands) == 0 {
		served := ""
		if res != nil {
			served = res.Served
		}
		r.metrics.requests.WithLabelValues(served, "no_worker").Inc()
		return nil, routeError(req.Path, http.StatusServiceUnavailable, "no eligible worker", "service_unavailable", "no_eligible_worker")
	}
	c := choice{dec: dec, cands: cands}
	now := r.now()
	if res == nil {
		d := r.book(p, c, booking{}, now)
		r.metrics.requests.WithLabelValues("", "routed").Inc()
		return d, nil
	}
	d := r.book(p, c, booking{model: res.Served}, now)
	// Not admitted by priority (nothing is estimated for these routes to
	// shed against), but recorded with it like every decision.
	r.record(req, res, c, d, r.priorityOf(req), now)
	return d, nil
}

// routeError is a rejection kvgate decides itself (no worker, shed,
// cancelled), in the shape of the route path addresses (endpoint.errorBody).
func routeError(path string, status int, msg, typ, code string) *server.RouteError {
	e := &openai.Error{Status: status, Message: msg, Type: typ, Code: code}
	return &server.RouteError{Status: status, Body: endpointFor(path).errorBody(e)}
}

// ErrorBody implements server.ErrorShaper: the local replies the ext_proc
// server writes itself (body too large, buffer budget, per-source share,
// timeouts) take the shape of the route, as the Router's own do.
func (r *Router) ErrorBody(path string, e *openai.Error) []byte {
	return endpointFor(path).errorBody(e)
}

func outcomeFor(status int) string {
	switch status {
	case http.StatusNotFound:
		return "unknown_model"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusServiceUnavailable:
		return "preprocess_timeout"
	}
	return "bad_request"
}
