package extprocd

import (
	"sync"

	"github.com/kvgate/kvgate/extproc/server"
)

// readiness is the one place that decides the extproc's readiness (the
// gRPC health services Envoy checks, server.Server, and the admin /readyz):
// ready once Serve has started serving, unless draining or discovery
// reports a problem (an InferencePool that is gone: the picker keeps
// routing on the last workers, but a gateway with another picker, or a
// rollout, should take over). The reason is what /readyz answers.
type readiness struct {
	srv *server.Server

	mu       sync.Mutex
	started  bool
	draining bool
	// awaitingDiscovery: a discovery source is configured and has not
	// reported its first worker set yet (its informers' caches have not
	// synced). A picker that cannot list its pool or pods (the API server
	// unreachable, or RBAC refusing) knows no workers and must not be ready.
	awaitingDiscovery bool
	discovery         error
}

// discovered records that discovery reported a worker set.
func (r *readiness) discovered() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.awaitingDiscovery = false
	r.apply()
}

// setDiscovery records discovery's problem (nil = none) and applies it.
func (r *readiness) setDiscovery(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.discovery = err
	r.apply()
}

// start marks the extproc started: ready unless something says otherwise.
func (r *readiness) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = true
	r.apply()
}

// drain marks readiness failing for good; the server's own drain
// (server.StartDrain) is the caller's.
func (r *readiness) drain() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.draining = true
}

// apply sets the gRPC health services; the server ignores SetServing
// once it drains.
func (r *readiness) apply() {
	if r.reason() == "" {
		r.srv.SetServing()
	} else {
		r.srv.SetNotServing()
	}
}

// reason is why the extproc is not ready, "" when it is. Callers hold mu.
func (r *readiness) reason() string {
	switch {
	case !r.started:
		return "not ready"
	case r.draining:
		return "draining"
	case r.awaitingDiscovery:
		return "discovery: no worker set yet (the informers have not synced: is the API server reachable, and does RBAC let kvgate list and watch the pool and its pods?)"
	case r.discovery != nil:
		return "discovery: " + r.discovery.Error()
	}
	return ""
}

// status is reason for /readyz.
func (r *readiness) status() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reason()
}
