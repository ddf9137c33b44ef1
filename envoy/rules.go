package envoyconfig

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
// goes into this dynamic metadata namespace and key and into this header.
const (
	DestinationNamespace = "envoy.lb"
	DestinationKey       = "x-gateway-destination-endpoint"
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
}

type clusterRef struct{ path, name string }

// extProcFact records the metadata namespaces one ext_proc (or policy
// standing for one) may write; path is where they are listed.
type extProcFact struct {
	path      string
	receiving []string
}

// metadataRead records routing that reads a dynamic metadata namespace.
type metadataRead struct{ path, namespace string }

func newFacts() *facts {
	return &facts{clusters: map[string]string{}, generatedCluster: func(string) bool { return false }}
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
// (source/extensions/filters/http/ext_proc/config.cc, processing_mode.proto).
func checkExtProc(ps *problems, f *facts, path string, ep *extprocv3.ExternalProcessor) {
	if (ep.GetGrpcService() == nil) == (ep.GetHttpService() == nil) {
		ps.add(path, "exactly one of grpc_service and http_service must be set")
	}
	pm := ep.GetProcessingMode()
	mode := field(path, "processing_mode")
	reqDuplex := pm.GetRequestBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
	respDuplex := pm.GetResponseBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
	if reqDuplex && pm.GetRequestTrailerMode() != extprocv3.ProcessingMode_SEND {
		ps.add(field(mode, "request_trailer_mode"), "request_body_mode FULL_DUPLEX_STREAMED requires request_trailer_mode SEND, got %s", pm.GetRequestTrailerMode())
	}
	if respDuplex && pm.GetResponseTrailerMode() != extprocv3.ProcessingMode_SEND {
		ps.add(field(mode, "response_trailer_mode"), "response_body_mode FULL_DUPLEX_STREAMED requires response_trailer_mode SEND, got %s", pm.GetResponseTrailerMode())
	}
	if (reqDuplex || respDuplex) && ep.GetFailureModeAllow() {
		ps.add(field(path, "failure_mode_allow"), "must be false with FULL_DUPLEX_STREAMED body mode: Envoy rejects fail-open full-duplex processing")
	}
	f.extProcs = append(f.extProcs, extProcFact{
		path:      field(field(field(path, "metadata_options"), "receiving_namespaces"), "untyped"),
		receiving: ep.GetMetadataOptions().GetReceivingNamespaces().GetUntyped(),
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
				ps.add(ep.path, "does not include %q, which %s reads: Envoy drops dynamic metadata from ext_proc in namespaces not listed here, so routing never sees kvgate's choice", read.namespace, read.path)
			}
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
