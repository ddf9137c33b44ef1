package envoy

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	"google.golang.org/protobuf/proto"
)

// The endpoint-picker contract kvgate speaks (GIE endpoint-picker protocol,
// pkg/lwepp/metadata/consts.go): the chosen ip:port, or an ordered list,
// goes into this dynamic metadata namespace and key and into this header;
// Envoy reports the endpoint it used under ServedKey.
const (
	DestinationNamespace = "envoy.lb"
	DestinationKey       = "x-gateway-destination-endpoint"
	ServedKey            = "x-gateway-destination-endpoint-served"
)

const routerTypeURL = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"

// facts is what the rules spanning a whole file need, gathered while each
// document is inspected.
type facts struct {
	clusters    map[string]string // name -> path of its definition
	clusterRefs []clusterRef
	// dynamicClusters: clusters also come from CDS, so a name not defined
	// here may still exist when Envoy runs.
	dynamicClusters bool
	// generatedCluster reports names the platform (Istio, Envoy Gateway)
	// creates itself, which are not defined in the file.
	generatedCluster func(name string) bool
	extProcs         []extProcFact
	metadataReads    []metadataRead
	kvgate           *Kvgate
	// originalDsts are the ORIGINAL_DST clusters routing on kvgate's
	// destination: they parse one ip:port.
	originalDsts []string
	// overrideHosts are the override_host policies reading it; unreported
	// those without selected_host_key.
	overrideHosts, unreported []string
	// routes records which cluster each route sends to and whether it
	// retries (override_host walks kvgate's list only on retry).
	routes []routeFact
}

type routeFact struct {
	path, cluster string
	retries       bool
}

type clusterRef struct{ path, name string }

// extProcFact records the metadata namespaces one ext_proc (or policy
// standing for one) may write, and those it forwards; the paths are where
// they are listed. seesResponse: the response headers go to the processor
// (where Envoy's served-host report would reach it).
type extProcFact struct {
	path           string
	receiving      []string
	forwardingPath string
	forwarding     []string
	seesResponse   bool
}

// metadataRead records routing that reads a dynamic metadata namespace.
type metadataRead struct{ path, namespace string }

func newFacts() *facts {
	return &facts{clusters: map[string]string{}, generatedCluster: func(string) bool { return false }}
}

// Kvgate is what the kvgate configuration sends Envoy, for ValidateWith:
// extproc.envoy_routing and extproc.fallbacks.
type Kvgate struct {
	EnvoyRouting string
	Fallbacks    int
}

// inspect applies the per-message start-up rules to msg and everything
// below it (Any payloads included) and records facts for the file rules.
func inspect(ps *problems, f *facts, path string, msg proto.Message) {
	walkMessages(path, msg, func(p string, m proto.Message, _ bool) {
		switch x := m.(type) {
		case *bootstrapv3.Bootstrap:
			dr := x.GetDynamicResources()
			if dr.GetCdsConfig() != nil || dr.GetCdsResourcesLocator() != "" {
				f.dynamicClusters = true
			}
		case *clusterv3.Cluster:
			checkCluster(ps, f, p, x)
		case *hcmv3.HttpConnectionManager:
			checkRouterLast(ps, p, x)
		case *extprocv3.ExternalProcessor:
			checkExtProc(ps, f, p, x)
		case *overridehostv3.OverrideHost:
			checkOverrideHost(ps, f, p, x)
		case *corev3.GrpcService:
			if eg := x.GetEnvoyGrpc(); eg != nil {
				f.refer(field(field(p, "envoy_grpc"), "cluster_name"), eg.GetClusterName())
			}
		case *corev3.HttpUri:
			f.refer(field(p, "cluster"), x.GetCluster())
		case *routev3.RouteAction:
			f.refer(field(p, "cluster"), x.GetCluster())
			if x.GetCluster() != "" {
				f.routes = append(f.routes, routeFact{path: p, cluster: x.GetCluster(), retries: x.GetRetryPolicy() != nil})
			}
		case *routev3.WeightedCluster_ClusterWeight:
			f.refer(field(p, "name"), x.GetName())
		case *tcpproxyv3.TcpProxy:
			f.refer(field(p, "cluster"), x.GetCluster())
		case *tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight:
			f.refer(field(p, "name"), x.GetName())
		}
	})
}

func (f *facts) refer(path, name string) {
	if name != "" {
		f.clusterRefs = append(f.clusterRefs, clusterRef{path, name})
	}
}

