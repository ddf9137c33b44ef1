//go:build helm || kubeapiserver

package deploy

import (
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// workload is a pod template with the object it belongs to.
type workload struct {
	name     string
	kind     string
	selector *metav1.LabelSelector
	template corev1.PodTemplateSpec
}

func workloads(objs map[string]runtime.Object) []workload {
	var out []workload
	for name, o := range objs {
		switch w := o.(type) {
		case *appsv1.Deployment:
			out = append(out, workload{name, "Deployment", w.Spec.Selector, w.Spec.Template})
		case *appsv1.DaemonSet:
			out = append(out, workload{name, "DaemonSet", w.Spec.Selector, w.Spec.Template})
		case *appsv1.StatefulSet:
			out = append(out, workload{name, "StatefulSet", w.Spec.Selector, w.Spec.Template})
		}
	}
	return out
}

// podSecurityProblems checks a pod against the restricted Pod Security
// Standard and the chart's own rules: non-root, read-only root FS, no
// privilege escalation, every capability dropped, RuntimeDefault seccomp,
// no host namespaces; hostPath only where allowed (the kvagent's node dirs).
func podSecurityProblems(spec corev1.PodSpec, allowHostPath bool) []string {
	var ps []string
	add := func(f string, a ...any) { ps = append(ps, fmt.Sprintf(f, a...)) }
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		add("spec: shares a host namespace (hostNetwork/hostPID/hostIPC)")
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && !allowHostPath {
			add("volumes[%s]: hostPath %s outside the kvagent", v.Name, v.HostPath.Path)
		}
	}
	all := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil {
			add("containers[%s]: no securityContext", c.Name)
			continue
		}
		nonRoot := psc.RunAsNonRoot
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if nonRoot == nil || !*nonRoot {
			add("containers[%s]: runAsNonRoot is not true", c.Name)
		}
		uid := psc.RunAsUser
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if uid != nil && *uid == 0 {
			add("containers[%s]: runAsUser 0", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			add("containers[%s]: allowPrivilegeEscalation is not false", c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			add("containers[%s]: privileged", c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			add("containers[%s]: readOnlyRootFilesystem is not true", c.Name)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			add("containers[%s]: capabilities do not drop ALL", c.Name)
		} else if len(sc.Capabilities.Add) > 0 {
			add("containers[%s]: adds capabilities %v", c.Name, sc.Capabilities.Add)
		}
		seccomp := psc.SeccompProfile
		if sc.SeccompProfile != nil {
			seccomp = sc.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			add("containers[%s]: seccompProfile is not RuntimeDefault", c.Name)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			add("containers[%s]: needs cpu and memory requests and a memory limit (HPA and eviction need them)", c.Name)
		}
	}
	return ps
}

func TestPodSecurityDefaults(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(scenarioName(sc), func(t *testing.T) {
			objs := decodeAll(t, mustRender(t, sc, nil))
			ws := workloads(objs)
			if len(ws) == 0 {
				t.Fatal("no workloads rendered")
			}
			for _, w := range ws {
				allowHostPath := w.kind == "DaemonSet" && w.template.Labels["app.kubernetes.io/component"] == "kvagent"
				for _, p := range podSecurityProblems(w.template.Spec, allowHostPath) {
					t.Errorf("%s: %s", w.name, p)
				}
			}
		})
	}
}

// The checker itself catches each weakening it is meant to catch.
func TestPodSecurityCheckerCatchesWeakenings(t *testing.T) {
	objs := decodeAll(t, mustRender(t, "", nil))
	var base corev1.PodSpec
	for _, w := range workloads(objs) {
		if w.template.Labels["app.kubernetes.io/component"] == "extproc" {
			base = w.template.Spec
		}
	}
	if len(base.Containers) == 0 {
		t.Fatal("no extproc Deployment in the default render")
	}
	if ps := podSecurityProblems(base, false); len(ps) != 0 {
		t.Fatalf("baseline has problems: %v", ps)
	}
	yes, no := true, false
	root := int64(0)
	weaken := map[string]func(s *corev1.PodSpec){
		"runAsNonRoot":             func(s *corev1.PodSpec) { s.SecurityContext.RunAsNonRoot = &no },
		"runAsUser 0":              func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.RunAsUser = &root },
		"allowPrivilegeEscalation": func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.AllowPrivilegeEscalation = &yes },
		"readOnlyRootFilesystem":   func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.ReadOnlyRootFilesystem = &no },
		"privileged":               func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.Privileged = &yes },
		"adds capabilities": func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		},
		"seccompProfile": func(s *corev1.PodSpec) {
			s.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		},
		"host namespace": func(s *corev1.PodSpec) { s.HostNetwork = true },
		"hostPath": func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		},
		"memory limit": func(s *corev1.PodSpec) { delete(s.Containers[0].Resources.Limits, corev1.ResourceMemory) },
	}
	for what, f := range weaken {
		s := *base.DeepCopy()
		f(&s)
		if ps := podSecurityProblems(s, false); len(ps) == 0 {
			t.Errorf("weakening %s went unnoticed", what)
		}
	}
}

// Every pod port is covered by a NetworkPolicy selecting the pod, and the
// admin/metrics ports (the extproc's also serves /debug/decisions) admit
// only listed peers; the extproc Service exposes the gRPC port alone.
func TestAdminPortsNotExposed(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(scenarioName(sc), func(t *testing.T) {
			objs := decodeAll(t, mustRender(t, sc, nil))
			var policies []*networkingv1.NetworkPolicy
			for _, o := range objs {
				if np, ok := o.(*networkingv1.NetworkPolicy); ok {
					policies = append(policies, np)
				}
			}
			for _, w := range workloads(objs) {
				for _, c := range w.template.Spec.Containers {
					for _, p := range c.Ports {
						restricted := p.Name == "admin" || p.Name == "http"
						if msg := portPolicyProblem(policies, w.template.Labels, p, restricted); msg != "" {
							t.Errorf("%s container %s port %s: %s", w.name, c.Name, p.Name, msg)
						}
					}
				}
			}
			for name, o := range objs {
				svc, ok := o.(*corev1.Service)
				if !ok || svc.Spec.ClusterIP == corev1.ClusterIPNone {
					continue
				}
				for _, p := range svc.Spec.Ports {
					if p.Name == "admin" || p.Name == "http" {
						t.Errorf("%s: Service exposes the admin port %s", name, p.Name)
					}
				}
			}
		})
	}
}

// portPolicyProblem says why a pod port is not covered as required, or "".
func portPolicyProblem(policies []*networkingv1.NetworkPolicy, podLabels map[string]string, port corev1.ContainerPort, restricted bool) string {
	covered := false
	for _, np := range policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(podLabels)) {
			continue
		}
		for _, rule := range np.Spec.Ingress {
			for _, rp := range rule.Ports {
				if rp.Port == nil || (rp.Port.StrVal != port.Name && int32(rp.Port.IntValue()) != port.ContainerPort) {
					continue
				}
				covered = true
				if restricted && len(rule.From) == 0 {
					return fmt.Sprintf("NetworkPolicy %s admits anyone", np.Name)
				}
			}
		}
	}
	if !covered {
		return "no NetworkPolicy ingress rule names it (so any pod may connect, or none, once another policy selects the pod)"
	}
	return ""
}
