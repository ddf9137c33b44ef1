package envoyharness

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"

	"github.com/kvgate/kvgate/envoy"
	"github.com/kvgate/kvgate/extproc/envoyaddr"
)

// Envoy's defaults for what a config leaves unset.
const (
	defaultMessageTimeout = 200 * time.Millisecond // ext_proc.proto message_timeout
	defaultBufferLimit    = 1 << 20                // listener per_connection_buffer_limit_bytes
	defaultNumRetries     = 1                      // RetryPolicy.num_retries
	// originalDstHeader is the header use_http_header reads when
	// http_header_name is empty (original_dst_cluster.cc, EnvoyOriginalDstHost).
	originalDstHeader = "x-envoy-original-dst-host"
)

// ParseConfig reads the Envoy configuration the harness plays: an Envoy
// bootstrap (its first listener's HTTP connection manager, first route),
// an Istio EnvoyFilter, or Envoy Gateway policies. The config must pass
// the validator (package envoy) first: Envoy would refuse it
// otherwise.
func ParseConfig(data []byte) (Config, error) {
	docs, err := envoy.Documents(data)
	if err != nil {
		return Config{}, fmt.Errorf("envoyharness: the config does not validate: %w", err)
	}
	c := Config{MessageTimeout: defaultMessageTimeout, StatusOnError: defaultStatusOnError, BufferLimit: defaultBufferLimit}
	switch docs[0].Kind {
	case envoy.KindBootstrap:
		err = c.fromBootstrap(docs[0].Value)
	case envoy.KindEnvoyFilter:
		err = c.fromIstio(docs)
	case envoy.KindEnvoyExtensionPolicy, envoy.KindEnvoyPatchPolicy, envoy.KindClientTrafficPolicy:
		err = c.fromEnvoyGateway(docs)
	default:
		err = fmt.Errorf("a %s alone configures no ext_proc filter", docs[0].Kind)
	}
	if err != nil {
		return Config{}, fmt.Errorf("envoyharness: %w", err)
	}
	if c.ExtProc.Name == "" {
		return Config{}, fmt.Errorf("envoyharness: the config has no ext_proc filter")
	}
	if c.Route.Cluster.Name == "" {
		return Config{}, fmt.Errorf("envoyharness: the config routes to no cluster")
	}
	return c, nil
}

// Shipped parses one of the configs shipped in envoy/ ("envoy.yaml",
// "istio/envoyfilter.yaml", …).
func Shipped(name string) (Config, error) {
	data, err := envoy.Shipped(name)
	if err != nil {
		return Config{}, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("envoy/%s: %w", name, err)
	}
	return c, nil
}

// MustShipped is Shipped for configs known to parse; it panics otherwise.
func MustShipped(name string) Config {
	c, err := Shipped(name)
	if err != nil {
		panic(err)
	}
	return c
}

// DefaultConfig is the shipped default, envoy/envoy.yaml: full-duplex
// streamed bodies both ways, fail closed, routing through override_host
// with kvgate's fallbacks walked on retry and the served host reported.
func DefaultConfig() Config { return MustShipped("envoy.yaml") }

func (c *Config) fromBootstrap(v map[string]any) error {
	var b bootstrapv3.Bootstrap
	if err := envoy.Decode(v, &b); err != nil {
		return err
	}
	ls := b.GetStaticResources().GetListeners()
	if len(ls) == 0 || len(ls[0].GetFilterChains()) == 0 || len(ls[0].GetFilterChains()[0].GetFilters()) == 0 {
		return fmt.Errorf("no static listener with a filter chain")
	}
	if n := ls[0].GetPerConnectionBufferLimitBytes(); n != nil {
		c.BufferLimit = int(n.GetValue())
	}
	var hcm hcmv3.HttpConnectionManager
	if err := ls[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		return fmt.Errorf("first network filter is not an HTTP connection manager: %w", err)
	}
	// normalize_path unset is the runtime key
	// http_connection_manager.normalize_path, 0% by default: off.
	c.Path = PathNormalization{Normalize: hcm.GetNormalizePath().GetValue(), MergeSlashes: hcm.GetMergeSlashes(),
		EscapedSlashes: hcm.GetPathWithEscapedSlashesAction()}
	for _, hf := range hcm.GetHttpFilters() {
		if err := c.addHTTPFilter(hf); err != nil {
			return err
		}
	}
	vhs := hcm.GetRouteConfig().GetVirtualHosts()
	if len(vhs) == 0 || len(vhs[0].GetRoutes()) == 0 {
		return fmt.Errorf("no static route")
	}
	ra := vhs[0].GetRoutes()[0].GetRoute()
	clusters := map[string]*clusterv3.Cluster{}
	for _, cl := range b.GetStaticResources().GetClusters() {
		clusters[cl.GetName()] = cl
	}
	c.setRoute(ra, vhs[0].GetRetryPolicy())
	if cl := clusters[c.Route.Cluster.Name]; cl != nil {
		if err := c.Route.Cluster.from(cl); err != nil {
			return err
		}
	}
	if cl := clusters[c.ExtProc.Name]; cl != nil {
		c.ExtProc.from(cl)
	}
	return nil
}

