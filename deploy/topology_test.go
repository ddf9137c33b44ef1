//go:build helm || kubeapiserver

package deploy

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

func renderedKinds(ms []manifest) map[string]int {
	out := map[string]int{}
	for _, m := range ms {
		out[m.Kind]++
	}
	return out
}

// The topology follows how the binaries work: with the memory index the
// extproc feeds its own index (no indexer, no Redis); with Redis one
// indexer writes; the optional parts appear only when enabled.
func TestTopology(t *testing.T) {
	def := renderedKinds(mustRender(t, "", nil))
	for _, kind := range []string{"Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "ServiceAccount", "NetworkPolicy"} {
		if def[kind] == 0 {
			t.Errorf("defaults: no %s", kind)
		}
	}
	if def["Deployment"] != 1 {
		t.Errorf("defaults: %d Deployments, want only the extproc (memory index: no indexer)", def["Deployment"])
	}
	for _, kind := range []string{"StatefulSet", "DaemonSet", "Role", "HorizontalPodAutoscaler", "ServiceMonitor", "PodMonitor", "EnvoyFilter", "EnvoyExtensionPolicy"} {
		if def[kind] != 0 {
			t.Errorf("defaults: %d %s, want none (off by default)", def[kind], kind)
		}
	}

	ms := mustRender(t, "testdata/values-full.yaml", nil)
	full := renderedKinds(ms)
	want := map[string]int{"StatefulSet": 1, "DaemonSet": 1, "HorizontalPodAutoscaler": 1, "ServiceMonitor": 4, "PodMonitor": 4, "Deployment": 3}
	for kind, n := range want {
		if full[kind] != n {
			t.Errorf("full: %d %s, want %d", full[kind], kind, n)
		}
	}
	objs := decodeAll(t, ms)
	var plannerArgs []string
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok && d.Spec.Template.Labels["app.kubernetes.io/component"] == "planner" {
			plannerArgs = d.Spec.Template.Spec.Containers[0].Args
			if *d.Spec.Replicas != 1 {
				t.Errorf("planner replicas %d, want 1", *d.Spec.Replicas)
			}
		}
		if d, ok := o.(*appsv1.Deployment); ok && d.Spec.Template.Labels["app.kubernetes.io/component"] == "extproc" && d.Spec.Replicas != nil {
			t.Errorf("extproc with an HPA sets replicas %d (the HPA owns it)", *d.Spec.Replicas)
		}
	}
	if !slices.Contains(plannerArgs, "--advisory") {
		t.Errorf("planner args %v: advisory is the default", plannerArgs)
	}
	// RBAC: exactly the configured targets' /scale, and pods patch in the
	// drain namespace; nothing cluster-wide.
	if full["ClusterRole"]+full["ClusterRoleBinding"] != 0 {
		t.Error("the chart must not grant cluster-wide RBAC")
	}
	var scale []string
	podsPatch := false
	for _, o := range objs {
		r, ok := o.(*rbacv1.Role)
		if !ok || !strings.HasSuffix(r.Name, "-planner") {
			continue
		}
		for _, rule := range r.Rules {
			for _, res := range rule.Resources {
				if strings.HasSuffix(res, "/scale") {
					if len(rule.ResourceNames) == 0 {
						t.Errorf("Role %s/%s: %s without resourceNames", r.Namespace, r.Name, res)
					}
					for _, n := range rule.ResourceNames {
						scale = append(scale, r.Namespace+"/"+res+"/"+n)
					}
				}
				if res == "pods" && slices.Contains(rule.Verbs, "patch") {
					podsPatch = true
				}
			}
		}
	}
	slices.Sort(scale)
	wantScale := []string{"inference/deployments/scale/vllm-decode", "inference/deployments/scale/vllm-prefill"}
	if !slices.Equal(scale, wantScale) {
		t.Errorf("planner /scale grants %v, want %v (testdata/values-full.yaml config.planner.pools)", scale, wantScale)
	}
	if !podsPatch {
		t.Error("planner cannot patch pods in its drain namespace")
	}
}

