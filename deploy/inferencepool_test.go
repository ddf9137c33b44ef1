//go:build helm || kubeapiserver

package deploy

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

const inferencePoolValues = "testdata/values-inference-pool.yaml"

// inferencePoolObjects are the typed objects of an InferencePool-mode render.
type inferencePoolObjects struct {
	pool    *giev1.InferencePool
	routes  []*gatewayv1.HTTPRoute
	service *corev1.Service // the extproc's
	roles   []*rbacv1.Role
	config  map[string]any // the kvgate config file
}

func renderInferencePool(t *testing.T, overrides map[string]any) inferencePoolObjects {
	t.Helper()
	var out inferencePoolObjects
	objs := decodeAll(t, mustRender(t, inferencePoolValues, overrides))
	for _, o := range objs {
		switch x := o.(type) {
		case *giev1.InferencePool:
			if out.pool != nil {
				t.Fatalf("two InferencePools: %s and %s", out.pool.Name, x.Name)
			}
			out.pool = x
		case *gatewayv1.HTTPRoute:
			out.routes = append(out.routes, x)
		case *corev1.Service:
			if x.Spec.Selector["app.kubernetes.io/component"] == "extproc" {
				out.service = x
			}
		case *rbacv1.Role:
			out.roles = append(out.roles, x)
		case *corev1.ConfigMap:
			if raw, ok := x.Data[configKey]; ok {
				if err := yaml.Unmarshal([]byte(raw), &out.config); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if out.pool == nil || out.service == nil || out.config == nil {
		t.Fatalf("InferencePool mode rendered pool %v, extproc Service %v, config %v", out.pool != nil, out.service != nil, out.config != nil)
	}
	return out
}

// The pool's endpointPickerRef names the extproc Service and its gRPC
// port (a Service port, as GIE v1.6.2 api/v1 EndpointPickerRef.Port says),
// in the pool's namespace (the ref has none); the selector and ports are the
// values'; the HTTPRoute's backend is the pool; the extproc's config follows
// that same pool.
func TestInferencePoolWiring(t *testing.T) {
	r := renderInferencePool(t, nil)
	p := r.pool
	ref := p.Spec.EndpointPickerRef
	if ref == nil || ref.Port == nil {
		t.Fatalf("endpointPickerRef %+v: want the extproc Service with a port", ref)
	}
	if string(ref.Kind) != "Service" || ref.Group == nil || *ref.Group != "" || string(ref.Name) != r.service.Name || p.Namespace != r.service.Namespace {
		t.Errorf("endpointPickerRef group %q kind %s name %s in %s; want the extproc Service %s/%s", ptrString(ref.Group), ref.Kind, ref.Name, p.Namespace, r.service.Namespace, r.service.Name)
	}
	grpcPort := int32(-1)
	for _, sp := range r.service.Spec.Ports {
		if sp.Name == "grpc" {
			grpcPort = sp.Port
		}
	}
	if int32(ref.Port.Number) != grpcPort {
		t.Errorf("endpointPickerRef port %d, extproc Service grpc port %d", ref.Port.Number, grpcPort)
	}
	if ref.FailureMode != giev1.EndpointPickerFailClose {
		t.Errorf("failureMode %q, want FailClose by default", ref.FailureMode)
	}
	if got := p.Spec.Selector.MatchLabels; len(got) != 1 || got["app"] != "vllm-qwen3" {
		t.Errorf("selector %v, want the values' matchLabels", got)
	}
	var ports []int32
	for _, tp := range p.Spec.TargetPorts {
		ports = append(ports, int32(tp.Number))
	}
	if !slices.Equal(ports, []int32{8000, 8001}) || p.Spec.AppProtocol != giev1.AppProtocolHTTP {
		t.Errorf("targetPorts %v appProtocol %q, want [8000 8001] http", ports, p.Spec.AppProtocol)
	}

	if len(r.routes) != 1 {
		t.Fatalf("%d HTTPRoutes, want 1", len(r.routes))
	}
	rt := r.routes[0]
	if len(rt.Spec.Rules) != 1 || len(rt.Spec.Rules[0].BackendRefs) != 1 {
		t.Fatalf("HTTPRoute rules %+v: want one rule with one backend", rt.Spec.Rules)
	}
	b := rt.Spec.Rules[0].BackendRefs[0].BackendRef.BackendObjectReference
	if b.Group == nil || string(*b.Group) != "inference.networking.k8s.io" || b.Kind == nil || string(*b.Kind) != "InferencePool" || string(b.Name) != p.Name || b.Namespace != nil {
		t.Errorf("HTTPRoute backendRef group %q kind %s name %s: want the pool %s", ptrString(b.Group), ptrString(b.Kind), b.Name, p.Name)
	}
	if rt.Namespace != p.Namespace {
		t.Errorf("HTTPRoute in %s, pool in %s (a cross-namespace backendRef needs a ReferenceGrant)", rt.Namespace, p.Namespace)
	}
	parent := rt.Spec.ParentRefs[0]
	if string(parent.Name) != "inference-gateway" || parent.Namespace == nil || string(*parent.Namespace) != "gateway-system" {
		t.Errorf("HTTPRoute parent %+v, want Gateway gateway-system/inference-gateway", parent)
	}

	disc, _ := r.config["extproc"].(map[string]any)["discovery"].(map[string]any)
	pool, _ := disc["inference_pool"].(map[string]any)
	if pool["name"] != p.Name || pool["namespace"] != p.Namespace || pool["events_port"] != float64(5557) {
		t.Errorf("config extproc.discovery.inference_pool %v: want the pool %s/%s and the values' events_port", pool, p.Namespace, p.Name)
	}
	if _, ok := r.config["extproc"].(map[string]any)["envoy_routing"]; ok {
		t.Error("InferencePool mode sets extproc.envoy_routing: the gateway routes on the picker's endpoint itself")
	}
}

// The extproc may get/list/watch this pool (by name), the
// InferenceObjectives and the pods of its namespace, and nothing else; with
// objectives off, not even the objectives.
func TestInferencePoolRBAC(t *testing.T) {
	rule := func(group, resource string, names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, ResourceNames: names, Verbs: []string{"get", "list", "watch"}}
	}
	pool := rule("inference.networking.k8s.io", "inferencepools", "kvgate")
	objectives := rule("inference.networking.x-k8s.io", "inferenceobjectives")
	pods := rule("", "pods")
	for _, c := range []struct {
		name      string
		overrides map[string]any
		want      []rbacv1.PolicyRule
	}{
		{"objectives on", nil, []rbacv1.PolicyRule{pool, objectives, pods}},
		{"objectives off", map[string]any{"config": map[string]any{"extproc": map[string]any{"discovery": map[string]any{"inference_pool": map[string]any{"objectives": false}}}}}, []rbacv1.PolicyRule{pool, pods}},
	} {
		r := renderInferencePool(t, c.overrides)
		if len(r.roles) != 1 {
			t.Fatalf("%s: %d Roles, want the extproc's discovery Role only", c.name, len(r.roles))
		}
		role := r.roles[0]
		if role.Namespace != r.pool.Namespace {
			t.Errorf("%s: Role in %s, pool in %s", c.name, role.Namespace, r.pool.Namespace)
		}
		if !reflect.DeepEqual(role.Rules, c.want) {
			t.Errorf("%s: rules\n%+v\nwant\n%+v", c.name, role.Rules, c.want)
		}
	}
}

// A pool the chart does not render (a platform's own, named in
// config.extproc.discovery.inference_pool) gets the same grants in its
// namespace, and the extproc its ServiceAccount token.
func TestInferencePoolFromConfigOnly(t *testing.T) {
	ms := mustRender(t, "", map[string]any{"config": map[string]any{"extproc": map[string]any{"discovery": map[string]any{
		"inference_pool": map[string]any{"name": "shared-pool", "namespace": "inference"},
	}}}})
	if n := len(byKind(ms, "InferencePool")) + len(byKind(ms, "HTTPRoute")); n != 0 {
		t.Errorf("%d InferencePool/HTTPRoute objects without inferencePool.enabled, want 0", n)
	}
	objs := decodeAll(t, ms)
	found := false
	for _, o := range objs {
		switch x := o.(type) {
		case *rbacv1.Role:
			found = true
			if x.Namespace != "inference" || len(x.Rules) != 3 || !slices.Equal(x.Rules[0].ResourceNames, []string{"shared-pool"}) {
				t.Errorf("Role %s/%s rules %+v: want the pool shared-pool in inference", x.Namespace, x.Name, x.Rules)
			}
		case *corev1.ServiceAccount:
			if strings.HasSuffix(x.Name, "-extproc") && (x.AutomountServiceAccountToken == nil || !*x.AutomountServiceAccountToken) {
				t.Error("extproc ServiceAccount mounts no token: it cannot watch the pool")
			}
		}
	}
	if !found {
		t.Error("no discovery Role for a pool named in config")
	}
}

// Bad InferencePool values stop the render, naming the value.
func TestInferencePoolBadValues(t *testing.T) {
	pool := func(v map[string]any) map[string]any { return map[string]any{"inferencePool": v} }
	ports := make([]any, 9)
	for i := range ports {
		ports[i] = map[string]any{"number": 8000 + i}
	}
	for _, c := range []struct {
		name      string
		overrides map[string]any
		want      string
	}{
		{"no selector", pool(map[string]any{"modelServers": map[string]any{"matchLabels": nil}}), "inferencePool.modelServers.matchLabels"},
		{"nine ports", pool(map[string]any{"targetPorts": ports}), "inferencePool.targetPorts"},
		{"protocol", pool(map[string]any{"modelServerProtocol": "h3"}), "inferencePool.modelServerProtocol"},
		{"failure mode", pool(map[string]any{"failureMode": "FailOpenish"}), "inferencePool.failureMode"},
		{"with istio", map[string]any{"mesh": map[string]any{"istio": map[string]any{"enabled": true}}}, "mesh.istio.enabled"},
		{"with label discovery", map[string]any{"config": map[string]any{"extproc": map[string]any{"discovery": map[string]any{
			"kubernetes": map[string]any{"namespace": "inference", "label_selector": "app=vllm"},
		}}}}, "config.extproc.discovery.kubernetes"},
	} {
		_, err := renderChart(inferencePoolValues, c.overrides)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %s", c.name, err, c.want)
		}
	}
	// grpc model servers speak h2c.
	r := renderInferencePool(t, pool(map[string]any{"modelServerProtocol": "grpc", "failureMode": "FailOpen"}))
	if r.pool.Spec.AppProtocol != giev1.AppProtocolH2C || r.pool.Spec.EndpointPickerRef.FailureMode != giev1.EndpointPickerFailOpen {
		t.Errorf("grpc, FailOpen: appProtocol %q failureMode %q", r.pool.Spec.AppProtocol, r.pool.Spec.EndpointPickerRef.FailureMode)
	}
}

func ptrString[T ~string](p *T) string {
	if p == nil {
		return "<nil>"
	}
	return string(*p)
}
