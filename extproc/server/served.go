package server

import extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

// noteUnreported counts a response that came from an upstream after kvgate
// sent fallbacks, without Envoy reporting the host it used. override_host
// reports it only with selected_host_key set (load_balancer.cc
// addSelectedHostKey), and kvgate sees the report only if envoy.lb is
// forwarded to it (ext_proc.cc addDynamicMetadata); Envoy accepts configs
// without either (GIE-generated gateway configs may lack
// selected_host_key) and still walks the fallbacks, so the request is
// routed as kvgate decided. What kvgate cannot tell is which host served:
// the request stays booked on the primary (load, outlier credit,
// kvgate_extproc_fallbacks_used_total). It says so once in the log and
// counts every such response (kvgate_extproc_served_host_unreported_total).
// A router's own reply (no x-envoy-upstream-service-time) has no served
// host to report, and with one endpoint sent there is nothing to tell.
func (st *streamState) noteUnreported(h *extprocv3.HttpHeaders) {
	if st.ticket == nil || st.served || len(st.sent) < 2 || !hasHeader(h.GetHeaders(), headerUpstreamServiceTime) {
		return
	}
	if n := st.s.c.servedUnreported.Add(1); n == 1 {
		st.s.log.Warn("Envoy reports no served host (override_host without selected_host_key, or envoy.lb not in the ext_proc filter's forwarding_namespaces): requests are routed as decided, but one served by a fallback stays booked on its primary; kvgate_extproc_served_host_unreported_total counts these responses",
			"request_id", st.req.RequestID)
	}
}
