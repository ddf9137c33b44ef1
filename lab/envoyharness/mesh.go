package envoyharness

import (
	"fmt"
	"math"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kvgate/kvgate/envoy"
)

// fromIstio reads what an EnvoyFilter adds to the ingress gateway: HTTP
// filters inserted before the router (in patch order: each INSERT_BEFORE
// the router lands right before it), clusters added, the health check
// merged into Istio's ext_proc cluster, and the route merged. Istio's own
// objects (the Service's cluster and its endpoints) come from
// ProxyOptions.
func (c *Config) fromIstio(docs []envoy.Document) error {
	// Istio's clusters allow any number of retries in flight unless a
	// DestinationRule's connectionPool.http.maxRetries says otherwise
	// (istio pilot/pkg/networking/core cluster_traffic_policy.go
	// getDefaultCircuitBreakerThresholds: MaxRetries math.MaxUint32).
	c.ExtProc.MaxRetries = math.MaxInt32
	for _, d := range docs {
		if d.Kind != envoy.KindEnvoyFilter {
			continue
		}
		spec, _ := d.Value["spec"].(map[string]any)
		patches, _ := spec["configPatches"].([]any)
		clusters := map[string]*clusterv3.Cluster{}
		merged := map[string]*clusterv3.Cluster{}
		for i, p := range patches {
			cp, _ := p.(map[string]any)
			patch, _ := cp["patch"].(map[string]any)
			op, _ := patch["operation"].(string)
			value := patch["value"]
			switch cp["applyTo"] {
			case "HTTP_FILTER":
				var hf hcmv3.HttpFilter
				if err := envoy.Decode(value, &hf); err != nil {
					return fmt.Errorf("configPatches[%d]: %w", i, err)
				}
				if err := c.addHTTPFilter(&hf); err != nil {
					return fmt.Errorf("configPatches[%d]: %w", i, err)
				}
			case "CLUSTER":
				var cl clusterv3.Cluster
				if err := envoy.Decode(value, &cl); err != nil {
					return fmt.Errorf("configPatches[%d]: %w", i, err)
				}
				if op == "MERGE" {
					match, _ := cp["match"].(map[string]any)
					m, _ := match["cluster"].(map[string]any)
					name, _ := m["name"].(string)
					merged[name] = &cl
				} else {
					clusters[cl.GetName()] = &cl
				}
			case "HTTP_ROUTE":
				var r routev3.Route
				if err := envoy.Decode(value, &r); err != nil {
					return fmt.Errorf("configPatches[%d]: %w", i, err)
				}
				c.setRoute(r.GetRoute(), nil)
			}
		}
		if cl := clusters[c.Route.Cluster.Name]; cl != nil {
			if err := c.Route.Cluster.from(cl); err != nil {
				return err
			}
		}
		if cl := merged[c.ExtProc.Name]; cl != nil {
			c.ExtProc.mergeFrom(cl)
		}
	}
	return nil
}