// checkCluster applies Envoy's cluster start-up rules (source/common/upstream
// and source/extensions/clusters/original_dst) that the protos cannot say.
func checkCluster(ps *problems, f *facts, path string, c *clusterv3.Cluster) {
	if first, dup := f.clusters[c.GetName()]; dup {
		ps.add(field(path, "name"), "duplicate cluster name %q (also defined at %s); Envoy refuses duplicates", c.GetName(), first)
	} else {
		f.clusters[c.GetName()] = path
	}
	custom := c.GetClusterType() != nil
	originalDst := !custom && c.GetType() == clusterv3.Cluster_ORIGINAL_DST
	switch {
	case originalDst:
		if c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED {
			ps.add(field(path, "lb_policy"), "ORIGINAL_DST requires CLUSTER_PROVIDED, got %s (the cluster picks the host from each request)", c.GetLbPolicy())
		}
		if c.GetLoadAssignment() != nil {
			ps.add(field(path, "load_assignment"), "ORIGINAL_DST clusters must have no load_assignment: hosts come from each request")
		}
		checkOriginalDst(ps, f, field(path, "original_dst_lb_config"), c.GetOriginalDstLbConfig())
	case !custom && c.GetLbPolicy() == clusterv3.Cluster_CLUSTER_PROVIDED:
		ps.add(field(path, "lb_policy"), "CLUSTER_PROVIDED is only valid for ORIGINAL_DST or custom cluster types, not %s", c.GetType())
	}
	if usesOverrideHost(c) {
		if originalDst {
			ps.add(field(path, "load_balancing_policy"), "override_host cannot pick hosts in an ORIGINAL_DST cluster; give the cluster endpoints (STATIC, STRICT_DNS or EDS)")
		} else if !custom && c.GetType() != clusterv3.Cluster_EDS && !hasEndpoints(c.GetLoadAssignment()) {
			ps.add(field(path, "load_assignment"), "override_host only picks hosts the cluster already knows, and this %s cluster has no endpoints", c.GetType())
		}
	}
}

func checkOriginalDst(ps *problems, f *facts, path string, cfg *clusterv3.Cluster_OriginalDstLbConfig) {
	if cfg == nil {
		return
	}
	if !cfg.GetUseHttpHeader() && cfg.GetHttpHeaderName() != "" {
		ps.add(field(path, "http_header_name"), "set while use_http_header is false: Envoy refuses the cluster (OriginalDstClusterFactory::createClusterImpl: \"Set use_http_header to true if http_header_name is desired\")")
	}
	if cfg.GetUseHttpHeader() || cfg.GetMetadataKey() != nil {
		f.originalDsts = append(f.originalDsts, path)
	}
	if cfg.GetUseHttpHeader() {
		name := cfg.GetHttpHeaderName()
		if name == "" {
			name = "x-envoy-original-dst-host" // Envoy's default
		}
		if !strings.EqualFold(name, DestinationKey) {
			ps.add(field(path, "http_header_name"), "routes on header %q but kvgate writes %q", name, DestinationKey)
		}
	}
	if mk := cfg.GetMetadataKey(); mk != nil {
		checkDestinationKey(ps, f, field(path, "metadata_key"), mk)
	}
}

// checkDestinationKey holds a metadata key that routing reads to kvgate's
// contract and records the namespace for the ext_proc rule.
func checkDestinationKey(ps *problems, f *facts, path string, mk *metadatav3.MetadataKey) {
	f.metadataReads = append(f.metadataReads, metadataRead{path, mk.GetKey()})
	if mk.GetKey() != DestinationNamespace {
		ps.add(field(path, "key"), "kvgate writes the destination to metadata namespace %q, not %q", DestinationNamespace, mk.GetKey())
	}
	segs := mk.GetPath()
	if len(segs) != 1 || segs[0].GetKey() != DestinationKey {
		got := make([]string, len(segs))
		for i, s := range segs {
			got[i] = s.GetKey()
		}
		ps.add(field(path, "path"), "must be [{key: %s}], where kvgate writes the destination; got %v", DestinationKey, got)
	}
}

func usesOverrideHost(c *clusterv3.Cluster) bool {
	for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
		payload, err := p.GetTypedExtensionConfig().GetTypedConfig().UnmarshalNew()
		if err != nil {
			continue
		}
		if _, ok := payload.(*overridehostv3.OverrideHost); ok {
			return true
		}
	}
	return false
}

func hasEndpoints(cla *endpointv3.ClusterLoadAssignment) bool {
	for _, locality := range cla.GetEndpoints() {
		if len(locality.GetLbEndpoints()) > 0 {
			return true
		}
	}
	return false
}

