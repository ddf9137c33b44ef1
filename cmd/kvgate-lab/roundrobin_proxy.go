package main

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
)

// newRoundRobinProxy is the demo's baseline: a reverse proxy sending each
// request to the next of targets (host:port) in turn, what Envoy's
// ROUND_ROBIN load balancer does without kvgate (the fallback_policy of
// envoy/envoy-buffered-failopen.yaml). Responses stream through unbuffered
// (FlushInterval -1), as Envoy forwards SSE chunks as they arrive.
func newRoundRobinProxy(targets []string) http.Handler {
	var next atomic.Uint64
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			t := targets[(next.Add(1)-1)%uint64(len(targets))]
			r.SetURL(&url.URL{Scheme: "http", Host: t})
		},
		FlushInterval: -1,
	}
}