// fromEnvoyGateway builds the ext_proc filter Envoy Gateway generates from
// an EnvoyExtensionPolicy (internal/xds/translator/extproc.go extProcConfig
// and buildProcessingMode: request or response present → its headers are
// sent; a body mode FullDuplexStreamed → its trailers too; failOpen →
// failure_mode_allow; writableNamespaces → receiving_namespaces;
// accessibleNamespaces → forwarding_namespaces), the cluster and route an
// EnvoyPatchPolicy adds, and the early header removals of a
// ClientTrafficPolicy.
func (c *Config) fromEnvoyGateway(docs []envoy.Document) error {
	var clusters []*clusterv3.Cluster
	for _, d := range docs {
		spec, _ := d.Value["spec"].(map[string]any)
		switch d.Kind {
		case envoy.KindEnvoyExtensionPolicy:
			procs, _ := spec["extProc"].([]any)
			if len(procs) == 0 {
				continue
			}
			ep, err := egExtProc(procs[0].(map[string]any))
			if err != nil {
				return err
			}
			if err := c.fromExtProc(ep); err != nil {
				return err
			}
			c.ExtProc.HealthCheck = egHealthCheck(procs[0].(map[string]any))
			c.ExtProc.Outlier = egPassive(procs[0].(map[string]any))
			c.ExtProc.Retry = egRetry(procs[0].(map[string]any))
			c.ExtProc.MaxRetries = egMaxParallelRetries(procs[0].(map[string]any))
		case envoy.KindEnvoyPatchPolicy:
			patches, _ := spec["jsonPatches"].([]any)
			for i, p := range patches {
				jp, _ := p.(map[string]any)
				op, _ := jp["operation"].(map[string]any)
				switch jp["type"] {
				case "type.googleapis.com/envoy.config.cluster.v3.Cluster":
					var cl clusterv3.Cluster
					if err := envoy.Decode(op["value"], &cl); err != nil {
						return fmt.Errorf("jsonPatches[%d]: %w", i, err)
					}
					clusters = append(clusters, &cl)
				case "type.googleapis.com/envoy.config.route.v3.RouteConfiguration":
					if path, _ := op["path"].(string); strings.HasSuffix(path, "/route/cluster") {
						c.Route.Cluster.Name, _ = op["value"].(string)
					}
				}
			}
		case envoy.KindClientTrafficPolicy:
			headers, _ := spec["headers"].(map[string]any)
			early, _ := headers["earlyRequestHeaders"].(map[string]any)
			names, _ := early["remove"].([]any)
			for _, n := range names {
				if s, ok := n.(string); ok {
					c.StripHeaders = append(c.StripHeaders, HeaderMatcher{Exact: strings.ToLower(s)})
				}
			}
		}
	}
	for _, cl := range clusters {
		if cl.GetName() == c.Route.Cluster.Name {
			return c.Route.Cluster.from(cl)
		}
	}
	return nil
}

func egExtProc(p map[string]any) (*extprocfilterv3.ExternalProcessor, error) {
	pm := &extprocfilterv3.ProcessingMode{
		RequestHeaderMode: extprocfilterv3.ProcessingMode_SKIP, ResponseHeaderMode: extprocfilterv3.ProcessingMode_SKIP,
		RequestTrailerMode: extprocfilterv3.ProcessingMode_SKIP, ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
	}
	mode, _ := p["processingMode"].(map[string]any)
	body := map[string]extprocfilterv3.ProcessingMode_BodySendMode{
		"Buffered": extprocfilterv3.ProcessingMode_BUFFERED, "BufferedPartial": extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL,
		"Streamed": extprocfilterv3.ProcessingMode_STREAMED, "FullDuplexStreamed": extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	}
	if req, ok := mode["request"].(map[string]any); ok {
		pm.RequestHeaderMode = extprocfilterv3.ProcessingMode_SEND
		if b, ok := req["body"].(string); ok {
			pm.RequestBodyMode = body[b]
			if pm.RequestBodyMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
				pm.RequestTrailerMode = extprocfilterv3.ProcessingMode_SEND
			}
		}
	}
	if res, ok := mode["response"].(map[string]any); ok {
		pm.ResponseHeaderMode = extprocfilterv3.ProcessingMode_SEND
		if b, ok := res["body"].(string); ok {
			pm.ResponseBodyMode = body[b]
			if pm.ResponseBodyMode == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
				pm.ResponseTrailerMode = extprocfilterv3.ProcessingMode_SEND
			}
		}
	}
	out := &extprocfilterv3.ExternalProcessor{ProcessingMode: pm}
	if fo, ok := p["failOpen"].(bool); ok {
		out.FailureModeAllow = fo
	}
	if mt, ok := p["messageTimeout"].(string); ok {
		d, err := time.ParseDuration(mt)
		if err != nil {
			return nil, fmt.Errorf("extProc messageTimeout %q: %w", mt, err)
		}
		out.MessageTimeout = durationpb.New(d)
	}
	md, _ := p["metadata"].(map[string]any)
	out.MetadataOptions = &extprocfilterv3.MetadataOptions{
		ReceivingNamespaces:  &extprocfilterv3.MetadataOptions_MetadataNamespaces{Untyped: stringList(md["writableNamespaces"])},
		ForwardingNamespaces: &extprocfilterv3.MetadataOptions_MetadataNamespaces{Untyped: stringList(md["accessibleNamespaces"])},
	}
	name := "extproc"
	if refs, ok := p["backendRefs"].([]any); ok && len(refs) > 0 {
		r, _ := refs[0].(map[string]any)
		name = fmt.Sprintf("extproc/%v/%v/%v", r["namespace"], r["name"], r["port"])
	}
	out.GrpcService = &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: name}}}
	return out, nil
}