func checkOverrideHost(ps *problems, f *facts, path string, oh *overridehostv3.OverrideHost) {
	f.overrideHosts = append(f.overrideHosts, path)
	if sk := oh.GetSelectedHostKey(); sk == nil {
		f.unreported = append(f.unreported, path)
	} else if segs := sk.GetPath(); sk.GetKey() != DestinationNamespace || len(segs) != 1 || segs[0].GetKey() != ServedKey {
		ps.warn(field(path, "selected_host_key"), "must be {key: %s, path: [{key: %s}]}, where kvgate reads the served endpoint (GIE endpoint-picker protocol); elsewhere kvgate never sees it and books a fallback's request on the primary", DestinationNamespace, ServedKey)
	}
	for i, src := range oh.GetOverrideHostSources() {
		p := index(field(path, "override_host_sources"), i)
		if mk := src.GetMetadata(); mk != nil {
			checkDestinationKey(ps, f, field(p, "metadata"), mk)
		}
		if h := src.GetHeader(); h != "" && !strings.EqualFold(h, DestinationKey) {
			ps.add(field(p, "header"), "reads header %q but kvgate writes %q", h, DestinationKey)
		}
	}
}

// checkRouterLast holds Envoy's HTTP filter chain rule: the terminal filter
// (the router) must be last, and nothing after it would ever run.
func checkRouterLast(ps *problems, path string, hcm *hcmv3.HttpConnectionManager) {
	filters := hcm.GetHttpFilters()
	for i, hf := range filters {
		p := index(field(path, "http_filters"), i)
		last := i == len(filters)-1
		switch router := isRouter(hf); {
		case router && !last:
			ps.add(p, "the router must be the last HTTP filter; %d filter(s) after it would never run (Envoy rejects this)", len(filters)-1-i)
		case !router && last:
			ps.add(p, "the last HTTP filter is %q; it must be the router (envoy.filters.http.router), which Envoy requires at the end of the chain", hf.GetName())
		}
	}
}

func isRouter(hf *hcmv3.HttpFilter) bool {
	if tc := hf.GetTypedConfig(); tc != nil {
		return tc.GetTypeUrl() == routerTypeURL
	}
	return hf.GetName() == "envoy.filters.http.router"
}

// checkExtProc holds the ext_proc filter's start-up rules
// (source/extensions/filters/http/ext_proc/config.cc, processing_mode.proto)
// and what kvgate's processor can serve.
//
// failure_mode_allow with FULL_DUPLEX_STREAMED is accepted: Envoy rejected
// it only around 1.35 (envoyproxy/envoy#39740, reverted by #40503); since
// #41276 fail-open holds until the first body chunk was sent
// (ext_proc.cc Filter::failureModeAllow) and fails closed after.
func checkExtProc(ps *problems, f *facts, path string, ep *extprocv3.ExternalProcessor) {
	if (ep.GetGrpcService() == nil) == (ep.GetHttpService() == nil) {
		ps.add(path, "exactly one of grpc_service and http_service must be set")
	}
	pm := ep.GetProcessingMode()
	mode := field(path, "processing_mode")
	reqDuplex := pm.GetRequestBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
	respDuplex := pm.GetResponseBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
	if reqDuplex && pm.GetRequestTrailerMode() != extprocv3.ProcessingMode_SEND {
		ps.add(field(mode, "request_trailer_mode"), "request_body_mode FULL_DUPLEX_STREAMED requires request_trailer_mode SEND, got %s (Envoy: ext_proc config.cc)", pm.GetRequestTrailerMode())
	}
	if respDuplex && pm.GetResponseTrailerMode() != extprocv3.ProcessingMode_SEND {
		ps.add(field(mode, "response_trailer_mode"), "response_body_mode FULL_DUPLEX_STREAMED requires response_trailer_mode SEND, got %s (Envoy: ext_proc config.cc)", pm.GetResponseTrailerMode())
	}
	switch pm.GetRequestBodyMode() {
	case extprocv3.ProcessingMode_STREAMED, extprocv3.ProcessingMode_BUFFERED_PARTIAL:
		ps.add(field(mode, "request_body_mode"), "%s is not served by kvgate: it routes on the whole body and answers only FULL_DUPLEX_STREAMED, BUFFERED or NONE (kvgate extproc/server stream.go onRequestHeaders fails the stream; Envoy would then answer status_on_error)", pm.GetRequestBodyMode())
	}
	if pm.GetRequestHeaderMode() == extprocv3.ProcessingMode_SKIP {
		ps.add(field(mode, "request_header_mode"), "SKIP: kvgate routes when it answers the request headers; without them Envoy never asks kvgate for a destination (ext_proc.cc decodeHeaders skips onHeaders) and the body arrives without its headers, which kvgate refuses")
	}
	if ep.GetObservabilityMode() {
		ps.add(field(path, "observability_mode"), "true makes Envoy ignore every reply (ext_proc.cc onReceiveMessage: \"Ignoring received message when observability mode is enabled\"), so kvgate's routing is never applied")
	}
	if ep.GetDisableImmediateResponse() {
		ps.add(field(path, "disable_immediate_response"), "true makes Envoy treat kvgate's local replies (413, 429, 503 with their reasons) as spurious messages (ext_proc.cc onReceiveMessage), failing those requests with status_on_error or letting them through unrouted")
	}
	receivingNS := ep.GetMetadataOptions().GetReceivingNamespaces().GetUntyped()
	forwardingNS := ep.GetMetadataOptions().GetForwardingNamespaces().GetUntyped()
	f.extProcs = append(f.extProcs, extProcFact{
		path:           field(field(field(path, "metadata_options"), "receiving_namespaces"), "untyped"),
		receiving:      receivingNS,
		forwardingPath: field(field(field(path, "metadata_options"), "forwarding_namespaces"), "untyped"),
		forwarding:     forwardingNS,
		seesResponse:   pm.GetResponseHeaderMode() != extprocv3.ProcessingMode_SKIP,
	})
}