// addHTTPFilter takes the ext_proc filter and the header removals before
// it; filters after ext_proc do not change what kvgate sees.
func (c *Config) addHTTPFilter(hf *hcmv3.HttpFilter) error {
	tc := hf.GetTypedConfig()
	if tc == nil || c.ExtProc.Name != "" {
		return nil
	}
	switch {
	case tc.MessageIs(&headermutationv3.HeaderMutation{}):
		var hm headermutationv3.HeaderMutation
		if err := tc.UnmarshalTo(&hm); err != nil {
			return err
		}
		// header_mutation's request mutations (mutation_rules.proto
		// HeaderMutation: remove, remove_on_match).
		for _, m := range hm.GetMutations().GetRequestMutations() {
			if n := m.GetRemove(); n != "" {
				c.StripHeaders = append(c.StripHeaders, HeaderMatcher{Exact: strings.ToLower(n)})
			}
			if km := m.GetRemoveOnMatch().GetKeyMatcher(); km != nil {
				c.StripHeaders = append(c.StripHeaders, HeaderMatcher{Exact: strings.ToLower(km.GetExact()),
					Prefix: strings.ToLower(km.GetPrefix()), Suffix: strings.ToLower(km.GetSuffix()), Contains: strings.ToLower(km.GetContains())})
			}
		}
	case tc.MessageIs(&extprocfilterv3.ExternalProcessor{}):
		var ep extprocfilterv3.ExternalProcessor
		if err := tc.UnmarshalTo(&ep); err != nil {
			return err
		}
		return c.fromExtProc(&ep)
	}
	return nil
}

func (c *Config) fromExtProc(ep *extprocfilterv3.ExternalProcessor) error {
	pm := ep.GetProcessingMode()
	if pm.GetRequestHeaderMode() == extprocfilterv3.ProcessingMode_SKIP {
		return fmt.Errorf("request_header_mode SKIP is not modeled (kvgate needs the request headers)")
	}
	c.RequestBodyMode, c.ResponseBodyMode = pm.GetRequestBodyMode(), pm.GetResponseBodyMode()
	// Header modes default to SEND, trailer modes to SKIP
	// (processing_mode.proto).
	c.ResponseHeaders = pm.GetResponseHeaderMode() != extprocfilterv3.ProcessingMode_SKIP
	c.RequestTrailers = pm.GetRequestTrailerMode() == extprocfilterv3.ProcessingMode_SEND
	c.ResponseTrailers = pm.GetResponseTrailerMode() == extprocfilterv3.ProcessingMode_SEND
	if d := ep.GetMessageTimeout(); d != nil {
		c.MessageTimeout = d.AsDuration()
	}
	c.FailureModeAllow = ep.GetFailureModeAllow()
	if s := ep.GetStatusOnError(); s != nil {
		c.StatusOnError = int(s.GetCode())
	}
	c.ReceivingNamespaces = ep.GetMetadataOptions().GetReceivingNamespaces().GetUntyped()
	c.ForwardingNamespaces = ep.GetMetadataOptions().GetForwardingNamespaces().GetUntyped()
	// request_attributes: New refuses the ones the harness does not evaluate
	// (attributes.go), as a config it cannot play faithfully.
	c.RequestAttributes = ep.GetRequestAttributes()
	c.ExtProc.Name = ep.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	if c.ExtProc.Name == "" {
		return fmt.Errorf("the ext_proc filter uses no envoy_grpc cluster")
	}
	if rp := ep.GetGrpcService().GetRetryPolicy(); rp != nil {
		c.ExtProc.Retry = streamRetryFrom(rp)
	}
	return nil
}