func egHealthCheck(p map[string]any) *HealthCheck {
	bs, _ := p["backendSettings"].(map[string]any)
	hc, _ := bs["healthCheck"].(map[string]any)
	a, _ := hc["active"].(map[string]any)
	if a == nil || a["type"] != "GRPC" {
		return nil
	}
	// Envoy Gateway's defaults (api/v1alpha1/healthcheck_types.go).
	h := &HealthCheck{Interval: 3 * time.Second, Timeout: time.Second, Unhealthy: 3, Healthy: 1}
	if s, ok := a["interval"].(string); ok {
		h.Interval, _ = time.ParseDuration(s)
	}
	if s, ok := a["timeout"].(string); ok {
		h.Timeout, _ = time.ParseDuration(s)
	}
	if n, ok := number(a["unhealthyThreshold"]); ok {
		h.Unhealthy = n
	}
	if n, ok := number(a["healthyThreshold"]); ok {
		h.Healthy = n
	}
	if g, ok := a["grpc"].(map[string]any); ok {
		h.Service, _ = g["service"].(string)
	}
	return h
}

// egPassive reads a backendSettings.healthCheck.passive (Envoy Gateway's
// outlier detection; its defaults from api/v1alpha1/healthcheck_types.go).
func egPassive(p map[string]any) *OutlierDetection {
	bs, _ := p["backendSettings"].(map[string]any)
	hc, _ := bs["healthCheck"].(map[string]any)
	ps, _ := hc["passive"].(map[string]any)
	if ps == nil {
		return nil
	}
	o := &OutlierDetection{Consecutive: 0, BaseEjection: 30 * time.Second, MaxEjectionPercent: 10}
	key := "consecutiveGatewayErrors"
	if split, _ := ps["splitExternalLocalOriginErrors"].(bool); split {
		key, o.Consecutive = "consecutiveLocalOriginFailures", 5
	}
	if n, ok := number(ps[key]); ok {
		o.Consecutive = n
	}
	if s, ok := ps["baseEjectionTime"].(string); ok {
		o.BaseEjection, _ = time.ParseDuration(s)
	}
	if n, ok := number(ps["maxEjectionPercent"]); ok {
		o.MaxEjectionPercent = n
	}
	if o.Consecutive == 0 {
		return nil
	}
	return o
}

// egRetry reads backendSettings.retry as Envoy Gateway writes it into the
// filter's grpc_service.retry_policy (internal/xds/translator
// buildNonRouteRetryPolicy): retry_on from retryOn.triggers, or
// "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
// without them; num_retries; the back-off in whole seconds; no host
// predicate.
func egRetry(p map[string]any) *StreamRetry {
	bs, _ := p["backendSettings"].(map[string]any)
	rr, _ := bs["retry"].(map[string]any)
	if rr == nil {
		return nil
	}
	rp := &corev3.RetryPolicy{RetryOn: "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"}
	if on, ok := rr["retryOn"].(map[string]any); ok {
		if ts := stringList(on["triggers"]); len(ts) > 0 {
			rp.RetryOn = strings.Join(ts, ",")
		}
	}
	if n, ok := number(rr["numRetries"]); ok {
		rp.NumRetries = wrapperspb.UInt32(uint32(n))
	}
	per, _ := rr["perRetry"].(map[string]any)
	if bo, ok := per["backOff"].(map[string]any); ok {
		base, _ := time.ParseDuration(fmt.Sprint(bo["baseInterval"]))
		maxI, _ := time.ParseDuration(fmt.Sprint(bo["maxInterval"]))
		rp.RetryBackOff = &corev3.BackoffStrategy{BaseInterval: durationpb.New(base.Truncate(time.Second)), MaxInterval: durationpb.New(maxI.Truncate(time.Second))}
	}
	return streamRetryFrom(rp)
}

// egMaxParallelRetries is backendSettings.circuitBreaker.maxParallelRetries
// (the cluster's max_retries), Envoy's 3 when unset.
func egMaxParallelRetries(p map[string]any) int {
	bs, _ := p["backendSettings"].(map[string]any)
	cb, _ := bs["circuitBreaker"].(map[string]any)
	if n, ok := number(cb["maxParallelRetries"]); ok {
		return n
	}
	return 3
}

func number(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		return int(n), true
	case uint64:
		return int(n), true
	case float64:
		return int(n), true
	}
	return 0, false
}

func stringList(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, e := range list {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