// checkFile applies the rules that span the whole file: referenced clusters
// exist, and the processor may write what the routing reads.
func checkFile(ps *problems, f *facts) {
	if !f.dynamicClusters {
		for _, ref := range f.clusterRefs {
			if _, ok := f.clusters[ref.name]; ok || f.generatedCluster(ref.name) {
				continue
			}
			ps.add(ref.path, "cluster %q is not defined (defined: %s)", ref.name, definedClusters(f))
		}
	}
	for _, ep := range f.extProcs {
		for _, read := range f.metadataReads {
			if !slices.Contains(ep.receiving, read.namespace) {
				ps.add(ep.path, "does not include %q, which %s reads: Envoy drops dynamic metadata from ext_proc in namespaces not listed here (ext_proc.cc setDynamicMetadata), so routing never sees kvgate's choice", read.namespace, read.path)
			}
		}
		if len(f.overrideHosts) > 0 && ep.seesResponse && !slices.Contains(ep.forwarding, DestinationNamespace) {
			ps.warn(ep.forwardingPath, "does not include %q: Envoy sends kvgate only the metadata namespaces listed here (ext_proc.cc addDynamicMetadata), so override_host's served-host report (selected_host_key) never reaches kvgate, which books a fallback's request on the primary", DestinationNamespace)
		}
	}
	// kvgate's contract: where kvgate sees the response, the host Envoy
	// used comes back to it, or a request served by a fallback is booked
	// on the primary (load, outlier credit,
	// kvgate_extproc_fallbacks_used_total). With the response not sent to
	// kvgate at all the report could not reach it anyway. A warning, not
	// an error: Envoy accepts override_host without selected_host_key
	// (GIE-generated gateway configs may lack it) and kvgate routes through
	// it; what it cannot account it counts
	// (kvgate_extproc_served_host_unreported_total) and logs once.
	if slices.ContainsFunc(f.extProcs, func(e extProcFact) bool { return e.seesResponse }) {
		for _, p := range f.unreported {
			ps.warn(field(p, "selected_host_key"), "unset: Envoy never reports the host it used (load_balancer.cc addSelectedHostKey), so kvgate books a fallback's request on the primary; set {key: %s, path: [{key: %s}]}", DestinationNamespace, ServedKey)
		}
	}
	checkKvgate(ps, f)
}

// checkKvgate holds the Envoy config to what the kvgate configuration
// given with ValidateWith sends.
func checkKvgate(ps *problems, f *facts) {
	k := f.kvgate
	if k == nil {
		return
	}
	for _, p := range f.originalDsts {
		if k.Fallbacks > 0 {
			ps.add(p, "routes on kvgate's destination with ORIGINAL_DST, which parses exactly one ip:port (original_dst_cluster.cc metadataOverrideHost, parseInternetAddressAndPortNoThrow), but the kvgate config has extproc.envoy_routing %q and extproc.fallbacks %d: every request would get 503; set extproc.envoy_routing: original_dst (fallbacks 0)", k.EnvoyRouting, k.Fallbacks)
		}
	}
	if k.Fallbacks == 0 || len(f.overrideHosts) == 0 {
		return
	}
	for _, r := range f.routes {
		if r.retries || f.generatedCluster(r.cluster) {
			continue
		}
		if cp, ok := f.clusters[r.cluster]; ok && slices.ContainsFunc(f.overrideHosts, func(p string) bool { return strings.HasPrefix(p, cp+".") }) {
			ps.warn(field(r.path, "retry_policy"), "missing: kvgate sends %d fallbacks (extproc.fallbacks) but override_host moves to the next one only when the router retries (load_balancer.cc getEndpoint on each host choice); without a retry policy a dead primary fails the request", k.Fallbacks)
		}
	}
}

func definedClusters(f *facts) string {
	if len(f.clusters) == 0 {
		return "none"
	}
	names := make([]string, 0, len(f.clusters))
	for n := range f.clusters {
		names = append(names, fmt.Sprintf("%q", n))
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
