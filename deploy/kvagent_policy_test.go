//go:build helm || kubeapiserver

package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// kvagentPolicy returns the kvagent DaemonSet's pod template and the
// NetworkPolicy selecting it.
func kvagentPolicy(t *testing.T, objs map[string]runtime.Object) (corev1.PodTemplateSpec, *networkingv1.NetworkPolicy) {
	t.Helper()
	var tmpl *corev1.PodTemplateSpec
	for _, w := range workloads(objs) {
		if w.template.Labels["app.kubernetes.io/component"] == "kvagent" {
			tmpl = &w.template
		}
	}
	if tmpl == nil {
		t.Fatal("no kvagent DaemonSet rendered")
	}
	var np *networkingv1.NetworkPolicy
	for _, o := range objs {
		p, ok := o.(*networkingv1.NetworkPolicy)
		if !ok {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err == nil && sel.Matches(labels.Set(tmpl.Labels)) {
			if np != nil {
				t.Fatalf("two NetworkPolicies select the kvagent: %s, %s", np.Name, p.Name)
			}
			np = p
		}
	}
	if np == nil {
		t.Fatal("no NetworkPolicy selects the kvagent pods")
	}
	return *tmpl, np
}

// admitted reports whether a pod with podLabels (in the release's
// namespace) may reach port of np's pods.
func admitted(np *networkingv1.NetworkPolicy, port string, podLabels map[string]string) bool {
	for _, rule := range np.Spec.Ingress {
		named := false
		for _, rp := range rule.Ports {
			named = named || (rp.Port != nil && rp.Port.StrVal == port)
		}
		if !named {
			continue
		}
		if len(rule.From) == 0 {
			return true
		}
		for _, f := range rule.From {
			if f.PodSelector == nil || f.NamespaceSelector != nil || f.IPBlock != nil {
				continue
			}
			if sel, err := metav1.LabelSelectorAsSelector(f.PodSelector); err == nil && sel.Matches(labels.Set(podLabels)) {
				return true
			}
		}
	}
	return false
}

func releasePod(component string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "kvgate", "app.kubernetes.io/instance": releaseName, "app.kubernetes.io/component": component}
}

// The kvagent's policy admits each of its ports to the pods that need it
// and nobody else: peer and transfer to the release's kvagents, events
// and replay to its indexer and extproc, admin to the scrapers.
func TestKvagentNetworkPolicyAdmitsOnlyWhoNeedsEachPort(t *testing.T) {
	objs := decodeAll(t, mustRender(t, "testdata/values-full.yaml", map[string]any{
		"config": map[string]any{"kvagent": map[string]any{"events": "tcp://0.0.0.0:5600", "replay": "tcp://0.0.0.0:5601"}},
	}))
	tmpl, np := kvagentPolicy(t, objs)
	ports := map[string]int32{}
	for _, c := range tmpl.Spec.Containers {
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
	}
	want := map[string]int32{"admin": 9500, "peer": 5700, "transfer": 5701, "events": 5600, "replay": 5601}
	if fmt.Sprint(ports) != fmt.Sprint(want) {
		t.Fatalf("kvagent container ports %v, want %v", ports, want)
	}
	stranger := map[string]string{"app": "something-else"}
	otherRelease := releasePod("kvagent")
	otherRelease["app.kubernetes.io/instance"] = "another-release"
	for port, who := range map[string][]string{"peer": {"kvagent"}, "transfer": {"kvagent"}, "events": {"indexer", "extproc"}, "replay": {"indexer", "extproc"}} {
		for _, c := range []string{"kvagent", "indexer", "extproc", "planner"} {
			got := admitted(np, port, releasePod(c))
			if got != strings.Contains(strings.Join(who, ","), c) {
				t.Errorf("port %s, release pod %s: admitted %v, want only %v", port, c, got, who)
			}
		}
		if admitted(np, port, stranger) || admitted(np, port, otherRelease) {
			t.Errorf("port %s admits pods outside the release", port)
		}
	}
	if admitted(np, "admin", releasePod("kvagent")) {
		t.Error("admin admits the release's pods (want the scrapers only)")
	}
	for _, rule := range np.Spec.Ingress {
		if len(rule.From) == 0 {
			t.Errorf("rule for %v admits anyone", rule.Ports)
		}
	}
}

// With nothing on the network (no metrics, no peers, no events) the
// kvagent admits no ingress at all; peers without mutual TLS do not render.
func TestKvagentNetworkPolicyDefaultsToNothing(t *testing.T) {
	objs := decodeAll(t, mustRender(t, "", map[string]any{"kvagent": map[string]any{"enabled": true}, "metrics": map[string]any{"enabled": false}}))
	_, np := kvagentPolicy(t, objs)
	if len(np.Spec.Ingress) != 0 || len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		t.Fatalf("kvagent policy %+v, want Ingress with no rule (deny all)", np.Spec)
	}
	_, err := renderChart("", map[string]any{"kvagent": map[string]any{"enabled": true},
		"config": map[string]any{"kvagent": map[string]any{"peer": map[string]any{"listen": ":5700", "transfer_listen": ":5701"}}}})
	if err == nil || !strings.Contains(err.Error(), "kvagent.peerTLS.secretName: required") {
		t.Fatalf("peers without kvagent.peerTLS: %v, want a render failure naming it", err)
	}
}

// With peers the kvagent advertises its transfer engine at the pod IP
// (its listener is on every address, which peers cannot dial), or at
// kvagent.advertiseHost when set.
func TestKvagentAdvertisesThePodIP(t *testing.T) {
	for _, c := range []struct {
		values map[string]any
		want   string
	}{
		{nil, "--advertise-host=$(POD_IP)"},
		{map[string]any{"kvagent": map[string]any{"advertiseHost": "node-a.gpu.internal"}}, "--advertise-host=node-a.gpu.internal"},
	} {
		tmpl, _ := kvagentPolicy(t, decodeAll(t, mustRender(t, "testdata/values-full.yaml", c.values)))
		ctr := tmpl.Spec.Containers[0]
		if !slices.Contains(ctr.Args, c.want) {
			t.Errorf("values %v: kvagent args %v, want %s", c.values, ctr.Args, c.want)
		}
		podIP := false
		for _, e := range ctr.Env {
			podIP = podIP || (e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP")
		}
		if !podIP {
			t.Errorf("values %v: no POD_IP from status.podIP in %v", c.values, ctr.Env)
		}
	}
	// Without peers there is nothing to advertise.
	tmpl, _ := kvagentPolicy(t, decodeAll(t, mustRender(t, "", map[string]any{"kvagent": map[string]any{"enabled": true}})))
	for _, a := range tmpl.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--advertise-host") {
			t.Errorf("kvagent without peers: args %v", tmpl.Spec.Containers[0].Args)
		}
	}
}