// Bad values stop the render with a message naming the value.
func TestBadValuesRejected(t *testing.T) {
	cases := []struct {
		name      string
		overrides map[string]any
		want      string
	}{
		{"redis mode", map[string]any{"redis": map[string]any{"mode": "cluster"}}, "redis.mode"},
		{"external redis without addrs", map[string]any{"redis": map[string]any{"mode": "external"}}, "redis.addrs"},
		{"discovery without namespace", map[string]any{"config": map[string]any{"extproc": map[string]any{"discovery": map[string]any{"kubernetes": map[string]any{"label_selector": "app=vllm"}}}}}, "config.extproc.discovery.kubernetes.namespace"},
		{"istio SIMPLE without CA", map[string]any{
			"extproc": map[string]any{"tls": map[string]any{"enabled": true, "secretName": "kvgate-extproc-tls"}},
			"mesh":    map[string]any{"istio": map[string]any{"enabled": true, "tls": map[string]any{"mode": "SIMPLE"}}},
		}, "mesh.istio.tls.credentialName"},
		{"istio SIMPLE to a plaintext kvgate", map[string]any{"mesh": map[string]any{"istio": map[string]any{"enabled": true, "tls": map[string]any{"mode": "SIMPLE", "credentialName": "ca"}}}}, "mesh.istio.tls.mode: SIMPLE originates TLS to kvgate, which serves plaintext"},
		{"istio ISTIO_MUTUAL to a TLS kvgate", map[string]any{
			"extproc": map[string]any{"tls": map[string]any{"enabled": true, "secretName": "kvgate-extproc-tls"}},
			"mesh":    map[string]any{"istio": map[string]any{"enabled": true}},
		}, "mesh.istio.tls.mode: ISTIO_MUTUAL sends kvgate plaintext"},
		{"istio SIMPLE with client certificates required", map[string]any{
			"extproc": map[string]any{"tls": map[string]any{"enabled": true, "secretName": "kvgate-extproc-tls", "requireClientCert": true}},
			"mesh":    map[string]any{"istio": map[string]any{"enabled": true, "tls": map[string]any{"mode": "SIMPLE", "credentialName": "ca"}}},
		}, "mesh.istio.tls.mode: MUTUAL is required with extproc.tls.requireClientCert"},
		{"extproc TLS without Secret", map[string]any{"extproc": map[string]any{"tls": map[string]any{"enabled": true}}}, "extproc.tls.secretName"},
		{"envoy gateway TLS without CA", map[string]any{
			"extproc": map[string]any{"tls": map[string]any{"enabled": true, "secretName": "kvgate-extproc-tls"}},
			"mesh":    map[string]any{"envoyGateway": map[string]any{"enabled": true}},
		}, "mesh.envoyGateway.backendTLS.caConfigMap"},
		{"redis username in chart", map[string]any{"redis": map[string]any{"mode": "inChart", "username": "kvgate"}}, "redis.username"},
		{"istio TLS mode", map[string]any{"mesh": map[string]any{"istio": map[string]any{"enabled": true, "tls": map[string]any{"mode": "MTLS"}}}}, "mesh.istio.tls.mode"},
		{"planner target kind", map[string]any{"planner": map[string]any{"enabled": true, "profileConfigMap": "p"}, "config": map[string]any{"planner": map[string]any{
			"actuator": map[string]any{"kind": "kubernetes"},
			"pools":    []any{map[string]any{"name": "aggregated", "max": 2, "kubernetes": map[string]any{"kind": "Pod", "name": "x"}}},
		}}}, "config.planner.pools[0].kubernetes.kind"},
		{"planner target namespace", map[string]any{"planner": map[string]any{"enabled": true, "profileConfigMap": "p"}, "config": map[string]any{"planner": map[string]any{
			"actuator": map[string]any{"kind": "kubernetes"},
			"pools":    []any{map[string]any{"name": "aggregated", "max": 2, "kubernetes": map[string]any{"kind": "Deployment", "name": "x"}}},
		}}}, "config.planner.pools[0].kubernetes.namespace"},
		{"planner without profile", map[string]any{"planner": map[string]any{"enabled": true}}, "planner.profileConfigMap"},
		{"kvagent shm type", map[string]any{"kvagent": map[string]any{"enabled": true, "shm": map[string]any{"type": "tmpfs"}}}, "kvagent.shm.type"},
		{"redis indexer with discovery only", map[string]any{
			"redis":  map[string]any{"mode": "inChart"},
			"config": map[string]any{"extproc": map[string]any{"discovery": map[string]any{"kubernetes": map[string]any{"namespace": "inference", "label_selector": "app=vllm"}}}},
		}, "extproc.withIndexer"},
	}
	for _, c := range cases {
		_, err := renderChart("", c.overrides)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %s", c.name, err, c.want)
		}
	}
}
