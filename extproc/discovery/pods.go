package discovery

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/kvgate/kvgate/extproc/discovery/kubeselect"
	"github.com/kvgate/kvgate/kv/kvfleet"
	corev1 "k8s.io/api/core/v1"
)

var errNoModel = errors.New("no model label and no default model")

// workersFromPods turns the selected pods into workers. A pod counts only
// while its PodReady condition is true and it has an IP; a ready pod that is
// being deleted, or is marked kvgate.io/draining=true (label or annotation),
// is kept as Draining so that its in-flight requests and cache state stay
// known while it gets no new requests. Ready pods that cannot be used (no
// model, bad role, no port) are returned in skipped with the reason.
func workersFromPods(pods []*corev1.Pod, c kubeselect.Config) (ws []kvfleet.Worker, skipped []string) {
	// Deterministic order, so that when two pods claim the same ip:port
	// (host-network pods on one node) the same one wins every time.
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	seen := map[string]bool{}
	for _, p := range pods {
		if !podReady(p) {
			continue
		}
		ip := p.Status.PodIP
		if net.ParseIP(ip) == nil {
			skipped = append(skipped, fmt.Sprintf("pod %s: bad pod IP %q", p.Name, ip))
			continue
		}
		port, err := podPort(p, c)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("pod %s: %v", p.Name, err))
			continue
		}
		id, err := readLabels(p.Labels, c)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("pod %s: %v", p.Name, err))
			continue
		}
		ep := net.JoinHostPort(ip, fmt.Sprint(port))
		if seen[ep] {
			skipped = append(skipped, fmt.Sprintf("pod %s: endpoint %s already taken by another pod", p.Name, ep))
			continue
		}
		seen[ep] = true
		draining := podDraining(p)
		ws = append(ws, rankWorkers(ip, port, id, draining, c)...)
	}
	sortWorkers(ws)
	return ws, skipped
}

// podDraining: a pod being deleted (deletionTimestamp set, still ready
// while it finishes) or marked kvgate.io/draining=true, as a label or an
// annotation, gets no new requests but stays known.
func podDraining(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil || p.Labels[kubeselect.DrainingKey] == "true" || p.Annotations[kubeselect.DrainingKey] == "true"
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podPort is c.Port, or the container port named c.PortName.
func podPort(p *corev1.Pod, c kubeselect.Config) (int, error) {
	if c.Port > 0 {
		return c.Port, nil
	}
	for _, ctr := range p.Spec.Containers {
		for _, cp := range ctr.Ports {
			if cp.Name == c.PortName && cp.ContainerPort > 0 && cp.ContainerPort <= 65535 {
				return int(cp.ContainerPort), nil
			}
		}
	}
	return 0, fmt.Errorf("no container port named %q", c.PortName)
}