// streamRetryFrom reads grpc_service.retry_policy with the defaults
// Http::Utility::convertCoreToRouteRetryPolicy applies (num_retries 1,
// back-off base 1 s, max 10 × base) and RetryPolicyImpl's
// (host_selection_retry_max_attempts 1).
func streamRetryFrom(rp *corev3.RetryPolicy) *StreamRetry {
	r := &StreamRetry{On: map[string]bool{}, NumRetries: 1, BaseInterval: time.Second, HostSelectTries: 1}
	for _, on := range strings.Split(rp.GetRetryOn(), ",") {
		if on = strings.TrimSpace(on); on != "" {
			r.On[on] = true
		}
	}
	if n := rp.GetNumRetries(); n != nil {
		r.NumRetries = int(n.GetValue())
	}
	if b := rp.GetRetryBackOff(); b != nil {
		r.BaseInterval = b.GetBaseInterval().AsDuration()
		r.MaxInterval = b.GetMaxInterval().AsDuration()
	}
	if r.MaxInterval == 0 {
		r.MaxInterval = 10 * r.BaseInterval
	}
	for _, hp := range rp.GetRetryHostPredicate() {
		if hp.GetName() == "envoy.retry_host_predicates.previous_hosts" {
			r.PreviousHosts = true
		}
	}
	if n := rp.GetHostSelectionRetryMaxAttempts(); n > 0 {
		r.HostSelectTries = int(n)
	}
	return r
}

func (c *Config) setRoute(ra *routev3.RouteAction, vhRetry *routev3.RetryPolicy) {
	c.Route.Cluster.Name = ra.GetCluster()
	rp := ra.GetRetryPolicy()
	if rp == nil {
		rp = vhRetry
	}
	if rp == nil {
		return
	}
	r := &RetryPolicy{NumRetries: defaultNumRetries}
	if n := rp.GetNumRetries(); n != nil {
		r.NumRetries = int(n.GetValue())
	}
	for _, on := range strings.Split(rp.GetRetryOn(), ",") {
		if on = strings.TrimSpace(on); on != "" {
			r.On = append(r.On, on)
		}
	}
	for _, code := range rp.GetRetriableStatusCodes() {
		r.RetriableStatusCodes = append(r.RetriableStatusCodes, int(code))
	}
	c.Route.Retry = r
}

// from reads how the cluster picks hosts.
func (k *Cluster) from(cl *clusterv3.Cluster) error {
	k.Hosts = clusterHosts(cl)
	k.TLS = usesTLS(cl)
	if cl.GetType() == clusterv3.Cluster_ORIGINAL_DST {
		o := &OriginalDst{}
		lb := cl.GetOriginalDstLbConfig()
		if lb.GetUseHttpHeader() {
			o.Header = strings.ToLower(lb.GetHttpHeaderName())
			if o.Header == "" {
				o.Header = originalDstHeader
			}
		}
		o.MetadataKey = metadataKey(lb.GetMetadataKey())
		k.OriginalDst, k.Hosts = o, nil
		return nil
	}
	for _, p := range cl.GetLoadBalancingPolicy().GetPolicies() {
		var oh overridehostv3.OverrideHost
		tc := p.GetTypedExtensionConfig().GetTypedConfig()
		if tc == nil || !tc.MessageIs(&oh) {
			continue
		}
		if err := tc.UnmarshalTo(&oh); err != nil {
			return err
		}
		m := &OverrideHost{SelectedHostKey: metadataKey(oh.GetSelectedHostKey())}
		for _, src := range oh.GetOverrideHostSources() {
			m.Sources = append(m.Sources, HostSource{Header: strings.ToLower(src.GetHeader()), Metadata: metadataKey(src.GetMetadata())})
		}
		k.OverrideHost = m
		break
	}
	return nil
}

func metadataKey(mk *metadatav3.MetadataKey) *MetadataKey {
	if mk == nil {
		return nil
	}
	k := &MetadataKey{Namespace: mk.GetKey()}
	for _, s := range mk.GetPath() {
		k.Path = append(k.Path, s.GetKey())
	}
	return k
}

// clusterHosts lists a cluster's static endpoints in Envoy's address
// spelling; DNS names stay as written (the harness resolves nothing: pass
// the resolved addresses with WithWorkers).
func clusterHosts(cl *clusterv3.Cluster) []string {
	var hosts []string
	for _, loc := range cl.GetLoadAssignment().GetEndpoints() {
		for _, le := range loc.GetLbEndpoints() {
			sa := le.GetEndpoint().GetAddress().GetSocketAddress()
			if sa == nil {
				continue
			}
			port := strconv.Itoa(int(sa.GetPortValue()))
			if a, err := netip.ParseAddr(sa.GetAddress()); err == nil {
				hosts = append(hosts, envoyaddr.Format(netip.AddrPortFrom(a, uint16(sa.GetPortValue()))))
			} else {
				hosts = append(hosts, sa.GetAddress()+":"+port)
			}
		}
	}
	return hosts
}

// usesTLS reports a cluster whose upstream connections carry a transport
// socket (cluster.proto transport_socket, transport_socket_matches): TLS in
// every config kvgate ships.
func usesTLS(cl *clusterv3.Cluster) bool {
	return cl.GetTransportSocket() != nil || len(cl.GetTransportSocketMatches()) > 0
}

func (e *ExtProcCluster) from(cl *clusterv3.Cluster) {
	e.Hosts = clusterHosts(cl)
	e.TLS = usesTLS(cl)
	e.MaxRetries = 3 // circuit_breaker.proto Thresholds.max_retries default
	e.mergeFrom(cl)
}

// mergeFrom takes what a cluster says about failing hosts: health check,
// outlier detection, the retry circuit breaker (an Istio MERGE patch
// carries only these).
func (e *ExtProcCluster) mergeFrom(cl *clusterv3.Cluster) {
	e.healthCheckFrom(cl)
	if n, ok := maxRetriesOf(cl); ok {
		e.MaxRetries = n
	}
	if od := cl.GetOutlierDetection(); od != nil {
		o := &OutlierDetection{Consecutive: 5, BaseEjection: 30 * time.Second, MaxEjectionPercent: 10}
		n := od.GetConsecutiveGatewayFailure()
		if od.GetSplitExternalLocalOriginErrors() {
			n = od.GetConsecutiveLocalOriginFailure()
		}
		if n != nil {
			o.Consecutive = int(n.GetValue())
		}
		if d := od.GetBaseEjectionTime(); d != nil {
			o.BaseEjection = d.AsDuration()
		}
		if p := od.GetMaxEjectionPercent(); p != nil {
			o.MaxEjectionPercent = int(p.GetValue())
		}
		e.Outlier = o
	}
}

// maxRetriesOf is the default-priority circuit breaker's max_retries, if
// the cluster sets it.
func maxRetriesOf(cl *clusterv3.Cluster) (int, bool) {
	for _, t := range cl.GetCircuitBreakers().GetThresholds() {
		if t.GetPriority() == corev3.RoutingPriority_DEFAULT && t.GetMaxRetries() != nil {
			return int(min(t.GetMaxRetries().GetValue(), math.MaxInt32)), true
		}
	}
	return 0, false
}

func (e *ExtProcCluster) healthCheckFrom(cl *clusterv3.Cluster) {
	for _, hc := range cl.GetHealthChecks() {
		g := hc.GetGrpcHealthCheck()
		if g == nil {
			continue
		}
		e.HealthCheck = &HealthCheck{Interval: hc.GetInterval().AsDuration(), Timeout: hc.GetTimeout().AsDuration(),
			Unhealthy: int(hc.GetUnhealthyThreshold().GetValue()), Healthy: int(hc.GetHealthyThreshold().GetValue()), Service: g.GetServiceName()}
		return
	}
}
